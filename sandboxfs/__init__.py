"""sandboxfs: a security-first MCP filesystem server for Linux."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("sandboxfs")
except PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0+unknown"
