"""Every row of the benchmark, in the order the table shows them."""

from __future__ import annotations

from fixtures import (
    PATCH_FILES,
    STORM_FILES,
    export_repository,
    make_storm,
    restore_edit_file,
    restore_patch_files,
)
from limitrows import FIND_PY, FIND_TREE, PY_LISTING, PY_TREE, grep_limits
from rows import Workload
from rpc import (  # bench/rpc.py (the script's directory is on sys.path)
    PROTOCOL_VERSION,
    STATELESS_VERSION,
)
from searches import HUGE_LITERAL, HUGE_REGEX, TREE_LITERAL, TREE_REGEX, grep_workload, map_workload
from workloads import (
    http_workload,
    w_allowed,
    w_edit,
    w_file_info,
    w_head,
    w_head_10m,
    w_info_big,
    w_info_dir,
    w_list,
    w_list_sizes,
    w_list_top,
    w_patch,
    w_ping,
    w_read_big,
    w_read_multi,
    w_read_pipe,
    w_read_seq,
    w_search,
    w_startup,
    w_tail,
    w_tree,
    w_write,
    w_write_unique,
)

WORKLOADS: list[Workload] = [
    Workload(
        "startup", f"startup: spawn -> tools/list answer, {PROTOCOL_VERSION}", "ms", w_startup
    ),
    Workload(
        "startup_2026",
        f"startup: spawn -> tools/list answer, {STATELESS_VERSION}",
        "ms",
        w_startup,
        stateless=True,
    ),
    Workload("ping", "ping round trip, sequential", "calls/s", w_ping),
    Workload("allowed", "list_allowed_directories, sequential", "calls/s", w_allowed),
    Workload("read_seq", "read_text_file 1 KiB, sequential", "calls/s", w_read_seq),
    Workload("read_pipe", "read_text_file 1 KiB, 32 in flight", "calls/s", w_read_pipe),
    Workload("file_info", "get_file_info, sequential", "calls/s", w_file_info),
    Workload(
        "http_1",
        "read_text_file 1 KiB over HTTP, 32 in flight, --workers 1",
        "calls/s",
        http_workload(1),
        sfs_only=True,
    ),
    Workload(
        "http_n",
        "read_text_file 1 KiB over HTTP, 32 in flight, --workers (the CPUs)",
        "calls/s",
        http_workload(None),
        sfs_only=True,
    ),
    Workload("list", "list_directory, 1,000 entries", "ms", w_list, limits=(PY_LISTING,)),
    Workload("list_sizes", "list_directory_with_sizes, 1,000 entries", "ms", w_list_sizes),
    Workload("list_top", "list_directory, big tree's top (50 dirs)", "ms", w_list_top),
    Workload("info_10m", "get_file_info, 10 MiB file", "ms", w_info_big),
    Workload("info_dir", "get_file_info, big tree's top dir", "ms", w_info_dir),
    Workload("tree", "directory_tree, big tree", "ms", w_tree, limits=(PY_TREE, FIND_TREE)),
    Workload("search", "search_files **/*.py, big tree", "ms", w_search, limits=(FIND_PY,)),
    Workload("read_multi", "read_multiple_files, 100 x 1 KiB", "ms", w_read_multi),
    Workload("head", "read_text_file head=10, huge file", "ms", w_head),
    Workload("tail", "read_text_file tail=10, huge file", "ms", w_tail),
    Workload("head_10m", "read_text_file head=10, 10 MiB file", "ms", w_head_10m),
    Workload("read_10m", "read_text_file whole 10 MiB", "ms", w_read_big),
    Workload("write_1m", "write_file 1 MiB", "ms", w_write),
    Workload(
        "edit_10m",
        "edit_file 1 replacement, 10 MiB",
        "ms",
        w_edit,
        before=lambda ctx: restore_edit_file(ctx.root),
    ),
    # The change journal's cost: the same calls with --journal (sandboxfs only).
    Workload(
        "write_1m_j", "write_file 1 MiB, --journal", "ms", w_write, sfs_only=True, journal=True
    ),
    Workload("write_1m_u", "write_file 1 MiB, new bytes each call", "ms", w_write_unique),
    Workload(
        "write_1m_uj",
        "write_file 1 MiB, new bytes each call, --journal",
        "ms",
        w_write_unique,
        sfs_only=True,
        journal=True,
    ),
    Workload(
        "patch_50",
        f"apply_patch, {PATCH_FILES} files",
        "ms",
        w_patch,
        tool="apply_patch",
        sfs_only=True,
        before=restore_patch_files,
    ),
    Workload(
        "patch_50_j",
        f"apply_patch, {PATCH_FILES} files, --journal",
        "ms",
        w_patch,
        tool="apply_patch",
        sfs_only=True,
        before=restore_patch_files,
        journal=True,
    ),
    Workload(
        "edit_10m_j",
        "edit_file 1 replacement, 10 MiB, --journal",
        "ms",
        w_edit,
        before=lambda ctx: restore_edit_file(ctx.root),
        sfs_only=True,
        journal=True,
    ),
    *(
        Workload(
            key,
            f"grep_files {what}",
            "ms",
            grep_workload(case),
            tool="grep_files",
            sfs_only=True,
            limits=grep_limits(case),
        )
        for key, what, case in (
            ("grep", "literal, big tree", TREE_LITERAL),
            ("grep_re", "regex (RE2), big tree", TREE_REGEX),
            ("grep_huge", "literal, huge file", HUGE_LITERAL),
            ("grep_huge_re", "regex (RE2), huge file", HUGE_REGEX),
        )
    ),
    *(
        Workload(
            key,
            f"code_map {what}",
            "ms",
            map_workload(target, cached=cached),
            tool="code_map",
            sfs_only=True,
            before={"repo": export_repository, "storm": make_storm}.get(target),
        )
        for key, what, target, cached in (
            ("map_repo", "this repository, first call", "repo", False),
            ("map_repo_again", "this repository, again (parse cache)", "repo", True),
            ("map_tree", "big tree (5,000-file cap), first call", "tree", False),
            ("map_tree_again", "big tree, again (parse cache)", "tree", True),
            ("map_storm", f"{STORM_FILES:,} files calling each other, first call", "storm", False),
            ("map_storm_again", f"{STORM_FILES:,} files calling each other, again", "storm", True),
        )
    ),
]
