"""Mutation checks: break one mechanism at a time and a named test must fail.

Each mutant is applied by ``tests/conftest.py`` in a child pytest (never by the
shipped code); the test named for it must then fail, and it passes in the
normal suite.  A mutant that no test kills means a mechanism nothing proves.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import MUTANTS

ROOT = Path(__file__).resolve().parent.parent

#: mutant -> the test that must fail under it.
KILLED_BY = {
    "drop-RESOLVE_BENEATH": "tests/test_escapes.py::test_every_operation_refuses_escapes",
    # The same mutant, caught by a race: an attacker process swapping a file with a
    # symlink to the outside canary (it escapes in about half the reads).
    "drop-RESOLVE_BENEATH/race": (
        "tests/test_race_attackers.py::test_attacker_process_never_gets_an_escape[swap-file]"
    ),
    "drop-RESOLVE_NO_XDEV": "tests/test_no_xdev.py::test_nothing_behind_a_mount_point_is_reached",
    "inline-path-crosses-mounts": (
        "tests/test_stalled_mount.py::test_the_inline_path_stops_at_a_mount_point_without_waiting"
    ),
    "drop-RESOLVE_NO_SYMLINKS-on-leaves": (
        "tests/test_chokepoint.py::test_a_leaf_is_never_followed_even_when_it_stays_inside"
    ),
    "drop-rename-barrier": (
        "tests/test_appends.py::test_the_rename_barrier_catches_a_name_whose_unlink_is_under_way"
    ),
    "drop-reopen-identity-check": (
        "tests/test_chokepoint.py::test_a_reopened_handle_is_the_same_object_or_nothing"
    ),
    "policy-lets-the-kernel-follow-symlinks": (
        "tests/test_policy.py::test_every_operation_keeps_hidden_entries_absent_and_protected_"
        "ones_unchanged[link-to-hidden-file-open_file-0-follow]"
    ),
    "drop-policy-subtree-check": (
        "tests/test_policy.py::test_a_move_that_would_carry_a_hidden_or_protected_entry_is_refused"
    ),
    "landlock-ignores-directory-policy": (
        "tests/test_policy.py::"
        "test_landlock_alone_refuses_every_change_beneath_a_read_only_directory"
    ),
    "listings-show-hidden-entries": (
        "tests/test_policy.py::test_listings_trees_searches_and_greps_never_show_a_hidden_entry"
    ),
    "policy-judges-the-unquoted-string": (
        "tests/test_policy.py::test_every_operation_keeps_hidden_entries_absent_and_protected_"
        "ones_unchanged[hidden-non-ascii-name~utf8-bytes-open_file-0-follow]"
    ),
    "nested-directories-judged-by-one": (
        "tests/test_policy.py::test_nested_directories_judge_every_path_by_the_rules_of_each"
        "[inner-rule-through-outer-open_file-0-follow]"
    ),
    "drop-change-time-from-tree-revisions": (
        "tests/test_sandbox.py::"
        "test_a_directory_revision_sees_a_change_four_levels_down_by_another_process"
    ),
    "drop-cross-process-lock": (
        "tests/test_scale_out.py::test_conditional_writes_from_two_processes_lose_no_update"
    ),
    "undo-is-blind": (
        "tests/test_journal.py::test_undo_refuses_naming_the_file_when_it_changed_since"
    ),
    "patch-without-rollback": (
        "tests/test_apply_patch.py::test_a_failure_while_committing_takes_back_what_was_made"
    ),
    "patch-without-intent": (
        "tests/test_apply_patch.py::test_a_crash_at_every_step_leaves_all_old_or_all_new"
    ),
    "ask-judges-the-name-given": (
        "tests/test_ask.py::test_the_gate_judges_every_change_at_its_canonical_place"
    ),
    "directory-counts-include-hidden-entries": (
        "tests/test_hidden_metadata.py::"
        "test_directories_with_and_without_hidden_entries_look_the_same"
    ),
    "drop-the-policy-of-client-roots": (
        "tests/test_config.py::test_client_roots_carry_the_rules_given_without_directories"
        "[policy-file]"
    ),
    "seccomp-filter-allows-what-it-lists": (
        "tests/test_seccomp.py::test_every_denied_call_is_refused_by_the_filter_alone"
    ),
    "edit-resolves-twice": (
        "tests/test_sandbox.py::"
        "test_an_edit_replaces_the_file_it_read_when_its_path_changes_meanwhile"
    ),
    "parse-supervisor-inherits-descriptors": (
        "tests/test_parse_helpers.py::"
        "test_the_supervisor_and_its_helpers_hold_no_directory_and_are_confined"
    ),
    "errors-carry-the-os-context": (
        "tests/test_error_gate.py::test_what_the_os_said_goes_to_the_debug_log_never_to_the_client"
    ),
}


def test_every_mutant_has_a_killer() -> None:
    assert {name.partition("/")[0] for name in KILLED_BY} == set(MUTANTS)


@pytest.mark.parametrize("mutant", sorted(KILLED_BY))
def test_the_mutant_is_killed(mutant: str) -> None:
    applied = mutant.partition("/")[0]
    env = {**os.environ, "SANDBOXFS_MUTANT": applied}
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-x",
            "-q",
            "-s",
            "-p",
            "no:cacheprovider",
            KILLED_BY[mutant],
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert f"MUTANT APPLIED: {applied}" in run.stdout
    summary = run.stdout.strip().splitlines()[-1]
    if run.returncode == 0 and "skipped" in summary and "passed" not in summary:
        pytest.skip(f"the killing test cannot run here: {summary}")
    assert run.returncode == 1 and "failed" in summary, run.stdout[-3000:]
