"""The limit rows: the same work without MCP (find, grep, rg and plain Python loops),
measured beside the rows they bound."""

from __future__ import annotations

from collections.abc import Callable

from limits import listing_text, time_command, time_python, tool_path, tree_text
from rows import Ctx, Limit, Measure, expect
from searches import GrepCase


def command_limit(
    name: str, argv: Callable[[Ctx], list[str]], expect_lines: Callable[[Ctx], int]
) -> Callable[[Ctx], tuple[Measure, int | None]]:
    """A limit that runs an external command (output to a file) ``n_walk`` times after a
    warm-up and checks how many lines it printed."""

    def run(ctx: Ctx) -> tuple[Measure, int | None]:
        want = expect_lines(ctx)
        seconds, peak, lines = time_command(
            argv(ctx), runs=ctx.n_walk, expect_lines=want, label=name
        )
        return Measure(seconds * 1e3, f"{lines:,} lines"), peak

    return run


def grep_limits(case: GrepCase) -> tuple[Limit, ...]:
    """``grep -n`` and ``rg -n`` on the same target (-r for the tree, -E for a regex)."""
    flags = ("-rn" if case.target == "tree" else "-n") + ("E" if case.regex else "")
    rg_flags = ["-n", "--no-heading"]  # a literal pattern is found as a literal anyway

    def grep_argv(ctx: Ctx) -> list[str]:
        return [tool_path("grep"), flags, "-e", case.pattern, ctx.p(case.target)]

    def rg_argv(ctx: Ctx) -> list[str]:
        return [tool_path("rg"), *rg_flags, "-e", case.pattern, ctx.p(case.target)]

    return (
        Limit(f"grep {flags}", command_limit(f"grep {flags}", grep_argv, case.expected), 1.0),
        Limit(f"rg {' '.join(rg_flags)}", command_limit("rg", rg_argv, case.expected), 1.0, True),
    )


def _find_argv(*pattern: str) -> Callable[[Ctx], list[str]]:
    return lambda ctx: [tool_path("find"), ctx.p("tree"), *pattern]


FIND_TREE = Limit(
    "find tree",
    command_limit(
        "find tree", _find_argv(), lambda ctx: ctx.spec.n_tree_dirs + ctx.spec.n_tree_files + 1
    ),
)


FIND_PY = Limit(
    "find tree -name '*.py'",
    command_limit("find -name", _find_argv("-name", "*.py"), lambda c: c.spec.n_tree_files // 2),
    1.5,
)


def _python_limit(
    text: Callable[[str], str],
    where: Callable[[Ctx], str],
    runs: Callable[[Ctx], int],
    check: Callable[[Ctx, str], None],
) -> Callable[[Ctx], tuple[Measure, int | None]]:
    def run(ctx: Ctx) -> tuple[Measure, int | None]:
        path = where(ctx)
        per = time_python(lambda: text(path), runs=runs(ctx), check=lambda t: check(ctx, t))
        return Measure(per * 1e3, "in the bench process"), None

    return run


def _check_listing(ctx: Ctx, text: str) -> None:
    n = len(text.splitlines())
    expect("Python listing", n == ctx.spec.listing_entries, f"{n} entries")


def _check_tree(ctx: Ctx, text: str) -> None:
    n = text.count('"type": "file"')
    expect("Python tree", n == ctx.spec.n_tree_files, f"{n} files")


PY_LISTING = Limit(
    "Python scandir+sort+format",
    _python_limit(listing_text, lambda c: c.p("listing"), lambda c: c.n_list, _check_listing),
)


PY_TREE = Limit(
    "Python hand-rolled JSON",
    _python_limit(tree_text, lambda c: c.p("tree"), lambda c: c.n_walk, _check_tree),
    1.5,
)
