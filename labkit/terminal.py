"""`SafeConsole`: the rich Console every labkit output for people is printed through.

Text a server sent (error messages, reasons, answers, generated text) can hold a key or
terminal escapes (a screen clear, a title change, an OSC-8 link). The console cleans the text
of each print after markup is rendered and before styling is applied (`labkit.scrub`): its
own styling and live-display control codes pass, anything else does not. Strings are cleaned
once more before rich lays them out, so a long key folded over two lines is masked whole.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.console import Console
from rich.segment import Segment
from rich.text import Text

from labkit.scrub import for_people, scrub, strip_controls

__all__ = ["SafeConsole"]


class SafeConsole(Console):
    """A rich Console that strips control sequences from text and scrubs registered secrets."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        """`Console.print`, with `Text` objects cleaned like strings (their styles kept)."""
        super().print(*(_clean_text(o) if isinstance(o, Text) else o for o in objects), **kwargs)

    def render_str(self, text: str, **kwargs: Any) -> Text:
        """Every string printed (or put in a table cell), cleaned before markup and layout."""
        return super().render_str(for_people(text), **kwargs)

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        segments = list(buffer)
        plain = strip_controls("".join(seg.text for seg in segments if not seg.control))
        unfolded = plain.replace("\n", "")
        masked = scrub(unfolded)
        if masked == unfolded:  # no secret: keep the styles, strip the controls
            segments = [
                seg if seg.control else Segment(strip_controls(seg.text), seg.style)
                for seg in segments
            ]
        else:  # a secret, maybe split over styled pieces or folded lines: this print unstyled
            text = scrub(plain)
            if text.replace("\n", "") != masked:
                text = masked + "\n"
            text_at = next(i for i, seg in enumerate(segments) if not seg.control)
            controls = [seg for seg in segments if seg.control]
            segments = [*controls[:text_at], Segment(text), *controls[text_at:]]
        return super()._render_buffer(segments)


def _clean_text(text: Text) -> Text:
    cleaned = for_people(text.plain)
    if cleaned == text.plain:
        return text
    return Text(cleaned, style=text.style, justify=text.justify, no_wrap=text.no_wrap)
