"""The recorders: one request through a provider, on the wire or its official SDK, one record.

`recorder` reads a stream labkit sends itself, `sdkpath` the same request through the
official SDKs, `failures` names every way a request fails, `lateness` is each record's stamp
self-check, and `capacity` says how many processes a load level's streams need. It sits
above the providers (it asks them to build and parse) and on `labkit.wire` (the connections,
clocks and framing). The record: docs/measurement.md.

Names are imported on first use, so importing `lateness` does not import the providers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from labkit.measurement.capacity import Capacity, WorkersChoice
    from labkit.measurement.failures import exception_message, http_error, stream_error
    from labkit.measurement.recorder import (
        BaseRecorder,
        Measurement,
        RecordContext,
        StreamRecorder,
        assemble_record,
    )
    from labkit.measurement.sdkpath import SDKRecorder, sdk_supported

#: Each public name and the module that defines it.
_HOMES = {
    "BaseRecorder": "recorder",
    "Capacity": "capacity",
    "Measurement": "recorder",
    "RecordContext": "recorder",
    "SDKRecorder": "sdkpath",
    "StreamRecorder": "recorder",
    "WorkersChoice": "capacity",
    "assemble_record": "recorder",
    "exception_message": "failures",
    "http_error": "failures",
    "sdk_supported": "sdkpath",
    "stream_error": "failures",
}

__all__ = [
    "BaseRecorder",
    "Capacity",
    "Measurement",
    "RecordContext",
    "SDKRecorder",
    "StreamRecorder",
    "WorkersChoice",
    "assemble_record",
    "exception_message",
    "http_error",
    "sdk_supported",
    "stream_error",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
