"""Which timed select() runs: the C one where labkit was built with it, the Python reference
with ``LABKIT_READPATH=python`` (the extension then not loaded) or where the extension
cannot be imported, and one error for ``c`` without it. The import-time wiring is checked in
fresh interpreters; the choice itself in-process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from labkit.errors import ConfigError
from labkit.wire import loopclock, readpath

pytestmark = pytest.mark.unit

#: A fresh interpreter's timed selector; `block` makes the extension unimportable first.
_PROBE = """
import json, sys
if {block}:
    sys.modules["labkit.wire._loopclock"] = None  # an import of it raises ImportError
from labkit.wire import loopclock
loop = loopclock.new_event_loop()
selector = loopclock.loop_clock(loop)
print(json.dumps({{
    "implementation": loopclock.SELECT_IMPLEMENTATION,
    "python_class": type(selector) is loopclock.PyTimedSelector,
    "extension_loaded": bool(sys.modules.get("labkit.wire._loopclock")),
    "counters": type(selector.schedstat).__name__ if selector.schedstat else None,
}}))
loop.close()
"""


def _probed(value: str | None, block: bool = False) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != readpath.ENV_VAR}
    if value is not None:
        env[readpath.ENV_VAR] = value
    done = subprocess.run(
        [sys.executable, "-c", _PROBE.format(block=block)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    got: dict[str, Any] = json.loads(done.stdout)
    return got


def test_python_runs_the_python_selector_and_loads_no_extension() -> None:
    got = _probed("python")
    assert got["implementation"] == "python" and got["python_class"]
    assert not got["extension_loaded"]
    assert got["counters"] in (None, "_Schedstat")


def test_an_unimportable_extension_falls_back_to_the_python_selector() -> None:
    got = _probed(None, block=True)
    assert got == {
        "implementation": "python",
        "python_class": True,
        "extension_loaded": False,
        "counters": got["counters"],
    }
    assert got["counters"] in (None, "_Schedstat")


def test_the_default_runs_the_c_selector_where_built() -> None:
    if loopclock.compiled_module()[0] is None:
        pytest.skip("labkit was built without labkit.wire._loopclock")
    got = _probed(None)
    assert got["implementation"] == "c" and not got["python_class"]
    assert got["counters"] in (None, "Schedstat")  # read in C without a call


def test_c_without_the_extension_is_one_error_naming_the_variable() -> None:
    with pytest.raises(ConfigError, match=r"LABKIT_READPATH=c .*ImportError: gone"):
        loopclock.choose("c", None, "ImportError: gone")
    assert loopclock.choose("auto", None, "ImportError: gone") == "python"
    assert loopclock.choose("auto", object(), None) == "c"
    assert loopclock.choose("python", object(), None) == "python"
