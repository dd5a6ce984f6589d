"""The `labkit` command, one package: a thin face over the runner, the local server, the
report, the tokenizers and the rest, one module a group of commands (`app`: ``run``,
``kinds`` and the wiring of the others; which module holds each command: docs/architecture.md).
"""

from labkit.cli.app import app, main

__all__ = ["app", "main"]
