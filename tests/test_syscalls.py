"""The syscall gate: OSError for failures, NUL refused, the openat2 startup probe."""

from __future__ import annotations

import errno
import os

import pytest

from sandboxfs.binding import syscalls


def test_openat2_failures_become_oserror(tmp_path) -> None:  # type: ignore[no-untyped-def]
    fd = os.open(tmp_path, os.O_PATH | os.O_DIRECTORY)
    try:
        with pytest.raises(OSError) as caught:
            syscalls.openat2(fd, "missing", os.O_RDONLY, resolve=syscalls.RESOLVE_BENEATH)
        assert caught.value.errno == errno.ENOENT
        with pytest.raises(OSError) as caught:
            syscalls.openat2(fd, "../x", os.O_RDONLY, resolve=syscalls.RESOLVE_BENEATH)
        assert caught.value.errno == errno.EXDEV
    finally:
        os.close(fd)


def test_descriptors_are_close_on_exec(tmp_path) -> None:  # type: ignore[no-untyped-def]
    fd = os.open(tmp_path, os.O_PATH | os.O_DIRECTORY)
    try:
        child = syscalls.openat2(fd, ".", os.O_RDONLY, resolve=syscalls.RESOLVE_BENEATH)
        assert not os.get_inheritable(child)
        os.close(child)
    finally:
        os.close(fd)


def test_nul_bytes_never_reach_c(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="NUL"):
        syscalls.openat2(-1, "a\0b", os.O_RDONLY, resolve=0)


def test_probe_passes_on_this_kernel() -> None:
    syscalls.probe_openat2()


@pytest.mark.parametrize(
    ("simulated", "expected"),
    [("ENOSYS", "Linux 5.6"), ("EPERM", "seccomp")],
)
def test_probe_refuses_without_openat2(
    monkeypatch: pytest.MonkeyPatch, simulated: str, expected: str
) -> None:
    monkeypatch.setenv(syscalls.TEST_OPENAT2_ERRNO_ENV, simulated)
    with pytest.raises(syscalls.Openat2Unavailable) as caught:
        syscalls.probe_openat2()
    assert expected in str(caught.value)
    assert "never falls back" in str(caught.value)


def test_statx_reports_birth_time_and_links(tmp_path) -> None:  # type: ignore[no-untyped-def]
    f = tmp_path / "f"
    f.write_bytes(b"abc")
    os.link(f, tmp_path / "g")
    fd = os.open(f, os.O_PATH)
    try:
        info = syscalls.fstatx(fd)
    finally:
        os.close(fd)
    assert info.size == 3
    assert info.nlink == 2
    assert info.mtime_ns == f.stat().st_mtime_ns
    assert info.btime_ns is not None  # ext4 and tmpfs record birth time
