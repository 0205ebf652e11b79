"""cffi build script for the sandboxfs native shim (API mode, out of line).

Compiles ``native/sfs.c`` (the syscall shim), ``native/scan.c`` (grep's batch
helpers) and ``native/seccomp.c`` (installing a seccomp filter) into
``sandboxfs._native``.  The cdef is the headers themselves, minus the
preprocessor lines cffi cannot parse, so the declarations exist once.  The
syscall-number table behind ``sfs_syscall_number`` is generated here from
``native/syscalls.txt`` and ``<sys/syscall.h>``: each name gets this
architecture's number, or -2 where the architecture has no such call.  Not
shipped in the wheel; setuptools runs it through ``cffi_modules`` in ``setup.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
HEADERS = (HERE / "sfs.h", HERE / "scan.h", HERE / "seccomp.h")
SOURCES = (HERE / "sfs.c", HERE / "scan.c", HERE / "seccomp.c")
SYSCALLS = HERE / "syscalls.txt"

_SKIPPED_DIRECTIVES = ("#ifndef", "#endif", "#include", "#define SANDBOXFS_")


def _cdef_text() -> str:
    """The headers with include guards and includes removed."""
    lines = [line for header in HEADERS for line in header.read_text().splitlines()]
    return "\n".join(line for line in lines if not line.startswith(_SKIPPED_DIRECTIVES))


def _syscall_table() -> str:
    """C source of ``sfs_syscall_number``: every name of syscalls.txt with its number."""
    names = sorted(set(SYSCALLS.read_text().split()))
    rows = "\n".join(
        f'#ifdef __NR_{name}\n    {{"{name}", __NR_{name}}},\n#else\n    {{"{name}", -2}},\n#endif'
        for name in names
    )
    return f"""
#include <string.h>
#include <sys/syscall.h>
static const struct {{ const char *name; int number; }} sfs_syscall_table[] = {{
{rows}
}};
int sfs_syscall_number(const char *name)
{{
    for (size_t i = 0; i < sizeof sfs_syscall_table / sizeof sfs_syscall_table[0]; i++)
        if (strcmp(sfs_syscall_table[i].name, name) == 0)
            return sfs_syscall_table[i].number;
    return -1;
}}
"""


ffibuilder = FFI()
ffibuilder.cdef(_cdef_text())
ffibuilder.set_source(
    "sandboxfs._native",
    '#include "sfs.h"\n#include "scan.h"\n#include "seccomp.h"\n' + _syscall_table(),
    # setuptools wants source paths relative to the project directory.
    sources=[os.path.relpath(source) for source in SOURCES],
    include_dirs=[str(HERE)],
    extra_compile_args=["-Wall", "-Wextra", "-Werror", "-std=gnu11"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
