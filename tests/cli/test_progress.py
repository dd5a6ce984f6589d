"""The live progress of `labkit run`: noted on every record, drawn from the loop."""

from __future__ import annotations

import asyncio
import io

import pytest
from rich.console import Console
from rich.progress import Progress, TextColumn

from labkit.cli.app import PROGRESS_HZ, _ProgressView, _show_progress
from labkit.runner.run import ProviderOutcome

pytestmark = pytest.mark.unit


def _view() -> tuple[_ProgressView, io.StringIO]:
    out = io.StringIO()
    console = Console(file=out, width=120, force_terminal=False)
    progress = Progress(TextColumn("{task.description} {task.fields[status]}"), console=console)
    return _ProgressView(progress), out


def test_a_record_is_only_noted_and_the_next_draw_shows_the_latest_figures() -> None:
    view, _ = _view()
    outcome = ProviderOutcome(id="p", kind="openai_compatible", model="m", planned=3)
    view.update(outcome)
    assert view.progress.tasks == []  # nothing drawn per record
    outcome.done, outcome.failed, outcome.ttfts = 3, 1, [10.0, 20.0]
    view.update(outcome)
    view.show()
    (task,) = view.progress.tasks
    assert (task.completed, task.total) == (3, 3)
    assert task.fields["status"] == "ok 2  failed 1  TTFT p50 15.0 ms"


def test_the_loop_draws_the_progress_until_cancelled() -> None:
    view, _ = _view()
    outcome = ProviderOutcome(id="p", kind="openai_compatible", model="m", planned=2)

    async def main() -> None:
        drawing = asyncio.create_task(_show_progress(view))
        view.update(outcome)
        await asyncio.sleep(1.5 / PROGRESS_HZ)
        drawing.cancel()

    asyncio.run(main())
    (task,) = view.progress.tasks
    assert task.total == 2
