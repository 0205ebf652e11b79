"""Filesystem operations on resolved handles: reads, listings, revisions, writes,
moves, copies and removals.  The :class:`~sandboxfs.fs.facade.Sandbox` façade is
what the tools call.  No MCP types here.
"""
