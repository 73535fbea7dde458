"""PNG figures of a run's scores (matplotlib, headless)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from mmlu_track.records.results import Accuracies
from mmlu_track.settings.subjects import CATEGORIES, SUBCATEGORY, category


def subject_order(subjects: Iterable[str]) -> list[str]:
    """One fixed order (category, then subject; bottom to top), whatever the accuracies, so that
    two runs' images line up side by side in MLflow's Compare view."""
    return sorted(
        subjects, key=lambda s: (CATEGORIES.index(category(s)) if s in SUBCATEGORY else 0, s), reverse=True
    )


def subject_accuracy_png(scores: Accuracies, path: Path, title: str) -> Path:
    """Horizontal bars of per-subject accuracy with 95% Wilson whiskers and the micro average.

    Wilson intervals stay inside [0, 1] and keep a whisker at 0/n and n/n, where ±1.96·SE has none.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = subject_order(scores.subjects)
    accs = [scores.subjects[s].acc for s in names]
    bounds = [scores.subjects[s].interval() for s in names]
    errs = [
        [a - lo for a, (lo, _) in zip(accs, bounds, strict=True)],
        [hi - a for a, (_, hi) in zip(accs, bounds, strict=True)],
    ]
    fig, ax = plt.subplots(figsize=(8, max(2.5, 0.22 * len(names) + 1.2)))
    ax.barh(names, accs, xerr=errs, color="#4C72B0", ecolor="#333333", capsize=2)
    ax.axvline(scores.micro.acc, color="#C44E52", linestyle="--", label=f"micro {scores.micro.acc:.3f}")
    ax.axvline(scores.chance, color="#999999", linestyle=":", label=f"chance {scores.chance:.3g}")
    ax.set_xlim(0, 1)
    ax.set_xlabel("accuracy (whiskers: 95% Wilson interval)")
    ax.set_title(title, fontsize=10)
    ax.tick_params(axis="y", labelsize=7)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
