"""Property tests: random trees with inside and escaping symlinks, random request paths.

The model below is written independently of the implementation and states the
resolution rules in a few lines: request paths are normalized lexically;
relative link targets resolve physically and may not climb above their
allowed directory; absolute targets must lie lexically inside an allowed
directory; at most 40 links are followed.  The property: every successful
open's descriptor, read back through /proc/self/fd, lies beneath an allowed
directory and is exactly where the model says, and a path is refused exactly
when the model says it escapes.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sandboxfs.core.allowlist import AllowList, Root
from sandboxfs.core.chokepoint import Handle
from sandboxfs.core.errors import AccessDenied, LimitExceeded, NotADirectory, NotFound
from sandboxfs.core.resolver import Resolver

NAMES = ["a", "b", "l1", "l2", "l3"]
STEPS = [*NAMES, "..", "."]


def lexical(path: str) -> str:
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
        else:
            parts.append(part)
    return "/" + "/".join(parts)


@dataclass
class Model:
    roots: list[str]
    nodes: dict[str, tuple[str, str]] = field(default_factory=dict)  # path -> (kind, target)

    def root_of(self, path: str) -> str | None:
        containing = [r for r in self.roots if path == r or path.startswith(r + "/")]
        return min(containing, key=len) if containing else None

    def kind(self, path: str) -> str | None:
        if path in self.roots:
            return "dir"
        node = self.nodes.get(path)
        return None if node is None else node[0]

    def resolve(self, request: str, follow: bool) -> tuple[str, str]:
        absolute = lexical(request if request.startswith("/") else self.roots[0] + "/" + request)
        root = self.root_of(absolute)
        if root is None:
            return ("escape", "")
        current = root
        pending = [p for p in absolute[len(root) :].split("/") if p]
        hops = 0
        while pending:
            name = pending.pop(0)
            if name == ".":
                continue
            if name == "..":
                if current == root:
                    return ("escape", "")
                current = os.path.dirname(current)
                continue
            candidate = current + "/" + name
            kind = self.kind(candidate)
            if kind is None:
                return ("notfound", "")
            if kind == "link" and (pending or follow):
                hops += 1
                if hops > 40:
                    return ("loop", "")
                target = self.nodes[candidate][1]
                if target.startswith("/"):
                    target = lexical(target)
                    root = self.root_of(target)
                    if root is None:
                        return ("escape", "")
                    current = root
                    pending = [p for p in target[len(root) :].split("/") if p] + pending
                else:
                    pending = [p for p in target.split("/") if p] + pending
                continue
            if pending and kind != "dir":
                return ("notdir", "")
            current = candidate
        return ("ok", current)


@st.composite
def link_targets(draw: st.DrawFn, anchors: list[str]) -> str:
    steps = draw(st.lists(st.sampled_from(STEPS), min_size=1, max_size=4))
    relative = "/".join(steps)
    if draw(st.booleans()):
        return relative
    return draw(st.sampled_from(anchors)) + "/" + relative


@st.composite
def scenario(draw: st.DrawFn) -> tuple[list[tuple[str, str, str]], list[str]]:
    """A tree (relative entries under the anchors) and request paths."""
    anchors = ["@R1", "@R2", "@O", "@B", "/proc/self/root@R1"]
    entries: list[tuple[str, str, str]] = []
    dirs = ["@R1", "@R2", "@O"]
    for _ in range(draw(st.integers(0, 14))):
        parent = draw(st.sampled_from(dirs))
        name = draw(st.sampled_from(NAMES))
        path = parent + "/" + name
        if any(e[0] == path for e in entries):
            continue
        kind = draw(st.sampled_from(["dir", "file", "link", "link"]))
        target = draw(link_targets(anchors)) if kind == "link" else ""
        entries.append((path, kind, target))
        if kind == "dir":
            dirs.append(path)
    requests = []
    for _ in range(draw(st.integers(1, 12))):
        steps = draw(st.lists(st.sampled_from([*STEPS, ""]), min_size=0, max_size=5))
        prefix = draw(st.sampled_from(["", "@R1/", "@R2/", "@O/", "@B/", "@R1-evil/"]))
        request = prefix + "/".join(steps)
        requests.append(request or ".")
    return entries, requests


def _followed_from_its_text(resolver: Resolver, link: Handle, model: Model, request: str) -> None:
    """Following a symlink from the text read through its handle agrees with the
    model's resolution of the same request with the final link followed."""
    expected, where = model.resolve(request, True)
    base = resolver.canonical_handle(link).parent
    try:
        target = resolver.resolve_link(base, link.readlink(), request)
    except AccessDenied:
        assert expected == "escape", (request, expected)
        return
    except NotFound:
        assert expected == "notfound", (request, expected)
        return
    except NotADirectory:
        assert expected == "notdir", (request, expected)
        return
    except LimitExceeded:
        assert expected == "loop", (request, expected)
        return
    with target:
        actual = os.readlink(f"/proc/self/fd/{target.fd}")
    assert (expected, actual) == ("ok", where), request


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(scenario(), st.booleans())
# A link whose text ends in "/." names only a directory: it once led to the file "a".
@example(spec=([("@R1/b", "link", "a/."), ("@R1/a", "file", "")], ["b"]), follow=False)
def test_resolution_matches_the_model_and_never_escapes(
    spec: tuple[list[tuple[str, str, str]], list[str]], follow: bool
) -> None:
    entries, requests = spec
    with tempfile.TemporaryDirectory() as tmp:
        base = os.path.realpath(tmp)
        anchors = {
            "@R1": base + "/r1",
            "@R2": base + "/r2",
            "@O": base + "/o",
            "@B": base,
        }

        def expand(text: str) -> str:
            for key in ("@R1", "@R2", "@O", "@B"):
                text = text.replace(key, anchors[key])
            return text

        for key in ("@R1", "@R2", "@O"):
            os.mkdir(anchors[key])
        model = Model([anchors["@R1"], anchors["@R2"]])
        for path, kind, target in entries:
            real = expand(path)
            if kind == "dir":
                os.mkdir(real)
            elif kind == "file":
                Path(real).write_bytes(b"")
            else:
                os.symlink(expand(target), real)
            model.nodes[real] = (kind, expand(target))
        resolver = Resolver(AllowList.of([Root.open(anchors["@R1"]), Root.open(anchors["@R2"])]))
        roots = (anchors["@R1"], anchors["@R2"])
        for raw in requests:
            request = expand(raw)
            expected, where = model.resolve(request, follow)
            try:
                handle = resolver.resolve(request, follow=follow)
            except AccessDenied:
                assert expected == "escape", (request, expected)
                continue
            except NotFound:
                assert expected == "notfound", (request, expected)
                continue
            except NotADirectory:
                assert expected == "notdir", (request, expected)
                continue
            except LimitExceeded:
                assert expected == "loop", (request, expected)
                continue
            with handle:
                actual = os.readlink(f"/proc/self/fd/{handle.fd}")
                if handle.is_symlink:
                    _followed_from_its_text(resolver, handle, model, request)
            assert expected == "ok", (request, expected, actual)
            assert any(actual == r or actual.startswith(r + "/") for r in roots), (request, actual)
            assert actual == where, (request, actual, where)
