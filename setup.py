"""The one C extension, optional: where it cannot be built (no compiler), oncelog uses
the same loop in Python (oncelog.client.records). Everything else is in pyproject.toml."""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("oncelog.client._record_starts", ["src/oncelog/client/_record_starts.c"], optional=True,
              extra_compile_args=["-O2"]),
])
