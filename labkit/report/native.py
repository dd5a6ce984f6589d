"""Every string handed to the native chart renderer, made safe for it: `for_native_renderer`.

vl-convert draws PNGs through an SVG (XML) stage in native code. A C0 control character (but
tab, LF and CR) or U+FFFE/U+FFFF in any string of a spec — a provider id, a title, a data
value — makes it panic, and the panic aborts the whole process (SIGABRT, uncatchable); a lone
surrogate cannot even be handed over. So each string is stripped of terminal control
sequences (`labkit.scrub.strip_controls`) and of every character XML 1.0 does not allow.
"""

from __future__ import annotations

import re
from typing import Any

from labkit.scrub import strip_controls

__all__ = ["for_native_renderer"]

# Not an XML 1.0 Char: C0 controls but \t \n \r, lone surrogates, U+FFFE and U+FFFF.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _clean(text: str) -> str:
    return _NOT_XML.sub("", strip_controls(text))


def for_native_renderer(value: Any) -> Any:
    """`value` (a Vega-Lite spec, or any part of one) with every string, keys included,
    cleaned as the module says; numbers and the shape are kept."""
    if isinstance(value, str):
        return _clean(value)
    if isinstance(value, dict):
        return {
            (_clean(k) if isinstance(k, str) else k): for_native_renderer(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [for_native_renderer(v) for v in value]
    return value
