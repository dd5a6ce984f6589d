"""The benchmarks' ground truth: labkit's truth server (`labkit.truth`), started from this tree.

The server itself lives in the package (``labkit fake-server --truth LOG``; its method is in
`labkit.truth.server`'s docstring and docs/score.md). This file keeps the benchmarks'
interface: `ScriptedServer(ttft_ms=, interval_ms=, tokens=, event_bytes=, tls=)` with
``base_url``, ``url(**script)``, ``stamps()`` and ``ca_file``. `labkit/truth/process.py` and
`labkit/oslimits.py` are loaded by path, so a bench that runs another checkout's labkit
in-process (``--labkit-src``) still serves this tree's truth server.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

__all__ = ["ScriptedServer", "raise_open_files_limit"]

_LABKIT = Path(__file__).resolve().parents[1] / "labkit"


def _load(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


#: The truth server in its own process (`labkit.truth.process.TruthServer`).
ScriptedServer = _load(_LABKIT / "truth" / "process.py", "_labkit_truth_process").TruthServer
raise_open_files_limit = _load(_LABKIT / "oslimits.py", "_labkit_oslimits").raise_open_files_limit
