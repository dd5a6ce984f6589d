"""The wire: connections, clocks and stamping below the providers, and the framing they parse.

The connections a provider is handed (`connections`, `client`, `proxies`, `setup`), the
lean transport (`lean`: kernel receive stamps, TCP, TLS, HTTP/1.1), the timed event loop
(`loopclock`, `turns`), the stream framing (`sse`, `fastjson`) and a token's read steps in C
or Python (`readpath`). It knows no provider and no record: the providers sit on it, and the
recorders (`labkit.measurement`) above them.

Names are imported on first use, so a provider importing `sse` loads neither the lean
transport nor the loop clock.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from labkit.wire.connections import Connections
    from labkit.wire.lean import LeanTransport, kernel_stamps_available, lean_applies
    from labkit.wire.loopclock import LatenessTracker, TimedSelector, loop_clock
    from labkit.wire.sse import NDJSONParser, SSEEvent, SSEParser

#: Each public name and the module that defines it.
_HOMES = {
    "Connections": "connections",
    "LatenessTracker": "loopclock",
    "LeanTransport": "lean",
    "NDJSONParser": "sse",
    "SSEEvent": "sse",
    "SSEParser": "sse",
    "TimedSelector": "loopclock",
    "kernel_stamps_available": "lean",
    "lean_applies": "lean",
    "loop_clock": "loopclock",
}

__all__ = [
    "Connections",
    "LatenessTracker",
    "LeanTransport",
    "NDJSONParser",
    "SSEEvent",
    "SSEParser",
    "TimedSelector",
    "kernel_stamps_available",
    "lean_applies",
    "loop_clock",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
