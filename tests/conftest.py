from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import Tree, make_tree, snapshot
from sandboxfs.binding import syscalls
from sandboxfs.core import chokepoint, landlock, names, policy, seccomp
from sandboxfs.core.chokepoint import confinement, directory
from sandboxfs.fs import describe, listings, trees, writes
from sandboxfs.fs.facade import Sandbox


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    return make_tree(tmp_path)


@pytest.fixture
def public_tree() -> Iterator[Tree]:
    """A tree an ordinary user can reach (pytest's own temp root is private to root)."""
    base = Path(tempfile.mkdtemp(prefix="sandboxfs-test-"))
    base.chmod(0o755)
    try:
        yield make_tree(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def sandbox(tree: Tree) -> Sandbox:
    return tree.sandbox()


@pytest.fixture
def outside_unchanged(tree: Tree):
    """Asserts after the test that nothing outside the allowed directory changed."""
    before = snapshot(tree.outside)
    yield
    assert snapshot(tree.outside) == before


# -- mutants ---------------------------------------------------------------------
#
# tests/test_mutants.py runs named tests in a child pytest with SANDBOXFS_MUTANT
# set: the mechanism under test is broken here, in the tests, never by a switch
# in the code that ships.


def _drop_beneath() -> None:
    confinement.ALWAYS = syscalls.RESOLVE_NO_MAGICLINKS  # type: ignore[misc]


def _drop_no_xdev() -> None:
    confinement.CROSSING = 0  # type: ignore[misc]


def _inline_path_crosses_mounts() -> None:
    flags = chokepoint.Confinement.flags

    def crossing(self: chokepoint.Confinement, *, exact: bool) -> int:
        return flags(dataclasses.replace(self, inline=False), exact=exact)

    chokepoint.Confinement.flags = crossing  # type: ignore[method-assign]


def _drop_no_symlinks_on_leaves() -> None:
    confinement.EXACT = 0  # type: ignore[misc]


def _drop_rename_barrier() -> None:
    writes.rename_barrier = lambda parent: True  # type: ignore[assignment]


def _drop_reopen_identity_check() -> None:
    directory.same_file = lambda a, b: True  # type: ignore[assignment]


def _drop_change_time_from_tree_revisions() -> None:
    def without_ctime(relative: str, kind: str, st: os.stat_result | None, target: str = "") -> str:
        if st is None:
            return f"{relative}\0{kind}\0\0\0{target}"
        size = st.st_size if kind != "directory" else 0
        return f"{relative}\0{kind}\0{size}\0{st.st_mtime_ns}\0{target}"

    trees.describe_entry = without_ctime  # type: ignore[assignment]


def _policy_lets_the_kernel_follow_symlinks() -> None:
    def open_following(self, confinement, flags, *, exact, mode=0):  # type: ignore[no-untyped-def]
        if self.root.policy.active:
            self.root.policy.check_open(self.rel, flags)
        return confinement.open(self.root.fd, self.relpath, flags, exact=exact, mode=mode)

    chokepoint.Location.open = open_following  # type: ignore[method-assign]


def _drop_policy_subtree_check() -> None:
    chokepoint.Directory._check_subtree = lambda self, *args: None  # type: ignore[method-assign]


def _landlock_ignores_directory_policy() -> None:
    def add_roots(ruleset, abi, roots, *, read_only):  # type: ignore[no-untyped-def]
        for root in roots:
            rights = landlock.root_rights(abi, read_only=read_only)
            landlock.syscalls.landlock_add_path_rule(ruleset, rights, root.fd)

    landlock._add_roots = add_roots


def _policy_judges_the_unquoted_string() -> None:
    """Unquoting as it once was: each escaped byte a surrogate of its own, so the
    policy judges a string other than the one for the bytes the kernel opens."""
    import re  # noqa: PLC0415

    escape = re.compile(r'\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|["\\ntrabfv])')
    short = {'"': '"', "\\": "\\", "n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b"}
    short.update({"f": "\f", "v": "\v"})

    def one(match: re.Match[str]) -> str:
        body = match.group(1)
        if body[0] == "x":
            byte = int(body[1:], 16)
            return chr(byte) if byte < 0x80 else chr(0xDC00 + byte)
        return chr(int(body[1:], 16)) if body[0] == "u" else short[body]

    def unquote_name(shown: str) -> str | None:
        if len(shown) < 2 or shown[0] != '"' or shown[-1] != '"':
            return None
        return escape.sub(one, shown[1:-1])

    names.unquote_name = unquote_name  # type: ignore[assignment]


def _nested_directories_judged_by_one() -> None:
    """A path is judged by the rules of the one directory that resolved it."""
    policy.Policy._nested = lambda self, rel: iter(())  # type: ignore[method-assign]


def _listings_show_hidden_entries() -> None:
    policy.Policy.hidden_names = lambda self, rel, names: set()  # type: ignore[method-assign]


def _drop_the_policy_of_client_roots() -> None:
    from sandboxfs.core import roots  # noqa: PLC0415
    from sandboxfs.session import dispatcher  # noqa: PLC0415

    opened_by = roots.roots_from_uris

    def without_policy(*args, **options):  # type: ignore[no-untyped-def]
        return opened_by(*args, **{**options, "policy": policy.OPEN})

    dispatcher.roots_from_uris = without_policy


def _drop_cross_process_lock() -> None:
    # The servers are other processes: tests/test_scale_out.py starts them patched.
    import test_scale_out  # noqa: PLC0415 - a test module: imported only for this mutant

    test_scale_out.SERVER_PATCHES = "no-write-lock"


def _undo_is_blind() -> None:
    """Undo checks nothing: neither what each place holds before, nor under the lock."""
    from sandboxfs.fs import undoing  # noqa: PLC0415

    undoing.matches = lambda held, expect: True  # type: ignore[assignment]
    undoing._revision = lambda state: None  # type: ignore[assignment]


def _patch_without_rollback() -> None:
    from sandboxfs.fs import patches  # noqa: PLC0415

    patches._take_back = lambda made: []  # type: ignore[assignment]


def _patch_without_intent() -> None:
    """apply_patch writes no intent first: a crash mid-patch is not recovered."""
    from sandboxfs.fs import patchintent  # noqa: PLC0415

    begin = patchintent.Intent.begin.__func__  # type: ignore[attr-defined]

    def no_intent(cls, ctx, plan):  # type: ignore[no-untyped-def]
        return begin(cls, ctx.__class__(ctx.resolver, ctx.limits, ctx.revisions), plan)

    patchintent.Intent.begin = classmethod(no_intent)  # type: ignore[assignment]


def _ask_judges_the_name_given() -> None:
    """--ask judges the place as resolved through its name, symlinks and all."""
    from sandboxfs.fs import journaling, recording  # noqa: PLC0415

    def as_named(ctx, parent):  # type: ignore[no-untyped-def]
        location = parent.dir.location
        return recording.Where(parent.path, location.root.path, (*location.rel, parent.leaf))

    journaling.where = as_named  # type: ignore[assignment]


def _directory_counts_include_hidden_entries() -> None:
    # get_file_info reports a directory's raw st_nlink and st_size, and listings sort
    # subdirectories by their raw st_size, whatever the policy hides.
    describe.withholds_directory_counts = lambda policy: False
    listings.withholds_directory_counts = lambda policy: False


def _seccomp_filter_allows_what_it_lists() -> None:
    seccomp.Rule.body = lambda self: [(0x06, 0, 0, seccomp.ALLOW)]  # type: ignore[method-assign]


def _parse_supervisor_inherits_descriptors() -> None:
    import subprocess  # noqa: PLC0415 - only this mutant needs it

    from sandboxfs.tools import parsepool  # noqa: PLC0415

    real = subprocess.Popen

    class Leaky:  # stands in for the subprocess module in parsepool: every fd passed on
        DEVNULL = subprocess.DEVNULL
        TimeoutExpired = subprocess.TimeoutExpired

        @staticmethod
        def Popen(*args, pass_fds=(), **kwargs):  # type: ignore[no-untyped-def]
            fds = sorted(int(fd) for fd in os.listdir("/proc/self/fd") if int(fd) > 2)
            kept = []
            for fd in fds:
                try:
                    os.set_inheritable(fd, True)
                    kept.append(fd)
                except OSError:
                    pass  # the listing's own descriptor, closed by now
            return real(*args, pass_fds=tuple(kept), **kwargs)

    parsepool.subprocess = Leaky  # type: ignore[assignment]


def _errors_carry_the_os_context() -> None:
    from sandboxfs.core import errors  # noqa: PLC0415

    real = errors.from_oserror

    def leaky(exc: OSError, path: str, *, no_xdev: bool = False) -> errors.SandboxError:
        error = real(exc, path, no_xdev=no_xdev)
        error.message += f" ({exc.strerror}: {exc.filename})"  # what the OS said, to the client
        return error

    errors.from_oserror = leaky  # type: ignore[assignment]


def _edit_resolves_twice() -> None:
    """An edit as it was: the path resolved to read, then again to write, the two
    bridged only by comparing the bytes."""
    from sandboxfs.fs.files import open_file  # noqa: PLC0415
    from sandboxfs.fs.operation import Change  # noqa: PLC0415
    from sandboxfs.fs.revisions import SameBytes  # noqa: PLC0415

    def twice(ctx, path, edit):  # type: ignore[no-untyped-def]
        with open_file(ctx, path) as f:
            planned = edit(f)
        if planned is None:
            return Change()
        return writes.replace_file(
            ctx, path, planned.after, expected=SameBytes(planned.before), revision=planned.revision
        )

    writes.rewrite = twice


MUTANTS = {
    "undo-is-blind": _undo_is_blind,
    "patch-without-rollback": _patch_without_rollback,
    "patch-without-intent": _patch_without_intent,
    "ask-judges-the-name-given": _ask_judges_the_name_given,
    "policy-lets-the-kernel-follow-symlinks": _policy_lets_the_kernel_follow_symlinks,
    "drop-policy-subtree-check": _drop_policy_subtree_check,
    "landlock-ignores-directory-policy": _landlock_ignores_directory_policy,
    "listings-show-hidden-entries": _listings_show_hidden_entries,
    "policy-judges-the-unquoted-string": _policy_judges_the_unquoted_string,
    "nested-directories-judged-by-one": _nested_directories_judged_by_one,
    "drop-RESOLVE_BENEATH": _drop_beneath,
    "drop-RESOLVE_NO_XDEV": _drop_no_xdev,
    "inline-path-crosses-mounts": _inline_path_crosses_mounts,
    "drop-RESOLVE_NO_SYMLINKS-on-leaves": _drop_no_symlinks_on_leaves,
    "drop-rename-barrier": _drop_rename_barrier,
    "drop-reopen-identity-check": _drop_reopen_identity_check,
    "drop-change-time-from-tree-revisions": _drop_change_time_from_tree_revisions,
    "drop-cross-process-lock": _drop_cross_process_lock,
    "directory-counts-include-hidden-entries": _directory_counts_include_hidden_entries,
    "drop-the-policy-of-client-roots": _drop_the_policy_of_client_roots,
    "seccomp-filter-allows-what-it-lists": _seccomp_filter_allows_what_it_lists,
    "parse-supervisor-inherits-descriptors": _parse_supervisor_inherits_descriptors,
    "errors-carry-the-os-context": _errors_carry_the_os_context,
    "edit-resolves-twice": _edit_resolves_twice,
}


def pytest_configure(config: pytest.Config) -> None:
    mutant = os.environ.get("SANDBOXFS_MUTANT")
    if mutant:
        MUTANTS[mutant]()
        print(f"MUTANT APPLIED: {mutant}")
