"""labkit's C read path (labkit/wire/_readpath.c), timed select() (labkit/wire/_loopclock.c)
and stream figures (labkit/_stampfigures.c), built where they can be.

Everything else is in pyproject.toml. The extensions are optional: without a C compiler, or off
Linux, labkit installs without them and runs the same steps in Python (labkit.wire.readpath,
labkit.wire.loopclock.PyTimedSelector, labkit.timing and labkit.measurement.lateness).
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
    # The timed selector's select() (labkit.wire.loopclock): epoll, so Linux only.
    extensions.append(
        Extension(
            "labkit.wire._loopclock",
            ["labkit/wire/_loopclock.c"],
            extra_compile_args=["-O2"],
            optional=True,
        )
    )
    # The figures must be the Python's floats to the bit: no fused multiply-add.
    extensions.append(
        Extension(
            "labkit._stampfigures",
            ["labkit/_stampfigures.c"],
            extra_compile_args=["-O2", "-ffp-contract=off"],
            optional=True,
        )
    )

setup(ext_modules=extensions)
