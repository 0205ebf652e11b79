"""Build hook: compiles the native shim (native/) with cffi. Metadata is in pyproject.toml.

The shim uses only CPython's limited API (cffi builds it as ``_native.abi3.so``), so
the wheel is tagged ``cp311-abi3``: one wheel per architecture for every CPython >= 3.11.
"""

from setuptools import setup

setup(
    cffi_modules=["native/build_native.py:ffibuilder"],
    options={"bdist_wheel": {"py_limited_api": "cp311"}},
)
