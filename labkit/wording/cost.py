"""Money in words: a cost with its interval, as every table and page says it."""

from __future__ import annotations

from labkit.figures import Estimate
from labkit.figures.observatory import CostFigures

__all__ = ["cost_sentence", "money", "per_money"]


def _amount(value: float) -> str:
    """Three significant figures, never in exponent form: 0.00472, 1.25, 318."""
    if value == 0:
        return "0"
    text = f"{value:.3g}"
    if "e" in text:
        return f"{value:.{max(0, 2 - int(f'{value:e}'.split('e')[1]))}f}"
    return text


def money(figure: Estimate | None, currency: str = "USD") -> str:
    """`0.00472 USD [0.00440–0.00510]` (the 95 % interval in brackets), `—` for none; an
    interval with no upper bound reads `[0.004–no bound]`."""
    if figure is None:
        return "—"
    text = f"{_amount(figure.value)} {currency}"
    if figure.lo is None and figure.hi is None:
        return text
    lo = "no bound" if figure.lo is None else _amount(figure.lo)
    hi = "no bound" if figure.hi is None else _amount(figure.hi)
    return f"{text} [{lo}–{hi}]"


def per_money(figure: Estimate | None, currency: str = "USD") -> str:
    """Answers per currency unit: `212 per USD [190–240]`, `—` for none."""
    if figure is None:
        return "—"
    lo = "0" if figure.lo is None else _amount(figure.lo)
    hi = "no bound" if figure.hi is None else _amount(figure.hi)
    return f"{_amount(figure.value)} per {currency} [{lo}–{hi}]"


def cost_sentence(figure: CostFigures) -> str:
    """One provider × model's cost in one sentence."""
    said = (
        f"{figure.provider} · {figure.model}: {money(figure.per_request, figure.currency)} per "
        f"request over {figure.requests} priced requests ({_amount(figure.total)} "
        f"{figure.currency} in all, prices of {figure.price_date})"
    )
    if figure.per_successful_answer is not None:
        said += f"; {money(figure.per_successful_answer, figure.currency)} per successful answer"
    if figure.per_session is not None:
        said += f"; {money(figure.per_session, figure.currency)} per session"
    return said + "."
