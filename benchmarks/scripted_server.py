"""The benchmarks' ground truth: labkit's truth server (`labkit.truth`), started from this tree.

The server itself lives in the package (``labkit fake-server --truth LOG``; its method is in
`labkit.truth.server`'s docstring and docs/score.md). This file keeps the benchmarks'
interface: `ScriptedServer(ttft_ms=, interval_ms=, tokens=, event_bytes=, tls=)` with
``base_url``, ``url(**script)``, ``stamps()`` and ``ca_file``. `labkit/truth/process.py` is
loaded by path, so a bench that runs another checkout's labkit in-process (``--labkit-src``)
still serves this tree's truth server.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

__all__ = ["ScriptedServer", "raise_open_files_limit"]

_PROCESS = Path(__file__).resolve().parents[1] / "labkit" / "truth" / "process.py"
_spec = importlib.util.spec_from_file_location("_labkit_truth_process", _PROCESS)
assert _spec is not None and _spec.loader is not None
_process = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _process
_spec.loader.exec_module(_process)

#: The truth server in its own process (`labkit.truth.process.TruthServer`).
ScriptedServer = _process.TruthServer
raise_open_files_limit = _process.raise_open_files_limit
