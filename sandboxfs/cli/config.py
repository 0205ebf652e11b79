"""The configuration, built whole and decided once, before anything is served.

:func:`build` reads the parsed command line, the ``--policy`` file, the
``--tenants`` file, the bearer token (``--token-file`` or ``SANDBOXFS_TOKEN``) and
the environment into one immutable :class:`Config`.  A configuration either does
what it says or is refused: :func:`build` returns a Config that states, in one
line (:meth:`Config.describe`), exactly what will be served, or raises
:class:`Refused` with the one conflict (exit status 2; 1 when a file it names
cannot be read).  The rules (each a test in tests/test_config_matrix.py):

* An option that would have no effect is refused (an HTTP option over stdio,
  ``--confine-roots`` over HTTP, per-tenant options beside ``--tenants``, an
  environment variable nothing reads).
* Rules given without a directory (``--hide``, ``--protect``, ``--preset``, a
  policy file's top level, ``--read-only``) apply to every directory ever served:
  the command line's, the policy file's, the workspaces, and the directories a
  client's Roots name (:attr:`Config.roots_policy`).
* Serving HTTP needs something to serve: a directory (command line or policy
  file) or ``--workspaces``; HTTP never takes client Roots.
* ``--require-landlock`` refuses a configuration Landlock cannot cover: without
  directories of its own, a stdio server serves whatever the client's Roots name.
* With directories of its own, a stdio server lets client Roots only narrow them
  unless ``--no-landlock`` is given and no directory carries a policy (the
  reference server's rule: Roots replace them).  This is decided here, not by
  whether the kernel happens to have Landlock.
* Every number is finite and in its documented range (checked as it is parsed).
* ``--workers`` (HTTP) is refused over stdio and beside ``--tenants`` (each tenant
  has one process of its own); over HTTP it defaults to the CPUs.
* Weak credentials are refused (:mod:`sandboxfs.transports.http.credentials`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Final, Literal, final

from sandboxfs.cli import changeoptions, environment
from sandboxfs.cli.arguments import (
    EXIT_FAILED,
    EXIT_USAGE,
    HTTP_ONLY,
    LIMIT_OPTIONS,
    TENANT_OWN,
    Arguments,
    Refused,
    UsageError,
    parse_arguments,
)
from sandboxfs.cli.policies import Directory, PolicyFile, Rules, combine, load_policy_file
from sandboxfs.core.names import quote_path
from sandboxfs.core.pathnames import normalize_absolute
from sandboxfs.core.policy import Policy, PolicyError
from sandboxfs.fs.journalstore import DEFAULT_KEEP_SECONDS, DEFAULT_MAX_BYTES
from sandboxfs.fs.limits import Limits
from sandboxfs.fs.workspacebase import WORKSPACE_ID_ENV
from sandboxfs.session.servinglimits import ServingLimits
from sandboxfs.tenancy.config import Tenants, TenantsError, load_tenants
from sandboxfs.transports.http.connections import SEND_TIMEOUT
from sandboxfs.transports.http.server import TOKEN_ENV, Endpoint

Mode = Literal["stdio", "http", "unix"]
#: What a 2025-era stdio client's Roots do: nothing (HTTP), narrow the server's
#: directories, or name the directories served.
RootsRule = Literal["unused", "confine", "replace"]
LandlockRule = Literal["off", "try", "require"]
LogFormat = Literal["json", "text"]


@final
@dataclass(frozen=True, slots=True)
class Config:
    """Everything the server will do, decided before it starts."""

    mode: Mode
    endpoint: Endpoint | None
    #: The directories of the command line and the policy file (absolute paths).
    directories: tuple[Directory, ...]
    #: The rules for every directory (what Roots-provided directories and workspaces carry).
    rules: Rules
    roots: RootsRule
    landlock: LandlockRule
    #: The seccomp layer (the server's filter and code_map's parse helpers'): the same
    #: three rules as Landlock's.
    seccomp: LandlockRule
    read_only: bool
    no_xdev: bool
    limits: Limits
    #: Calls at once, worker threads, the step timeout, a message's size.
    serving: ServingLimits = field(default_factory=ServingLimits)
    log_level: str = "info"
    #: How stderr lines are written: "text" for people, "json" for machines
    #: (--log-format; by default text on a terminal, JSON otherwise).
    log_format: LogFormat = "json"
    #: Where /metrics is also served without a token (--metrics), or None.
    metrics: Endpoint | None = None
    audit_log: str = "-"
    token: str | None = None
    #: Where the token came from (for the log), or "" without one.
    token_source: str = ""
    allow_weak_tokens: bool = False
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    json_response: bool = False
    shutdown_grace: float = 10.0
    #: A client that takes none of its answer for this long is cut off (HTTP).
    send_timeout: float = SEND_TIMEOUT
    #: Server processes behind the one listener (HTTP; 1 over stdio).
    workers: int = 1
    workspaces: str | None = None
    workspace_id: str | None = None
    tenants: Tenants | None = None
    tenants_file: str | None = None
    #: Where the tenants' front makes its workers' socket directory (--run-dir).
    run_dir: str | None = None
    #: Options of the tenants' front that every worker is started with too.
    worker_options: tuple[str, ...] = ()
    #: The test-only switches set in the environment (each logged as a warning).
    test_switches: tuple[str, ...] = ()
    #: The options given, as written.
    given: frozenset[str] = frozenset()
    #: --policy FILE (its directories are above; its ``ask`` keys are read at startup).
    policy_file: str | None = None
    #: --journal DIR and its bounds (checked here; the directory is opened at startup).
    journal: str | None = None
    journal_max_bytes: int = DEFAULT_MAX_BYTES
    journal_keep: float = DEFAULT_KEEP_SECONDS
    #: --ask patterns (every directory).
    ask: tuple[str, ...] = ()

    @property
    def serves_http(self) -> bool:
        return self.mode != "stdio"

    @property
    def roots_policy(self) -> Policy:
        """The policy of every directory a client's Roots name (unconfined Roots)."""
        every = self.rules
        return Policy.of(
            writable=not self.read_only,
            hide=every.hide,
            protect=every.protect,
            presets=every.presets,
        )

    @property
    def workspace_policy(self) -> Policy:
        """The policy of the workspace directories (made while serving: writable)."""
        return replace(self.roots_policy, writable=True)

    def policy_notes(self) -> list[str]:
        """What list_allowed_directories tells the agent of each directory's policy."""
        notes = []
        for directory in self.directories:
            policy, shown = directory.policy, quote_path(directory.path)
            if not policy.writable:
                notes.append(f"{shown} is read-only: every change there is refused.")
            if policy.protect:
                listed = ", ".join(policy.protect)
                notes.append(f"In {shown}, these stay readable but are never changed: {listed}")
            if policy.hide:
                notes.append(f"In {shown}, some paths are hidden by policy and behave as absent.")
        policy = self.roots_policy
        if self.roots == "replace" and (policy.hide or policy.protect):
            notes.append(
                f"Every directory from the client's Roots carries rules: {_rules(policy)}."
            )
        return notes

    def describe(self) -> str:
        """The one startup line: what is served, and under which rules."""
        if self.tenants is not None:
            names = ", ".join(sorted(self.tenants.by_name))
            assert self.endpoint is not None
            metrics = "" if self.metrics is None else f"metrics on {_metrics_url(self.metrics)}; "
            return (
                f"Configuration: tenants front on {self.endpoint.describe()}: {metrics}"
                f"{len(self.tenants.by_name)} tenant(s) ({names}), each served by its own "
                f"worker with its own directories and rules; {_landlock(self.landlock)}; "
                f"{_seccomp(self.seccomp)}"
            )
        if self.endpoint is None:
            parts = ["stdio"]
        else:
            token = f"bearer token from {self.token_source}" if self.token else "no bearer token"
            parts = [f"HTTP on {self.endpoint.describe()} ({token})"]
            parts.append(f"{self.workers} server process{'es' if self.workers > 1 else ''}")
            if self.metrics is not None:
                parts.append(f"metrics on {_metrics_url(self.metrics)} (no token)")
        shown = [f"{quote_path(d.path)} ({d.policy.describe()})" for d in self.directories]
        parts.append("directories: " + (", ".join(shown) if shown else "none of its own"))
        if self.workspaces is not None:
            parts.append(f"workspaces under {quote_path(self.workspaces)}")
        parts.append(_roots(self.roots, self.roots_policy))
        if self.read_only:
            parts.append("read-only tools only")
        if self.landlock != "off" and not (self.directories or self.workspaces):
            parts.append("Landlock: not applied (the client's Roots decide the directories)")
        else:
            parts.append(_landlock(self.landlock))
        parts.append(_seccomp(self.seccomp))
        return "Configuration: " + "; ".join(parts)


def _metrics_url(endpoint: Endpoint) -> str:
    return endpoint.describe().removesuffix("/mcp") + "/metrics"


def _rules(policy: Policy) -> str:
    said = []
    if policy.hide:
        said.append("hidden " + ", ".join(policy.hide))
    if policy.protect:
        said.append("protected " + ", ".join(policy.protect))
    return "; ".join(said) or "none"


def _roots(rule: RootsRule, policy: Policy) -> str:
    if rule == "unused":
        return "client Roots: not used"
    if rule == "confine":
        return "client Roots: may narrow these directories, never add others"
    return f"client Roots: name the directories served, each {policy.describe()}"


def _landlock(rule: LandlockRule) -> str:
    return {
        "off": "Landlock: off (--no-landlock)",
        "try": "Landlock: applied where the kernel has it (a warning otherwise)",
        "require": "Landlock: required",
    }[rule]


def _seccomp(rule: LandlockRule) -> str:
    return {
        "off": "seccomp: off (--no-seccomp)",
        "try": "seccomp: applied where the kernel has it (a warning otherwise)",
        "require": "seccomp: required",
    }[rule]


def build(args: Arguments, environ: Mapping[str, str], *, terminal: bool = False) -> Config:
    """Decide the whole configuration, or raise Refused.  ``terminal``: whether
    stderr is a terminal (the log format's default)."""
    switches = environment.test_switches(environ)
    _check_modes(args)
    endpoint = args.endpoint
    mode: Mode = "stdio" if endpoint is None else ("unix" if endpoint.unix else "http")
    base = Config(
        mode=mode,
        endpoint=endpoint,
        directories=(),
        rules=Rules(tuple(args.hide), tuple(args.protect), tuple(args.presets)),
        roots="unused",
        landlock="off" if args.no_landlock else ("require" if args.require_landlock else "try"),
        seccomp="off" if args.no_seccomp else ("require" if args.require_seccomp else "try"),
        read_only=args.read_only,
        no_xdev=args.no_xdev,
        limits=args.limits,
        serving=args.serving,
        log_level=args.log_level,
        log_format=_log_format(args.log_format, terminal=terminal),
        metrics=None if args.metrics is None else Endpoint.parse_tcp(args.metrics, "--metrics"),
        audit_log=args.audit_log,
        allow_weak_tokens=args.allow_weak_tokens,
        allowed_hosts=tuple(args.allowed_hosts),
        allowed_origins=tuple(args.allowed_origins),
        json_response=args.json_response,
        shutdown_grace=args.shutdown_grace,
        send_timeout=args.send_timeout,
        workers=(args.workers or available_cpus()) if endpoint is not None else 1,
        test_switches=switches,
        given=frozenset(args.given),
    )
    if args.tenants is not None:
        return _tenants(args, base, environ)
    config = _directories(args, base, environ)
    config = _workspaces(args, config, environ)
    config = _changes(args, config, environ)
    config = replace(config, roots=_roots_rule(args, config))
    token, source = environment.token(args, config.endpoint, environ)
    return replace(config, token=token, token_source=source)


def available_cpus() -> int:
    """The CPUs this process may run on (the default of ``--workers``)."""
    try:
        return max(1, min(64, len(os.sched_getaffinity(0))))
    except OSError:
        return max(1, min(64, os.cpu_count() or 1))


def _log_format(given: str | None, *, terminal: bool) -> LogFormat:
    if given == "json" or (given is None and not terminal):
        return "json"
    return "text"


def _check_modes(args: Arguments) -> None:
    if args.no_landlock and args.require_landlock:
        raise Refused("--no-landlock and --require-landlock contradict each other")
    if args.no_seccomp and args.require_seccomp:
        raise Refused("--no-seccomp and --require-seccomp contradict each other")
    if args.http is not None and args.unix is not None:
        raise Refused("--http and --unix cannot be combined; run two servers")
    if not args.serves_http:
        for option in HTTP_ONLY:
            if option in args.given:
                raise Refused(f"{option} only applies when serving HTTP (--http or --unix)")
    elif args.confine_roots:
        raise Refused("--confine-roots has no effect over HTTP: HTTP never uses client Roots")
    if args.run_dir is not None and args.tenants is None:
        raise Refused("--run-dir only applies with --tenants (it holds the workers' sockets)")


def _tenants(args: Arguments, base: Config, environ: Mapping[str, str]) -> Config:
    """--tenants: HTTP only, and each tenant's directories, rules and token come from
    the file."""
    if not args.serves_http:
        raise Refused("--tenants needs --http HOST:PORT or --unix PATH")
    if args.directories:
        raise Refused(
            "--tenants replaces command-line directories: give each tenant its directories "
            "in the tenants file"
        )
    if "--token-file" in args.given or TOKEN_ENV in environ:
        given = "--token-file" if "--token-file" in args.given else TOKEN_ENV
        raise Refused(
            f"{given} cannot be combined with --tenants: each tenant's token is checked "
            "against its token_sha256 in the tenants file (make one with "
            "'sandboxfs hash-token TOKEN_FILE')"
        )
    for option in TENANT_OWN:
        if option in args.given:
            raise Refused(f"{option} cannot be combined with --tenants: set it per tenant")
    if "--workers" in args.given:
        raise Refused(
            "--workers cannot be combined with --tenants: each tenant is served by one "
            "worker process of its own"
        )
    if args.workspace_id is not None or WORKSPACE_ID_ENV in environ:
        raise Refused(
            "--tenants: a workspace id applies to a stdio server; give a tenant "
            "'workspaces' in the tenants file"
        )
    path = args.tenants or ""
    try:
        tenants = load_tenants(path, allow_weak=args.allow_weak_tokens)
    except TenantsError as exc:
        raise Refused(str(exc), EXIT_USAGE if exc.readable else EXIT_FAILED) from None
    passed = _worker_options(args)
    for tenant in tenants.by_name.values():
        # Each worker's command line, decided now as the worker will decide it (its
        # socket and token are the front's to make: stand-ins here).
        argv = ["--unix", "/run/sandboxfs-tenant.sock", *passed, *tenant.options()]
        worker_env = {**environ, TOKEN_ENV: WORKER_TOKEN_STAND_IN}
        try:
            build(parse_arguments(argv), worker_env)
        except (UsageError, Refused) as exc:
            status = exc.status if isinstance(exc, Refused) else EXIT_USAGE
            raise Refused(f"--tenants {path}: tenant {tenant.name!r}: {exc}", status) from None
    run_dir = None if args.run_dir is None else expand(args.run_dir, environ)
    return replace(
        base, tenants=tenants, tenants_file=path, run_dir=run_dir, worker_options=passed, workers=1
    )


#: Options of the front that every tenant's worker is started with too.
WORKER_FLAGS: Final = (
    "--no-xdev",
    "--no-landlock",
    "--require-landlock",
    "--no-seccomp",
    "--require-seccomp",
    "--json-response",
)
#: The bearer token the checks of a worker's command line assume (the front draws
#: a random one for each worker).
WORKER_TOKEN_STAND_IN: Final = "stand-in-for-the-worker-token-0123456789"  # noqa: S105


def _worker_options(args: Arguments) -> tuple[str, ...]:
    """The front's options every worker gets: the flags above, the limits and the
    shutdown grace (what the front was told applies to every tenant)."""
    passed: list[str] = [option for option in WORKER_FLAGS if option in args.given]
    for option, name in LIMIT_OPTIONS.items():
        if option in args.given:
            caps = args.limits if hasattr(args.limits, name) else args.serving
            passed.append(f"{option}={getattr(caps, name)!r}")
    if "--shutdown-grace" in args.given:
        passed.append(f"--shutdown-grace={args.shutdown_grace!r}")
    return tuple(passed)


def expand(path: str, environ: Mapping[str, str]) -> str:
    """An operator's path made absolute (``~`` is $HOME)."""
    home = environ.get("HOME")
    if home and (path == "~" or path.startswith("~/")):
        path = home + path[1:]
    return normalize_absolute(os.path.abspath(path))


def _directories(args: Arguments, base: Config, environ: Mapping[str, str]) -> Config:
    """The command line's and the policy file's directories, each with its policy."""
    loaded: PolicyFile = (Rules(), [])
    try:
        if args.policy_file is not None:
            loaded = load_policy_file(args.policy_file)
        configured = combine(args.directories, base.rules, loaded, read_only=args.read_only)
    except PolicyError as exc:
        raise Refused(str(exc)) from None
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise Refused(f"cannot read --policy {args.policy_file}: {reason}", EXIT_FAILED) from None
    rules = base.rules + loaded[0]
    directories = tuple(Directory(expand(d.path, environ), d.policy) for d in configured)
    read_only = args.read_only or (
        bool(directories)
        and all(not d.policy.writable for d in directories)
        and args.workspaces is None
    )
    return replace(base, directories=directories, rules=rules, read_only=read_only)


def _workspaces(args: Arguments, config: Config, environ: Mapping[str, str]) -> Config:
    """``--workspaces``, ``--workspace-id`` and SANDBOXFS_WORKSPACE_ID."""
    from_env = environ.get(WORKSPACE_ID_ENV)
    if args.workspaces is None:
        if args.workspace_id is not None:
            raise Refused("--workspace-id needs --workspaces BASE")
        if from_env is not None:
            raise Refused(f"{WORKSPACE_ID_ENV} is set but there is no --workspaces BASE")
        if not config.directories and args.serves_http:
            raise Refused(
                "serving HTTP needs at least one directory on the command line (or in a "
                "--policy file's [[directory]], or --workspaces BASE): HTTP never uses Roots"
            )
        return config
    if args.serves_http and args.read_only:
        raise Refused(
            "--workspaces with --read-only serves stdio only: over HTTP sessions are made "
            "while serving, which a read-only server (and its Landlock) cannot do"
        )
    chosen = environment.workspace_id(args, from_env)
    return replace(config, workspaces=expand(args.workspaces, environ), workspace_id=chosen)


def _roots_rule(args: Arguments, config: Config) -> RootsRule:
    """What a client's Roots may do; refuses what Landlock or --confine-roots cannot
    honour."""
    if args.serves_http:
        return "unused"
    if config.workspaces is not None or config.journal is not None:
        # A session's directory, the stores, the command line's; or beside a journal,
        # which a client's root could otherwise name.
        return "confine"
    if not config.directories:
        where = "command-line directories (or a --policy file's [[directory]])"
        if args.confine_roots:
            raise Refused(f"--confine-roots needs {where} to confine Roots to")
        if args.require_landlock:
            raise Refused(
                f"--require-landlock needs {where} to confine to: without them the "
                "client's Roots decide what is served, which Landlock cannot cover"
            )
        return "replace"
    policed = any(d.policy.active for d in config.directories)
    if args.confine_roots or config.landlock != "off" or policed:
        return "confine"
    return "replace"


def _changes(args: Arguments, config: Config, environ: Mapping[str, str]) -> Config:
    """``--journal`` and ``--ask``, decided (see :mod:`sandboxfs.cli.changeoptions`)."""
    decided = changeoptions.decide(
        args, has_directories=bool(config.directories or config.workspaces)
    )
    journal = None if args.journal is None else expand(args.journal, environ)
    return replace(
        config,
        policy_file=args.policy_file,
        journal=journal,
        journal_max_bytes=decided.max_bytes,
        journal_keep=decided.keep_seconds,
        ask=decided.ask,
    )
