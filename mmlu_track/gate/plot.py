"""deltas.png: a comparison in one figure a reviewer reads in seconds. Rendered only (matplotlib,
imported where used; no I/O beyond the file asked for).

- The title: the verdict in words (no emoji: a figure's font has none), then what differs.
- Top panel, what the verdict rests on: Δ micro with the verdict's own interval (a sequential
  gate's anytime-valid one) and, in a gate, the one-sided lower bound held against the −δ line;
  then macro and the categories. The axis spans these intervals and −δ, so −1 point is never
  drawn on the zero line of a ±100 axis.
- Bottom panel, the subjects whose answers changed (unchanged ones carry nothing), largest |Δ|
  first up to `MAX_SUBJECTS`, each with its lost / gained count; a subject's interval is drawn only
  from `MIN_N_INTERVAL` questions: at 2 questions a subject's score interval is ±66 points and
  says nothing.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmlu_track.gate.stats import Comparison, Delta, pts

TITLE_CHARS = 90  # characters of a title line: 8-inch figure, 10-point font
MAX_SUBJECTS = 25  # the most subject rows: the figure stays under ~1,000 px tall
MIN_N_INTERVAL = 20  # a subject's interval is drawn from this many questions
RED, GREEN, BLUE, GREY, ORANGE = "#C44E52", "#55A868", "#4C72B0", "#888888", "#DD8452"


@dataclass(frozen=True)
class Figure:
    """What the figure says beyond the comparison: its title lines, whether a margin applies (a
    gate), and the verdict's own interval of Δ micro where it is not the fixed-sample one."""

    title: str
    margin_line: bool = True
    verdict_interval: tuple[float, float] | None = None  # a sequential gate's anytime-valid (low, high)


def wrapped(heading: str, width: int = TITLE_CHARS) -> str:
    """A title in lines that fit the figure's width (a long one was cut at its edge)."""
    return "\n".join(textwrap.fill(line, width) for line in heading.splitlines())


def changed_subjects(comp: Comparison) -> list[Delta]:
    """The subjects with a changed answer: flagged and improved always, then the largest |Δ|, at
    most `MAX_SUBJECTS`, ordered by Δ (largest drop at the top of the panel)."""
    changed = [d for d in comp.subjects if d.lost + d.gained]
    changed.sort(key=lambda d: (not (d.flagged or d.improved), -abs(d.delta), -(d.lost + d.gained)))
    return sorted(changed[:MAX_SUBJECTS], key=lambda d: -d.delta)


def deltas_png(comp: Comparison, path: Path, figure: Figure) -> Path:
    """Draw the comparison, with `figure`'s title and intervals, as a PNG at `path` (overwritten; 110
    dpi, matplotlib's Agg backend, which it selects); `path` back."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    overall = [comp.micro, comp.macro, *comp.categories]
    subjects = changed_subjects(comp)
    heights = [0.35 * len(overall) + 1.0, 0.22 * max(len(subjects), 2) + 0.8]
    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(8, sum(heights) + 1.4), gridspec_kw={"height_ratios": heights}
    )
    _overall_panel(top, comp, overall, figure)
    _subject_panel(bottom, comp, subjects)
    fig.suptitle(wrapped(figure.title), fontsize=10, x=0.01, ha="left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _limits(lows: list[float], highs: list[float], extra: list[float]) -> tuple[float, float]:
    """An axis (points) spanning the intervals, the −δ line and 0, padded, within ±100."""
    lo, hi = min([*lows, *extra, 0.0]), max([*highs, *extra, 0.0])
    pad = 0.08 * max(hi - lo, 1.0)
    return max(-100.0, lo - pad), min(100.0, hi + pad)


def _note(ax: Any, text: str, x: float, y: float) -> None:
    """A row's figures, just right of where it ends."""
    ax.annotate(text, (x, y), xytext=(5, 0), textcoords="offset points", va="center", fontsize=7)


def _overall_panel(ax: Any, comp: Comparison, rows: list[Delta], figure: Figure) -> None:
    level = f"{100 * (1 - comp.settings.alpha):.0f}%"
    intervals = [(d.ci_low, d.ci_high) for d in rows]
    if figure.verdict_interval is not None:
        intervals[0] = figure.verdict_interval
    y = list(range(len(rows)))[::-1]  # micro at the top
    xs = [100 * d.delta for d in rows]
    lows, highs = [100 * lo for lo, _ in intervals], [100 * hi for _, hi in intervals]
    colors = [BLUE if lo > 0 or hi < 0 else GREY for lo, hi in zip(lows, highs, strict=True)]
    colors[0] = ORANGE  # the verdict's row
    for yi, x, lo, hi, c in zip(y, xs, lows, highs, colors, strict=True):
        ax.plot([lo, hi], [yi, yi], color=c, linewidth=2.2, solid_capstyle="butt")
        ax.scatter([x], [yi], color=c, zorder=3, s=28)
        _note(ax, f"{x:+.2f} [{lo:+.2f}, {hi:+.2f}]", hi, yi)
    extra: list[float] = []
    ni = comp.noninferiority
    if figure.margin_line:
        margin = -100 * comp.settings.delta
        extra.append(margin)
        ax.axvline(margin, color=RED, linestyle=":", label=f"−δ = {margin:+.2f} pts (margin)")
        if figure.verdict_interval is None:  # the fixed-sample gate's decision: this bound vs −δ
            bound = 100 * ni.lower_bound
            extra.append(bound)
            ax.scatter(
                [bound],
                [y[0]],
                marker=">",
                color=RED,
                zorder=4,
                s=40,
                label=f"one-sided lower bound {bound:+.2f}",
            )
    ax.axvline(0, color="#333333", linewidth=0.8)
    names = [("micro (verdict)" if i == 0 else d.name) for i, d in enumerate(rows)]
    ax.set_yticks(y, names, fontsize=8)
    left, right = _limits(lows, highs, extra)
    ax.set_xlim(left, right + 0.25 * (right - left))  # room for the labels right of each interval
    kind = "anytime-valid" if figure.verdict_interval is not None else f"{level} score"
    what = f"Overall and categories: Δ accuracy, points (candidate − baseline), {kind} interval on micro"
    ax.set_title(what, fontsize=8, loc="left")
    if figure.margin_line:
        # below the axis: inside, it hid the bottom row's interval
        ax.legend(loc="upper left", bbox_to_anchor=(0.0, -0.12), ncol=2, fontsize=7, frameon=False)


def _subject_panel(ax: Any, comp: Comparison, rows: list[Delta]) -> None:
    n_changed = sum(1 for d in comp.subjects if d.lost + d.gained)
    if not rows:
        ax.axis("off")
        ax.text(0.0, 0.5, f"No subject has a changed answer (of {len(comp.subjects)}).", fontsize=9)
        return
    y = list(range(len(rows)))[::-1]
    xs = [100 * d.delta for d in rows]
    colors = [RED if d.flagged else GREEN if d.improved else BLUE for d in rows]
    drawn = [d for d in rows if d.n >= MIN_N_INTERVAL]
    for yi, d, x, c in zip(y, rows, xs, colors, strict=True):
        if d.n >= MIN_N_INTERVAL:
            ax.plot([100 * d.ci_low, 100 * d.ci_high], [yi, yi], color=GREY, linewidth=1)
        ax.scatter([x], [yi], color=c, zorder=3, s=20)
        _note(ax, f"{pts(d.delta)}  −{d.lost}/+{d.gained} of {d.n}", x, yi)
    ax.set_yticks(y, [d.name for d in rows], fontsize=7)
    ax.axvline(0, color="#333333", linewidth=0.8)
    lows = [100 * (d.ci_low if d in drawn else d.delta) for d in rows]
    highs = [100 * (d.ci_high if d in drawn else d.delta) for d in rows]
    left, right = _limits(lows, highs, [])
    ax.set_xlim(left, right + 0.3 * (right - left))
    shown = f", the {len(rows)} largest |Δ| shown" if len(rows) < n_changed else ""
    note = "" if len(drawn) == len(rows) else f"; intervals only from {MIN_N_INTERVAL} questions a subject"
    ax.set_title(
        f"Subjects whose answers changed: {n_changed} of {len(comp.subjects)}{shown}\n"
        f"red flagged, green improved; −lost/+gained of n{note}",
        fontsize=8,
        loc="left",
    )
