"""``LABKIT_READPATH`` chooses the read path once, at import: ``python`` runs every C step's
Python twin even where the extension is built (and loads it not at all), ``c`` insists on the
extension, unset or ``auto`` takes it where built, and any other value is one error naming
the variable. The import-time wiring is checked in fresh interpreters (the variable is read
once per process); the choice itself in-process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from labkit.errors import ConfigError
from labkit.manifest import ReadPathManifest
from labkit.wire import readpath

pytestmark = pytest.mark.unit

#: What a fresh interpreter reports of its read path: the choice, and which function each
#: module that reads a token actually bound.
_PROBE = """
import json, sys
from labkit.wire import readpath, sse
from labkit.wire.lean import http11, tcp
print(json.dumps({
    "read_path": readpath.READ_PATH.model_dump(mode="json"),
    "implementation": readpath.IMPLEMENTATION,
    "extension_loaded": "labkit.wire._readpath" in sys.modules,
    "recv_stamped": tcp.RECV_STAMPED is not None,
    "whole_chunks": http11.whole_chunks.__module__ or "c",
    "whole_data_events": sse.whole_data_events.__module__ or "c",
    "chunked_data_events": sse.chunked_data_events.__module__ or "c",
}))
"""


def _probe(value: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != readpath.ENV_VAR}
    if value is not None:
        env[readpath.ENV_VAR] = value
    return subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=120
    )


def _probed(value: str | None) -> dict[str, Any]:
    done = _probe(value)
    assert done.returncode == 0, done.stderr
    got: dict[str, Any] = json.loads(done.stdout)
    return got


def test_python_runs_every_python_twin_though_the_extension_is_built() -> None:
    got = _probed("python")
    assert got == {
        "read_path": {
            "implementation": "python",
            "reason": "switched_off",
            "detail": "LABKIT_READPATH=python",
        },
        "implementation": "python",
        "extension_loaded": False,
        "recv_stamped": False,
        "whole_chunks": "labkit.wire.readpath",
        "whole_data_events": "labkit.wire.readpath",
        "chunked_data_events": "labkit.wire.readpath",
    }


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="built on Linux only")
@pytest.mark.parametrize("value", [None, "c"])
def test_unset_auto_or_c_run_the_c_steps_where_built(value: str | None) -> None:
    got = _probed(value)
    assert got["read_path"] == {"implementation": "c", "reason": None, "detail": None}
    assert got["extension_loaded"] and got["recv_stamped"]
    # a C function has no __module__ of its own
    assert got["whole_data_events"] != "labkit.wire.readpath"
    assert got["chunked_data_events"] != "labkit.wire.readpath"
    # Python whatever the setting: no C version of its own (docs/accuracy.md)
    assert got["whole_chunks"] == "labkit.wire.readpath"


@pytest.mark.parametrize("value", ["pyton", " python"])
def test_any_other_value_is_one_error_naming_the_variable(value: str) -> None:
    done = _probe(value)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last == (
        f"labkit.errors.ConfigError: LABKIT_READPATH={value!r} is not a read path: use 'c', "
        "'python' or 'auto' (the default, unset: C where labkit was built with it, else "
        "Python)"
    )


@pytest.mark.parametrize(
    ("value", "wanted"), [(None, "auto"), ("", "auto"), ("auto", "auto"), ("c", "c")]
)
def test_setting_reads_the_variable(value: str | None, wanted: str) -> None:
    assert readpath.setting(value) == wanted


def test_setting_refuses_an_unknown_value() -> None:
    with pytest.raises(ConfigError, match=r"LABKIT_READPATH='fast' is not a read path"):
        readpath.setting("fast")


def test_choose_says_why_python() -> None:
    assert readpath.choose("python", True, None) == ReadPathManifest(
        implementation="python", reason="switched_off", detail="LABKIT_READPATH=python"
    )
    missing = "ModuleNotFoundError: No module named 'labkit.wire._readpath'"
    assert readpath.choose("auto", False, missing) == ReadPathManifest(
        implementation="python", reason="not_built", detail=missing
    )
    assert readpath.choose("auto", True, None) == ReadPathManifest(implementation="c")


def test_c_without_the_extension_is_an_error_not_a_silent_fallback() -> None:
    with pytest.raises(ConfigError, match=r"LABKIT_READPATH=c but labkit was installed without"):
        readpath.choose("c", False, "ImportError: x")


def test_a_read_path_in_words() -> None:
    switched = readpath.choose("python", True, None)
    not_built = readpath.choose("auto", False, "ImportError: x")
    assert switched.describe() == "python (switched off: LABKIT_READPATH=python)"
    assert not_built.describe() == "python (not built: ImportError: x)"
    assert ReadPathManifest(implementation="c").describe() == "c"
