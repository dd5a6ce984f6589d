"""The measurement core: the clocks, the connections and the stamping behind every record.

The recorders (`recorder` for labkit's own HTTP, `sdkpath` for the official SDKs) and what
they decide failures are called (`failures`); the connections a provider is handed
(`connections`, `proxies`), the lean transport (`lean`), the timed loop (`loopclock`) and each
record's stamp self-check (`lateness`); the wire framing providers parse on (`sse`,
`fastjson`); what one process can read (`capacity`). The record: docs/measurement.md.

Names are imported on first use, so a provider importing `sse` or `connections` does not
import the recorder (which imports the providers).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from labkit.measurement.capacity import Capacity, WorkersChoice
    from labkit.measurement.connections import Connections
    from labkit.measurement.failures import exception_message, http_error, stream_error
    from labkit.measurement.lean import LeanTransport, kernel_stamps_available, lean_applies
    from labkit.measurement.loopclock import LatenessTracker, TimedSelector, loop_clock
    from labkit.measurement.recorder import (
        BaseRecorder,
        Measurement,
        RecordContext,
        StreamRecorder,
        assemble_record,
    )
    from labkit.measurement.sdkpath import SDKRecorder, sdk_supported
    from labkit.measurement.sse import NDJSONParser, SSEEvent, SSEParser

#: Each public name and the module that defines it.
_HOMES = {
    "BaseRecorder": "recorder",
    "Capacity": "capacity",
    "Connections": "connections",
    "LatenessTracker": "loopclock",
    "LeanTransport": "lean",
    "Measurement": "recorder",
    "NDJSONParser": "sse",
    "RecordContext": "recorder",
    "SDKRecorder": "sdkpath",
    "SSEEvent": "sse",
    "SSEParser": "sse",
    "StreamRecorder": "recorder",
    "TimedSelector": "loopclock",
    "WorkersChoice": "capacity",
    "assemble_record": "recorder",
    "exception_message": "failures",
    "http_error": "failures",
    "kernel_stamps_available": "lean",
    "lean_applies": "lean",
    "loop_clock": "loopclock",
    "sdk_supported": "sdkpath",
    "stream_error": "failures",
}

__all__ = [
    "BaseRecorder",
    "Capacity",
    "Connections",
    "LatenessTracker",
    "LeanTransport",
    "Measurement",
    "NDJSONParser",
    "RecordContext",
    "SDKRecorder",
    "SSEEvent",
    "SSEParser",
    "StreamRecorder",
    "TimedSelector",
    "WorkersChoice",
    "assemble_record",
    "exception_message",
    "http_error",
    "kernel_stamps_available",
    "lean_applies",
    "loop_clock",
    "sdk_supported",
    "stream_error",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
