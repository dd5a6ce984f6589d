"""The `labkit` command, one package: a thin face over the runner, the local server, the
report and the tokenizers.

- `app`: ``run``, ``init``, ``fake-server``, ``kinds`` and the wiring of the others;
- `local`: ``setup`` and ``server start|status|stop``;
- `report`: ``report`` and ``compare``;
- `tokens`: ``tokens`` (the tokenizers, and a provider's own where a config names one).
"""

from labkit.cli.app import app, main

__all__ = ["app", "main"]
