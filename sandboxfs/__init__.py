"""sandboxfs: a security-first MCP filesystem server for Linux."""

#: The release, as pyproject.toml states it (tests/test_cli.py checks that they agree):
#: a constant, because asking the installed metadata costs ~30 ms at every start.
__version__ = "0.1.0"
