"""Build hook: compiles the native shim (native/) with cffi. Metadata is in pyproject.toml."""

from setuptools import setup

setup(cffi_modules=["native/build_native.py:ffibuilder"])
