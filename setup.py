"""Builds the optional C accelerator for replay (dlxtool/broker/wire/_hotpath.c); metadata is in pyproject.toml.

optional=True: where it cannot be compiled (no compiler or Python headers) dlxtool installs without it
and replay takes its Python path, with the same results, only slower."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("dlxtool.broker.wire._hotpath", ["dlxtool/broker/wire/_hotpath.c"], optional=True,
                             extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"])])
