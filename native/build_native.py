"""cffi build script for the sandboxfs native shim (API mode, out of line).

Compiles ``native/sfs.c`` (the syscall shim) and ``native/scan.c`` (grep's batch
helpers) into ``sandboxfs._native``.  The cdef is ``sfs.h`` and ``scan.h``
themselves, minus the preprocessor lines cffi cannot parse, so the declarations
exist once.  Not shipped in the wheel; setuptools runs it through
``cffi_modules`` in ``setup.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
HEADERS = (HERE / "sfs.h", HERE / "scan.h")
SOURCES = (HERE / "sfs.c", HERE / "scan.c")

_SKIPPED_DIRECTIVES = ("#ifndef", "#endif", "#include", "#define SANDBOXFS_")


def _cdef_text() -> str:
    """The headers with include guards and includes removed."""
    lines = [line for header in HEADERS for line in header.read_text().splitlines()]
    return "\n".join(line for line in lines if not line.startswith(_SKIPPED_DIRECTIVES))


ffibuilder = FFI()
ffibuilder.cdef(_cdef_text())
ffibuilder.set_source(
    "sandboxfs._native",
    '#include "sfs.h"\n#include "scan.h"',
    # setuptools wants source paths relative to the project directory.
    sources=[os.path.relpath(source) for source in SOURCES],
    include_dirs=[str(HERE)],
    extra_compile_args=["-Wall", "-Wextra", "-Werror", "-std=gnu11"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
