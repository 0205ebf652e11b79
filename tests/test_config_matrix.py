"""The configuration matrix, generated: every option that takes a value, given bad
values, and every combination of modes, decided in-process by the one validation
step (sandboxfs.cli.config.build); a sample of both is also run as real processes,
which must decide the same.

Values: every option of ``VALUE_OPTIONS`` and ``LIMIT_OPTIONS`` (a new option is
walked without a word here) is given nan, inf, -inf, negative, -0.0, zero, empty,
huge and over-long values.  A number must refuse every one of them naming the
option and accept its default; any other option must refuse the empty value and
either accept the rest or refuse them in one line naming the option (never any
other exception).

Flags: every flag of ``FLAGS``, and every pair of them, in each transport: refused
where it would have no effect or contradicts the other, else in force.

Modes: stdio / HTTP / unix by directories or none (client Roots) by no policy /
options / a policy file with only top-level rules / a policy file with a
``[[directory]]`` by read-only by workspaces by tenants by Landlock (default, required,
off, both asked) by --confine-roots.  :data:`REFUSALS` is the specification: the first rule
that applies is the refusal (and its words), and when none applies the
configuration starts and must serve what it says (:func:`_check_served`).
"""

from __future__ import annotations

import hashlib
import itertools
import re
import signal
import subprocess
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sidecar_helpers import unix_request

from mcp_client import SERVER, said, server_env
from sandboxfs.cli.arguments import (
    EXIT_USAGE,
    FLAGS,
    HTTP_ONLY,
    LIMIT_OPTIONS,
    LIMIT_RANGES,
    SHUTDOWN_GRACE_RANGE,
    VALUE_OPTIONS,
    WORKERS_RANGE,
    Refused,
    UsageError,
    help_text,
    parse_arguments,
)
from sandboxfs.cli.config import Config, build
from sandboxfs.fs.limits import Limits
from sandboxfs.session.servinglimits import ServingLimits

STRONG_TOKEN = "matrix-token-0123456789abcdef0123456789"
BAD_VALUES = {
    "nan": "nan",
    "inf": "inf",
    "-inf": "-inf",
    "negative": "-1",
    "negative-zero": "-0.0",
    "zero": "0",
    "empty": "",
    "huge": "9" * 40,
    "exponent": "1e999",
    "long": "x" * 100_000,
}
NUMBERS = {**{option: LIMIT_RANGES[name] for option, name in LIMIT_OPTIONS.items()}}
NUMBERS["--shutdown-grace"] = SHUTDOWN_GRACE_RANGE
NUMBERS["--workers"] = WORKERS_RANGE


@dataclass(frozen=True)
class Place:
    """Real files and directories the matrix names."""

    root: Path
    dir1: Path
    dir2: Path
    base: Path
    top_policy: Path
    dir_policy: Path
    tenants: Path
    token_file: Path


@pytest.fixture(scope="module")
def place(tmp_path_factory: pytest.TempPathFactory) -> Place:
    root = tmp_path_factory.mktemp("matrix")
    dir1, dir2, tenant = root / "d1", root / "d2", root / "tenant"
    for directory in (dir1, dir2, tenant):
        directory.mkdir()
    top = root / "top.toml"
    top.write_text('preset = ["secrets"]\nhide = ["*.log"]\n')
    with_dir = root / "dir.toml"
    with_dir.write_text(f'hide = ["*.log"]\n[[directory]]\npath = "{dir2}"\nmode = "ro"\n')
    tenants = root / "tenants.toml"
    digest = hashlib.sha256(STRONG_TOKEN.encode()).hexdigest()
    tenants.write_text(
        f'[[tenant]]\nname = "t"\ntoken_sha256 = "{digest}"\ndirectories = ["{tenant}"]\n'
    )
    token = root / "token"
    token.write_text(STRONG_TOKEN + "\n")
    token.chmod(0o600)
    return Place(root, dir1, dir2, root / "ws", top, with_dir, tenants, token)


def _decide(argv: list[str], env: dict[str, str] | None = None) -> Config | Refused:
    """What the one validation step decides (a parse error counts as a refusal)."""
    try:
        return build(parse_arguments(argv), env or {"HOME": "/root"})
    except UsageError as exc:
        return Refused(str(exc))
    except Refused as exc:
        return exc


# -- every option that takes a value -----------------------------------------------------


def _context(option: str, place: Place) -> list[str]:
    """A command line where ``option`` means something, derived from the tables."""
    if option == "--tenants":
        return ["--http", "127.0.0.1:0"]
    if option in ("--http", "--unix"):
        return [str(place.dir1)]
    if option == "--workspace-id":
        return ["--workspaces", str(place.base)]
    if option in HTTP_ONLY:
        return ["--http", "127.0.0.1:0", str(place.dir1)]
    return [str(place.dir1)]


VALUE_CASES = [
    (option, label) for option in [*VALUE_OPTIONS, *LIMIT_OPTIONS] for label in BAD_VALUES
]


@pytest.mark.parametrize(("option", "label"), VALUE_CASES)
def test_every_option_refuses_bad_values_naming_itself(
    place: Place, option: str, label: str
) -> None:
    value = BAD_VALUES[label]
    decided = _decide([*_context(option, place), option, value])
    if option in NUMBERS and label == "zero" and NUMBERS[option].low == 0:
        assert isinstance(decided, Config)  # no grace at all: meaningful
        return
    if option in NUMBERS or label == "empty":
        assert isinstance(decided, Refused), (option, value)
        assert str(decided).startswith(f"{option} "), decided
        assert decided.status == EXIT_USAGE
        return
    if isinstance(decided, Refused):
        message = str(decided)
        assert "\n" not in message
        assert option in message or option.removeprefix("--") in message, message


@pytest.mark.parametrize("option", sorted(NUMBERS))
def test_every_number_accepts_its_default_and_both_ends_of_its_range(
    place: Place, option: str
) -> None:
    allowed = NUMBERS[option]

    def written(value: float) -> str:
        return str(int(value)) if allowed.whole else repr(float(value))

    default = _default(LIMIT_OPTIONS[option]) if option in LIMIT_OPTIONS else 10
    for value in (default, allowed.low, allowed.high):
        decided = _decide([*_context(option, place), option, written(value)])
        assert isinstance(decided, Config), (option, value, decided)
    over = _decide([*_context(option, place), option, written(allowed.high * 2)])
    assert isinstance(over, Refused) and str(over).startswith(option)


def _default(name: str) -> float:
    """A cap's default: the filesystem's (Limits) or a serving one (ServingLimits)."""
    caps = Limits() if hasattr(Limits(), name) else ServingLimits()
    value: float = getattr(caps, name)
    return value


def test_every_limit_has_a_range_and_a_documented_default() -> None:
    assert set(LIMIT_RANGES) == {name for name in LIMIT_OPTIONS.values()}
    for name, allowed in LIMIT_RANGES.items():
        assert allowed.accepts(_default(name)), name


# -- every flag, and every pair of flags, in every transport -----------------------------

FLAG_TRANSPORTS = {"stdio": [], "http": ["--http", "127.0.0.1:0"], "unix": ["--unix", "/x.sock"]}
#: Pairs of flags that contradict each other.
CONTRADICTIONS = {
    frozenset({"--no-landlock", "--require-landlock"}),
    frozenset({"--no-seccomp", "--require-seccomp"}),
}


def _flag_refusal(flags: tuple[str, ...], transport: str) -> str | None:
    """The words of the refusal of these flags in this transport, or None."""
    if frozenset(flags) in CONTRADICTIONS:
        return "contradict each other"
    for flag in flags:
        if transport == "stdio" and flag in HTTP_ONLY:
            return f"{flag} only applies when serving HTTP"
        if transport != "stdio" and flag == "--confine-roots":
            return "--confine-roots has no effect over HTTP"
    return None


FLAG_CASES = [
    (flags, transport)
    for transport in FLAG_TRANSPORTS
    for size in (1, 2)
    for flags in itertools.combinations(FLAGS, size)
]


@pytest.mark.parametrize(
    ("flags", "transport"), FLAG_CASES, ids=lambda v: "+".join(v) if isinstance(v, tuple) else v
)
def test_every_flag_and_pair_of_flags_starts_or_is_refused(
    place: Place, flags: tuple[str, ...], transport: str
) -> None:
    argv = [*FLAG_TRANSPORTS[transport], *flags, str(place.dir1)]
    env = {"SANDBOXFS_TOKEN": STRONG_TOKEN} if transport != "stdio" else {}
    decided = _decide(argv, env)
    words = _flag_refusal(flags, transport)
    if words is not None:
        assert isinstance(decided, Refused) and words in str(decided), (flags, decided)
        return
    assert isinstance(decided, Config), (flags, transport, decided)
    for flag in flags:
        assert flag in decided.given
        attribute = FLAGS[flag][0]
        if hasattr(decided, attribute):
            assert getattr(decided, attribute) is True, flag
    assert ("--no-landlock" in flags) == (decided.landlock == "off")
    assert ("--require-landlock" in flags) == (decided.landlock == "require")
    assert ("--no-seccomp" in flags) == (decided.seccomp == "off")
    assert ("--require-seccomp" in flags) == (decided.seccomp == "require")


# -- every combination of modes ----------------------------------------------------------

TRANSPORTS = ("stdio", "http", "unix")
DIRECTORIES = ("dirs", "roots")
POLICIES = ("no-policy", "options", "file-top", "file-dir")
LANDLOCK = ("landlock", "require", "off", "require+off")


@dataclass(frozen=True)
class Combo:
    transport: str
    directories: str
    policy: str
    read_only: bool
    workspaces: bool
    tenants: bool
    landlock: str
    confine_roots: bool
    workers: bool

    @property
    def name(self) -> str:
        flags = [
            self.transport,
            self.directories,
            self.policy,
            "ro" if self.read_only else "rw",
            "ws" if self.workspaces else "no-ws",
            "tenants" if self.tenants else "single",
            self.landlock,
            "confine" if self.confine_roots else "free",
            "workers" if self.workers else "default-workers",
        ]
        return "-".join(flags)

    @property
    def http(self) -> bool:
        return self.transport != "stdio"

    @property
    def own_directories(self) -> bool:
        """Directories of the command line or the policy file."""
        return self.directories == "dirs" or self.policy == "file-dir"

    def argv(self, place: Place) -> list[str]:
        argv: list[str] = []
        if self.transport == "http":
            argv += ["--http", "127.0.0.1:0"]
        elif self.transport == "unix":
            argv += ["--unix", str(place.root / f"{abs(hash(self.name))}.sock")]
        if self.tenants:
            argv += ["--tenants", str(place.tenants)]
        if self.policy == "options":
            argv += ["--hide", "*.log", "--preset", "secrets"]
        elif self.policy == "file-top":
            argv += ["--policy", str(place.top_policy)]
        elif self.policy == "file-dir":
            argv += ["--policy", str(place.dir_policy)]
        if self.read_only:
            argv.append("--read-only")
        if self.workspaces:
            argv += ["--workspaces", str(place.base)]
        if "require" in self.landlock:
            argv.append("--require-landlock")
        if "off" in self.landlock:
            argv.append("--no-landlock")
        if self.confine_roots:
            argv.append("--confine-roots")
        if self.workers:
            argv += ["--workers", "3"]
        if self.directories == "dirs":
            argv.append(str(place.dir1))
        return argv


COMBOS = [
    Combo(*values)
    for values in itertools.product(
        TRANSPORTS,
        DIRECTORIES,
        POLICIES,
        (False, True),
        (False, True),
        (False, True),
        LANDLOCK,
        (False, True),
        (False, True),
    )
]


def _tenant_own(c: Combo) -> bool:
    return c.read_only or c.policy != "no-policy" or c.workspaces


#: The specification: (why, applies to, words of the refusal).  The first that applies
#: is the refusal; a combination none applies to starts.
REFUSALS: list[tuple[str, Callable[[Combo], bool], str]] = [
    (
        "--no-landlock and --require-landlock contradict each other",
        lambda c: c.landlock == "require+off",
        "contradict",
    ),
    (
        "--workers over stdio: one process serves the one client",
        lambda c: c.workers and not c.http,
        "--workers only applies when serving HTTP",
    ),
    (
        "--confine-roots over HTTP: HTTP never uses client Roots",
        lambda c: c.http and c.confine_roots,
        "--confine-roots has no effect over HTTP",
    ),
    (
        "--tenants over stdio: the tenants' front serves HTTP",
        lambda c: c.tenants and not c.http,
        "--tenants needs --http",
    ),
    (
        "--tenants with command-line directories: each tenant's come from the file",
        lambda c: c.tenants and c.directories == "dirs",
        "--tenants replaces command-line directories",
    ),
    (
        "--tenants with --read-only, --hide/--preset, --policy or --workspaces: per tenant",
        lambda c: c.tenants and _tenant_own(c),
        "cannot be combined with --tenants: set it per tenant",
    ),
    (
        "--workers with --tenants: each tenant is served by one process of its own",
        lambda c: c.tenants and c.workers,
        "--workers cannot be combined with --tenants",
    ),
    (
        "HTTP with nothing to serve (no directory of its own, no workspaces): "
        "HTTP never takes client Roots",
        lambda c: c.http and not c.tenants and not c.own_directories and not c.workspaces,
        "serving HTTP needs at least one directory",
    ),
    (
        "--workspaces with --read-only over HTTP: sessions are made while serving",
        lambda c: c.http and not c.tenants and c.workspaces and c.read_only,
        "--workspaces with --read-only serves stdio only",
    ),
    (
        "--confine-roots with no directory of its own: nothing to confine Roots to",
        lambda c: not c.http and not c.own_directories and not c.workspaces and c.confine_roots,
        "--confine-roots needs command-line directories",
    ),
    (
        "--require-landlock with no directory of its own over stdio: client Roots "
        "decide what is served, which Landlock cannot cover",
        lambda c: (
            not c.http and not c.own_directories and not c.workspaces and c.landlock == "require"
        ),
        "--require-landlock needs command-line directories",
    ),
]


def expected_refusal(c: Combo) -> tuple[str, str] | None:
    for why, applies, words in REFUSALS:
        if applies(c):
            return why, words
    return None


@pytest.mark.parametrize("combo", COMBOS, ids=lambda c: c.name)
def test_every_combination_starts_or_is_refused(place: Place, combo: Combo) -> None:
    decided = _decide(combo.argv(place))
    refusal = expected_refusal(combo)
    if refusal is not None:
        assert isinstance(decided, Refused), (combo.name, refusal)
        assert refusal[1] in str(decided), (combo.name, str(decided))
        assert decided.status == EXIT_USAGE and "\n" not in str(decided)
        return
    assert isinstance(decided, Config), (combo.name, str(decided))
    _check_served(combo, decided, place)


def _check_served(c: Combo, config: Config, place: Place) -> None:
    """An accepted configuration serves exactly what it says."""
    assert config.mode == c.transport
    line = config.describe()
    assert line.startswith("Configuration: ") and "\n" not in line
    if c.tenants:
        assert config.tenants is not None and list(config.tenants.by_name) == ["t"]
        assert config.directories == () and config.roots == "unused"
        for flag, rule in (("--require-landlock", "require"), ("--no-landlock", "off")):
            assert (flag in config.worker_options) == (c.landlock == rule)
        return
    expected = [str(place.dir1)] if c.directories == "dirs" else []
    if c.policy == "file-dir":
        expected.append(str(place.dir2))
    assert [d.path for d in config.directories] == expected
    for directory in config.directories:
        assert directory.path in line
    everywhere = {"options": ("*.log",), "file-top": ("*.log",), "file-dir": ("*.log",)}
    wanted = set(everywhere.get(c.policy, ()))
    for policy in [d.policy for d in config.directories] + [config.roots_policy]:
        assert wanted <= set(policy.hide), (c.name, policy)  # the rules reach everything
        if c.read_only:
            assert not policy.writable
    if c.policy in ("options", "file-top"):
        assert ".env*" in config.roots_policy.hide  # the secrets preset, for Roots too
    all_read_only = bool(config.directories) and not any(
        d.policy.writable for d in config.directories
    )
    assert config.read_only == (c.read_only or (all_read_only and not c.workspaces))
    if c.http:
        assert config.roots == "unused" and "client Roots: not used" in line
        assert config.directories or config.workspaces  # something is served
    elif c.workspaces or config.directories:
        policed = any(d.policy.active for d in config.directories)
        free = c.landlock == "off" and not c.confine_roots and not policed and not c.workspaces
        assert config.roots == ("replace" if free else "confine")
    else:
        assert config.roots == "replace" and "client Roots: name the directories" in line
    if c.landlock == "require":
        assert config.roots != "replace"  # Landlock covers everything that may be served
        assert "Landlock: required" in line
    if c.workspaces:
        assert config.workspaces == str(place.base)


def refused_combinations() -> Iterator[tuple[str, list[str]]]:
    """Every reason the matrix refuses for, with the combinations refused for it (for
    the issue's closing note: python -c 'import test_config_matrix as m; m.report()')."""
    for why, _, _ in REFUSALS:
        names = [c.name for c in COMBOS if (r := expected_refusal(c)) and r[0] == why]
        if names:
            yield why, names


def report() -> None:  # pragma: no cover - a tool for the note, not a test
    for why, names in refused_combinations():
        print(f"{why}: {len(names)} combination(s)")
        for name in names:
            print(f"    {name}")


def test_the_matrix_both_starts_and_refuses() -> None:
    """A matrix where nothing starts (or nothing is refused) would prove nothing."""
    reasons = dict(refused_combinations())
    assert len(reasons) == len(REFUSALS)  # every rule refuses something
    started = [c for c in COMBOS if expected_refusal(c) is None]
    assert {c.transport for c in started} == set(TRANSPORTS)
    assert any(c.tenants for c in started) and any(c.directories == "roots" for c in started)


# -- a sample, as real processes ---------------------------------------------------------


def _sample() -> list[Combo]:
    """One refused combination per reason, and started ones of every transport."""
    chosen = [names[0] for _, names in refused_combinations()]
    by_name = {c.name: c for c in COMBOS}
    picked = [by_name[name] for name in chosen]
    for wanted in (
        "stdio-dirs-file-dir-rw-no-ws-single-require-free-default-workers",
        "stdio-roots-file-top-ro-no-ws-single-landlock-free-default-workers",
        "stdio-roots-no-policy-rw-ws-single-landlock-confine-default-workers",
        "http-dirs-options-rw-no-ws-single-landlock-free-default-workers",
        "unix-roots-file-dir-rw-no-ws-single-off-free-default-workers",
        "http-roots-no-policy-rw-no-ws-tenants-require-free-default-workers",
        "http-dirs-no-policy-rw-ws-single-landlock-free-workers",
        "unix-dirs-no-policy-rw-no-ws-single-landlock-free-workers",
    ):
        picked.append(by_name[wanted])
    return picked


def _normalized(line: str) -> str:
    return re.sub(r"127\.0\.0\.1:[0-9]+/mcp", "127.0.0.1:0/mcp", line)


@pytest.mark.parametrize("combo", _sample(), ids=lambda c: c.name)
def test_a_real_process_decides_as_the_matrix_does(place: Place, combo: Combo) -> None:
    argv = combo.argv(place)
    decided = _decide(argv)
    env = server_env({"SANDBOXFS_TOKEN": STRONG_TOKEN} if combo.http and not combo.tenants else {})
    if isinstance(decided, Refused):
        done = subprocess.run(
            [*SERVER, *argv], input="", capture_output=True, text=True, env=env, timeout=60
        )
        assert done.returncode == decided.status
        assert done.stderr.splitlines()[0] == f"sandboxfs: error: {decided}"
        assert "Traceback" not in done.stderr
        return
    expected = _expected_line(combo, argv)
    process = subprocess.Popen(
        [*SERVER, *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert process.stdin is not None and process.stderr is not None
    try:
        said = _wait_for(process, "Configuration: ")
        assert _normalized(said) == _normalized(expected)
        if combo.http:
            url = _wait_for(process, "sandboxfs serving MCP on ").rpartition(" ")[2]
            assert _healthz(url) == 200  # answered once it serves (and handles SIGTERM)
    finally:
        if combo.http:
            process.send_signal(signal.SIGTERM)
        process.stdin.close()
        code = process.wait(timeout=60)
        rest = process.stderr.read()
        process.stderr.close()
    assert code == 0, rest
    assert "Traceback" not in rest


def _healthz(url: str) -> int:
    """GET /healthz of a server at ``url`` (waits in the listen queue until it serves)."""
    if url.startswith("unix:"):
        return unix_request(url.removeprefix("unix:"), "GET", "/healthz")
    with urllib.request.urlopen(url.removesuffix("/mcp") + "/healthz", timeout=60) as answer:
        return int(answer.status)


def _expected_line(combo: Combo, argv: list[str]) -> str:
    env: dict[str, Any] = {"HOME": "/root"}
    if combo.http and not combo.tenants:
        env["SANDBOXFS_TOKEN"] = STRONG_TOKEN
    decided = _decide(argv, env)
    assert isinstance(decided, Config), decided
    return decided.describe()


def _wait_for(process: subprocess.Popen[str], start: str) -> str:
    """The first line of the server's log that starts so (read as it comes)."""
    assert process.stderr is not None
    seen = []
    for line in process.stderr:
        seen.append(line)
        if said(line).startswith(start):
            return said(line)
    raise AssertionError(f"no line starting {start!r}:\n" + "".join(seen))


def test_the_readme_and_the_help_state_every_range() -> None:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    text = help_text()
    for option, allowed in NUMBERS.items():
        span = allowed.describe()
        rows = [line for line in readme.splitlines() if line.startswith(f"| `{option} N` |")]
        if option in LIMIT_OPTIONS:
            assert len(rows) == 1 and f"| {span}" in rows[0], (option, rows)
        else:
            unit = "processes" if option == "--workers" else "seconds"
            assert f"`{option}` (HTTP) takes {span} {unit}" in readme
        assert any(option in line and span in line for line in text.splitlines()), option
