"""Acting on a ``--tenants`` configuration: the front, which starts one worker per
tenant and routes each authenticated request to it (:mod:`sandboxfs.tenancy.proxy`).

The configuration was decided whole before this runs: the tenants file read and
checked, and every tenant's worker command line checked as its worker will check
it (:func:`sandboxfs.cli.config.build`), so a tenant that could never start is
refused at startup rather than retried.
"""

from __future__ import annotations

import logging
import signal
import sys
from dataclasses import replace
from functools import partial

import trio

from sandboxfs import __version__
from sandboxfs.cli import hardening, logformat
from sandboxfs.cli.config import Config, LogFormat
from sandboxfs.cli.exits import EXIT_INTERRUPTED, EXIT_OK, INTERRUPTED
from sandboxfs.cli.startup import fail, listen_on
from sandboxfs.core import landlock
from sandboxfs.tenancy.proxy import RunDirError, make_rundir, remove_rundir, serve_front
from sandboxfs.tenancy.supervisor import WorkerSettings
from sandboxfs.transports.http.server import SidecarOptions

log = logging.getLogger("sandboxfs")


def serve_tenants(config: Config) -> int:
    """Serve the tenants front until SIGTERM (exit 0) or SIGINT (130, one line); the
    workers' socket directory is removed however it ends but SIGKILL."""
    assert config.tenants is not None and config.endpoint is not None
    try:
        rundir = make_rundir(config.run_dir)
    except RunDirError as exc:
        fail(str(exc))
    try:
        listener, endpoint = listen_on(config.endpoint)
        config = replace(config, endpoint=endpoint)
        metrics_listener = None
        if config.metrics is not None:
            metrics_listener, metrics_endpoint = listen_on(config.metrics)
            config = replace(config, metrics=metrics_endpoint)
        log.info("%s", config.describe())
        sidecar = SidecarOptions(
            endpoint=endpoint,
            token=None,  # each tenant's, from the tenants file
            allowed_hosts=config.allowed_hosts,
            allowed_origins=config.allowed_origins,
            json_response=config.json_response,
            max_body=config.serving.line_bytes,
            grace_seconds=config.shutdown_grace,
            send_timeout=config.send_timeout,
        )
        settings = WorkerSettings(
            rundir=rundir,
            log_level=config.log_level,
            # Workers write JSON, which the front relays in its own format.
            options=(*config.worker_options, "--log-format=json"),
            grace_seconds=config.shutdown_grace,
            relay=partial(_relay, log_format=config.log_format),
        )
        log.info("sandboxfs %s: tenants front; workers' sockets in %s", __version__, rundir)
        _confine_front(config)
        hardening.confine_front(config, listener)
        path = config.tenants_file or ""
        serving = partial(serve_front, metrics_listener=metrics_listener)
        stopped_by = trio.run(serving, listener, sidecar, path, config.tenants, settings)
    finally:  # (serve_front removed it already, unless it never ran)
        remove_rundir(rundir)
    if stopped_by == signal.SIGINT:  # drained like SIGTERM, but Ctrl-C says so
        print(INTERRUPTED, file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    return EXIT_OK


def _relay(tenant: str, line: bytes, *, log_format: LogFormat) -> None:
    """A line of a tenant's worker on the front's stderr, whole (see logformat)."""
    logformat.WRITER.write_line(logformat.relayed(line, tenant, log_format))


def _confine_front(config: Config) -> None:
    """The front's own Landlock: no TCP beyond its listening socket, signals and abstract
    sockets scoped.  Not the filesystem: the workers it starts inherit its domain."""
    if config.landlock == "off":
        log.warning("Warning: Landlock disabled (--no-landlock) for the front and every worker")
        return
    required = config.landlock == "require"
    try:
        status = landlock.confine_network()
    except (OSError, RuntimeError) as exc:
        if required:
            fail(f"cannot apply Landlock to the front: {exc}")
        log.warning("WARNING: Landlock could not be applied to the front (%s)", exc)
        return
    if not status.enforced and required:
        fail(f"--require-landlock: {status.detail}")
    log.info("front: %s", status.detail)
