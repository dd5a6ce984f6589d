"""labkit's C read path (labkit/wire/_readpath.c), built where it can be.

Everything else is in pyproject.toml. The extension is optional: without a C compiler, or off
Linux, labkit installs without it and runs the same steps in Python
(labkit.wire.readpath).
"""

import sys

from setuptools import Extension, setup

extensions = []
if sys.platform.startswith("linux"):
    extensions.append(
        Extension(
            "labkit.wire._readpath",
            ["labkit/wire/_readpath.c"],
            extra_compile_args=["-O2"],
            optional=True,
        )
    )

setup(ext_modules=extensions)
