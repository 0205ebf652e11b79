"""cffi build script for the sandboxfs native shim (API mode, out of line).

Compiles ``native/sfs.c`` into ``sandboxfs._native``.  The cdef is ``sfs.h``
itself, minus the preprocessor lines cffi cannot parse, so the declarations
exist once.  Not shipped in the wheel; setuptools runs it through
``cffi_modules`` in ``setup.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
HEADER = HERE / "sfs.h"
SOURCE = HERE / "sfs.c"

_SKIPPED_DIRECTIVES = ("#ifndef", "#endif", "#include", "#define SANDBOXFS_")


def _cdef_text() -> str:
    """The header with include guards and includes removed."""
    lines = HEADER.read_text().splitlines()
    return "\n".join(line for line in lines if not line.startswith(_SKIPPED_DIRECTIVES))


ffibuilder = FFI()
ffibuilder.cdef(_cdef_text())
ffibuilder.set_source(
    "sandboxfs._native",
    '#include "sfs.h"',
    # setuptools wants source paths relative to the project directory.
    sources=[os.path.relpath(SOURCE)],
    include_dirs=[str(HERE)],
    extra_compile_args=["-Wall", "-Wextra", "-Werror", "-std=gnu11"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
