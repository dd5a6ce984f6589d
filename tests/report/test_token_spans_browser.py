"""The token boundaries of question 2 in a real headless Chromium draw every character: a
Japanese character is its own glyph, not the empty box every missing glyph shares, and an
emoji is drawn in colour. Without the fonts `make browser` installs (Noto CJK and Noto Color
Emoji: scripts/install-browser.sh) each of these was the same empty box."""

from __future__ import annotations

import base64
import io
import json
import time
from pathlib import Path

import pytest
from PIL import Image

from labkit.figures import TokenPieces, TokenRatioFigures
from labkit.records import LabAnswer, LabResults
from labkit.report import write_report
from tests.report.report_builders import write_run
from tests.report.test_html_browser import Cdp, _evaluate, browser

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

__all__ = ["browser"]  # the real-browser fixture, shared with the whole report's test

JAPANESE = ["日", "本", "語", "こ", "ん"]
EMOJI = ["👋", "🌍"]


def _lab() -> LabResults:
    pieces = [
        TokenPieces(text_id="japanese", tokenizer="o200k_base", pieces=JAPANESE),
        TokenPieces(text_id="emoji", tokenizer="o200k_base", pieces=EMOJI, tokens_per_piece=[2, 3]),
    ]
    return LabResults(
        run_id="run-1",
        answers=[
            LabAnswer(
                experiment="token_ratio",
                provider="local",
                model="m",
                question="What is a token?",
                answer="A token is a piece of text.",
                figures=TokenRatioFigures(pieces=pieces),
            )
        ],
    )


_SPAN_BOXES = """
JSON.stringify([...document.querySelectorAll('.spans span.t')].map(el => {
  const r = el.getBoundingClientRect();
  return [el.textContent, r.x + scrollX, r.y + scrollY, r.width, r.height];
}))
"""


def _glyph(browser: Cdp, session: str, box: list[float]) -> Image.Image:
    _, x, y, width, height = box
    clip = {"x": x, "y": y, "width": width, "height": height, "scale": 2}
    shot = browser.send(
        "Page.captureScreenshot", session, format="png", clip=clip, captureBeyondViewport=True
    )
    return Image.open(io.BytesIO(base64.b64decode(shot["data"]))).convert("RGB")


def _ink(image: Image.Image) -> list[tuple[int, int]]:
    """Where the glyph drew: pixels well darker or more coloured than the span's background."""
    background = image.getpixel((0, 0))
    assert isinstance(background, tuple)
    ink = []
    for y in range(image.height):
        for x in range(image.width):
            pixel = image.getpixel((x, y))
            assert isinstance(pixel, tuple)
            if sum(abs(a - b) for a, b in zip(pixel, background, strict=True)) > 120:
                ink.append((x, y))
    return ink


def _colourful(image: Image.Image) -> int:
    """Pixels far from grey: a colour glyph has many, a black outline or box none."""
    data = image.tobytes()  # RGB, three bytes a pixel
    count = 0
    for i in range(0, len(data), 3):
        r, g, b = data[i], data[i + 1], data[i + 2]
        if max(r, g, b) - min(r, g, b) > 80 and not (r > 200 and g > 200 and b > 200):
            count += 1
    return count


def test_japanese_and_emoji_tokens_are_drawn_as_their_own_glyphs(
    tmp_path: Path, browser: Cdp
) -> None:
    run_dir = write_run(tmp_path / "run", [], lab=_lab())
    paths = write_report(run_dir)
    target = browser.send("Target.createTarget", url="about:blank")["targetId"]
    session = browser.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
    for domain in ("Page", "Runtime"):
        browser.send(f"{domain}.enable", session)
    browser.send(
        "Emulation.setDeviceMetricsOverride",
        session,
        width=1280,
        height=1200,
        deviceScaleFactor=1,
        mobile=False,
    )
    browser.send("Page.navigate", session, url=paths.html.resolve().as_uri())
    browser.wait_for("Page.loadEventFired")
    deadline = time.monotonic() + 20
    boxes = _evaluate(browser, session, _SPAN_BOXES)
    while len(boxes) < len(JAPANESE) + len(EMOJI) and time.monotonic() < deadline:
        time.sleep(0.2)
        boxes = _evaluate(browser, session, _SPAN_BOXES)
    by_text = {box[0]: box for box in boxes}
    assert set(JAPANESE + EMOJI) <= set(by_text), json.dumps(boxes, ensure_ascii=False)

    # A missing glyph is drawn as one shared box: five characters, five different drawings.
    drawings = {text: _glyph(browser, session, by_text[text]) for text in JAPANESE}
    shapes = {text: frozenset(_ink(image)) for text, image in drawings.items()}
    assert all(shapes.values()), "a Japanese character drew nothing"
    assert len(set(shapes.values())) == len(JAPANESE), "Japanese characters share one glyph"

    for text in EMOJI:
        assert _colourful(_glyph(browser, session, by_text[text])) > 20, f"{text} not in colour"
