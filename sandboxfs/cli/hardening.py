"""Start-up steps for the layers beside openat2 and Landlock: code_map's parse helpers
and the seccomp filter, with ``--no-seccomp`` and ``--require-seccomp``.

Called from :mod:`sandboxfs.cli.main` at three points: :func:`start_parsers`
before any allowed directory is opened (so the parse supervisor, a clean exec
anyway, is started by a process that holds no directory yet); :func:`confine_server`
after Landlock, once nothing is left to open, bind or start; and
:func:`confine_front` for the tenants' front.  Fails closed like Landlock: with
``--require-seccomp`` a kernel without seccomp, or a filter the kernel refuses,
stops the server; without it, each is one loud warning.
"""

from __future__ import annotations

import logging
import socket
import sys
from typing import NoReturn

from sandboxfs.cli.config import Config
from sandboxfs.cli.exits import EXIT_FAILED
from sandboxfs.core import seccomp
from sandboxfs.tools import parsepool

log = logging.getLogger("sandboxfs")


def _fail(message: str) -> NoReturn:
    print(f"sandboxfs: error: {message}", file=sys.stderr)
    raise SystemExit(EXIT_FAILED)


def _check_seccomp(config: Config) -> bool:
    """Whether seccomp filters will be applied; fails with --require-seccomp where the
    kernel cannot filter, warns (once) where it cannot and nobody required it."""
    if config.seccomp == "off":
        return False
    reason = seccomp.unavailable_reason()
    if reason is None:
        return True
    if config.seccomp == "require":
        _fail(f"--require-seccomp: {reason}")
    log.warning(
        "WARNING: %s: no seccomp filter on the server or its code parser "
        "(use --require-seccomp to refuse)",
        reason,
    )
    return False


def start_parsers(config: Config) -> list[parsepool.ParserPool]:
    """Start code_map's parse supervisor (one per server process: ``--workers``) and
    make the first this process's parser; returns them all."""
    filtered = _check_seccomp(config)
    pools = []
    try:
        for _ in range(config.workers):
            pools.append(
                parsepool.ParserPool.start(
                    cpu_seconds=config.limits.search_seconds,
                    seccomp=filtered,
                    require_seccomp=config.seccomp == "require",
                )
            )
    except OSError as exc:
        for pool in pools:
            pool.forget()
        _fail(f"cannot start code_map's parse helpers: {exc.strerror or exc}")
    parsepool.install(pools[0])
    layers = "seccomp, " if filtered else ""
    log.debug(
        "code_map parses in helper processes (%sLandlock without filesystem access, "
        "%d MiB of address space, no descriptor of the server)",
        layers,
        parsepool.MEMORY_BYTES >> 20,
    )
    return pools


def _apply(config: Config, policy: seccomp.Filter, what: str) -> None:
    if config.seccomp == "off":
        log.warning("Warning: seccomp disabled (--no-seccomp): %s makes any syscall", what)
        return
    try:
        status = seccomp.apply(policy)
    except (OSError, ValueError) as exc:
        if config.seccomp == "require":
            _fail(f"cannot apply seccomp to {what}: {exc}")
        log.warning("WARNING: seccomp could not be applied to %s (%s)", what, exc)
        return
    if not status.enforced:  # _check_seccomp warned already, or fails with --require
        if config.seccomp == "require":
            _fail(f"--require-seccomp: {status.detail}")
        return
    log.info("%s", status.detail)


def confine_server(config: Config, listener: socket.socket | None) -> None:
    """The serving process's filter: sockets only of the listener's family (none
    over stdio)."""
    families = () if listener is None else (listener.family,)
    _apply(config, seccomp.server_filter(families), "the server")


def confine_front(config: Config, listener: socket.socket) -> None:
    """The tenants' front's filter (it starts workers: execve stays allowed)."""
    _check_seccomp(config)
    _apply(config, seccomp.front_filter((listener.family,)), "the front")
