"""sandboxfs: a security-first MCP filesystem server for Linux."""

from typing import Any


def __getattr__(name: str) -> Any:
    # __version__ is looked up on first use: the launcher imports this package
    # before it may re-execute the process, and the lookup is not free.
    if name != "__version__":
        raise AttributeError(f"module 'sandboxfs' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    try:
        found = version("sandboxfs")
    except PackageNotFoundError:  # running from a source tree without installing
        found = "0+unknown"
    globals()["__version__"] = found
    return found
