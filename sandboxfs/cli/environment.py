"""What the environment and the operator's token file add to the command line.

Each function decides one thing, or raises :class:`~sandboxfs.cli.arguments.Refused`:
the bearer token (``--token-file`` or ``SANDBOXFS_TOKEN``, one of them, and never
a weak one unless ``--allow-weak-tokens``), the stdio workspace id (``--workspace-id``
or ``SANDBOXFS_WORKSPACE_ID``), and the test switches (``SANDBOXFS_TEST_*``: the
known ones only make the server stricter or slower; any other is refused).  A
variable set where nothing would read it is refused too: a configuration does
what it says.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from sandboxfs.binding.syscalls import TEST_OPENAT2_ERRNO_ENV
from sandboxfs.cli.arguments import EXIT_FAILED, Arguments, Refused
from sandboxfs.core.watch import TEST_STALL_ENV
from sandboxfs.fs.workspacebase import WORKSPACE_ID_ENV, check_name
from sandboxfs.tools.parsewire import TEST_ABORT_ENV
from sandboxfs.transports.http.credentials import WeakCredential, check_token, read_token_file
from sandboxfs.transports.http.server import TOKEN_ENV, Endpoint

#: The test-only switches the server knows.  None of them widens what it serves:
#: each makes it stricter (a simulated kernel without openat2, a code parser that
#: aborts on marked files) or slower (a stalled step).  Any other SANDBOXFS_TEST_*
#: variable is refused at startup (what a test must weaken lives in the tests).
TEST_SWITCHES: Final = frozenset({TEST_OPENAT2_ERRNO_ENV, TEST_STALL_ENV, TEST_ABORT_ENV})


def test_switches(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The known test switches that are set; Refused (status 1) for an unknown one."""
    found = []
    for name in sorted(environ):
        if not name.startswith("SANDBOXFS_TEST_"):
            continue
        if name not in TEST_SWITCHES:
            raise Refused(
                f"unknown test switch {name} is set; unset it (the server never widens access)",
                EXIT_FAILED,
            )
        found.append(name)
    return tuple(found)


def token(
    args: Arguments, endpoint: Endpoint | None, environ: Mapping[str, str]
) -> tuple[str | None, str]:
    """The bearer token HTTP clients must send and where it came from (None and ""
    for none: loopback only)."""
    from_env = environ.get(TOKEN_ENV)
    if endpoint is None:
        if from_env is not None:
            raise Refused(
                f"{TOKEN_ENV} is set, but a stdio server takes no bearer token: unset it, "
                "or serve HTTP with --http or --unix"
            )
        return None, ""
    weak = args.allow_weak_tokens
    if from_env is not None and args.token_file is not None:
        raise Refused(f"both --token-file and {TOKEN_ENV} give a token; give one of them")
    if from_env is not None:
        if not from_env.strip():
            raise Refused(
                f"{TOKEN_ENV} is set but empty: a token must not be blank (unset it to "
                "serve loopback without one, or give a real token)"
            )
        try:
            return check_token(from_env, TOKEN_ENV, allow_weak=weak), TOKEN_ENV
        except WeakCredential as exc:
            raise Refused(str(exc)) from None
    if args.token_file is not None:
        source = f"--token-file {args.token_file}"
        try:
            return read_token_file(args.token_file, allow_weak=weak), source
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise Refused(f"cannot read {source}: {reason}", EXIT_FAILED) from None
        except WeakCredential as exc:
            raise Refused(str(exc)) from None
    if not endpoint.loopback:
        raise Refused(
            f"refusing to serve {endpoint.describe()} without a bearer token: pass "
            f"--token-file FILE or set {TOKEN_ENV}"
        )
    return None, ""


def workspace_id(args: Arguments, from_env: str | None) -> str | None:
    """The stdio session to resume or make (``--workspace-id``, else the variable);
    ``--workspaces`` is given."""
    if args.serves_http:
        if args.workspace_id is not None or from_env is not None:
            given = "--workspace-id" if args.workspace_id is not None else WORKSPACE_ID_ENV
            raise Refused(
                f"{given} applies to stdio; over HTTP the operator's client names its "
                "session with the Sandboxfs-Workspace-Id header"
            )
        return None
    if args.workspace_id is not None and from_env is not None and from_env != args.workspace_id:
        raise Refused(
            f"--workspace-id {args.workspace_id} and {WORKSPACE_ID_ENV}={from_env} disagree; "
            "give one"
        )
    chosen, where = (
        (args.workspace_id, "--workspace-id")
        if args.workspace_id is not None
        else (from_env, WORKSPACE_ID_ENV)
    )
    if chosen is None:
        return None
    try:
        return check_name(chosen, where)
    except ValueError as exc:
        raise Refused(str(exc)) from None
