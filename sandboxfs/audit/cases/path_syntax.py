"""Path syntax: ``..``, absolute outside paths, prefix and quote siblings, NUL, long and
encoded paths."""

from __future__ import annotations

from pathlib import Path

from sandboxfs.audit.cases.base import (
    case,
    refused,
)
from sandboxfs.audit.harness import (
    CaseFailed,
    Fixture,
    Session,
    in_fresh_server,
)

# -- path syntax -----------------------------------------------------------------------


@case("path-syntax", "relative-dotdot")
async def _dotdot(s: Session, fx: Fixture) -> None:
    depth = len(fx.root.relative_to(fx.base / "root").parts)
    path = "../" * (depth + 1) + f"outside/{fx.outside.name}/secret.txt"
    refused(await s.call("read_text_file", path=fx.rel(path)), "a ../ path out of the root")
    refused(await s.call("read_text_file", path=path), "a relative ../ path")


@case("path-syntax", "absolute-outside")
async def _absolute(s: Session, fx: Fixture) -> None:
    refused(await s.call("read_text_file", path=str(fx.outside / "secret.txt")), "an outside path")
    refused(await s.call("list_directory", path=str(fx.outside)), "an outside directory")


@case("path-syntax", "prefix-sibling")
async def _prefix_sibling(s: Session, fx: Fixture) -> None:
    sibling = fx.base / f"root-evil-{fx.root.name}"
    sibling.mkdir()
    (sibling / "secret.txt").write_bytes(fx.canary)
    refused(await s.call("read_text_file", path=str(sibling / "secret.txt")), "a prefix sibling")
    refused(await s.call("list_directory", path=str(sibling)), "a prefix sibling directory")
    reply = await s.call("write_file", path=str(sibling / "new.txt"), content="escaped")
    if (sibling / "new.txt").exists():
        raise CaseFailed(f"wrote into a prefix sibling directory ({reply.text[:80]!r})")


@case("path-syntax", "quote-and-space-siblings")
async def _quote_siblings(s: Session, fx: Fixture) -> None:
    root = fx.base / "root"
    for suffix in ("'", " ", '"'):
        sibling = Path(str(root) + suffix)
        sibling.mkdir(exist_ok=True)
        (sibling / f"secret-{fx.root.name}.txt").write_bytes(fx.canary)
        refused(await s.call("list_directory", path=str(sibling)), f"the sibling {sibling.name!r}")
        await s.call("write_file", path=str(sibling / "escaped.txt"), content="escaped")
        if (sibling / "escaped.txt").exists():
            (sibling / "escaped.txt").unlink()
            raise CaseFailed(f"wrote into the sibling directory {sibling.name!r}")


@case("path-syntax", "dotdot-inside-absolute")
async def _dotdot_absolute(s: Session, fx: Fixture) -> None:
    depth = len(fx.root.relative_to(fx.base).parts)
    path = fx.rel(*[".."] * depth, "outside", fx.outside.name, "secret.txt")
    refused(await s.call("read_text_file", path=path), "root/../outside")


@case("path-syntax", "nul-byte")
async def _nul(s: Session, fx: Fixture) -> None:
    refused(await s.call("read_text_file", path=fx.rel("inside.txt\0.png")), "a path with NUL")


@case("path-syntax", "very-long-path")
async def _long(s: Session, fx: Fixture) -> None:
    await s.call("read_text_file", path=fx.rel("a" * 300, *["b" * 200] * 40))


@case("path-syntax", "encoded-and-backslash")
async def _encoded(s: Session, fx: Fixture) -> None:
    for path in ("%2e%2e/%2e%2e/outside", "..\\..\\outside\\secret.txt", "file:///etc/passwd"):
        await s.call("read_text_file", path=fx.rel(path))


def _home(fx: Fixture) -> None:
    """A home directory for a fresh server (outside, so snapshotted)."""
    (fx.outside / "home").mkdir()
    (fx.outside / "home" / "home-secret.txt").write_bytes(fx.canary)


@case("path-syntax", "tilde-is-not-the-home-directory", _home)
async def _tilde(s: Session, fx: Fixture) -> None:
    """``~`` is a name like any other: a server that expands it to ``$HOME`` reads
    there, or names the home directory's path in its answer."""
    home = fx.outside / "home"
    calls: list[tuple[str, dict[str, object]]] = [
        ("read_text_file", {"path": "~/home-secret.txt"}),
        ("list_directory", {"path": "~"}),
        ("get_file_info", {"path": "~"}),
        ("write_file", {"path": "~/planted.txt", "content": "x"}),
        ("create_directory", {"path": "~/made"}),
        ("search_files", {"path": "~", "pattern": "*"}),
        ("list_directory", {"path": "~/"}),
    ]

    async def body(fresh: Session) -> None:
        for tool, arguments in calls:
            if not fresh.has(tool):
                continue
            reply = await fresh.call(tool, **arguments)
            request = f"{tool}({', '.join(f'{k}={v!r}' for k, v in arguments.items())})"
            if fx.token in reply.raw:
                raise CaseFailed(f"{request} was served from the home directory ($HOME)")
            if str(home) in reply.raw:
                raise CaseFailed(f"{request} names the home directory: {reply.text[:160]!r}")

    await in_fresh_server(s, body, env={**s.env, "HOME": str(home)})
