"""``sandboxfs audit``: attack an MCP filesystem server and report what got through.

The entry point is :func:`sandboxfs.audit.runner.main`; the attacks are in
:mod:`sandboxfs.audit.cases`.
"""
