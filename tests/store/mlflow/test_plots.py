"""store/mlflow/plots.py: a run's per-subject accuracy as a PNG whose subjects stand in one fixed
order (category, then subject), whatever the accuracies, so two runs' images line up."""

from __future__ import annotations

from pathlib import Path

from mmlu_track.records.results import QuestionResult, aggregate
from mmlu_track.store.mlflow.plots import subject_accuracy_png, subject_order


def test_subject_plot_order_is_fixed_by_category_then_subject() -> None:
    order = subject_order(["virology", "anatomy", "college_physics", "philosophy", "abstract_algebra"])
    assert order == subject_order(sorted(order))  # the accuracies (and the input order) do not matter
    assert order[-2:] == ["college_physics", "abstract_algebra"]  # STEM first, at the top of the plot


def test_the_subject_accuracy_figure_is_a_png_sized_for_its_subjects(tmp_path: Path) -> None:
    import struct

    def png(subjects: list[str]) -> tuple[int, int]:
        results = [QuestionResult(s, i, "h", 0, 1, False, None, "A", i % 2, 0, None)
                   for s in subjects for i in range(4)]  # fmt: skip
        path = subject_accuracy_png(aggregate(results), tmp_path / f"{len(subjects)}.png", "m")
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk
        return width, height

    few = png(["anatomy", "virology"])
    wide = png(["anatomy", "virology", "college_physics", "philosophy", "abstract_algebra", "marketing",
                "nutrition", "sociology", "prehistory", "world_religions", "astronomy"])  # fmt: skip
    assert wide[0] == few[0]
    assert wide[1] > few[1]  # a taller figure for more subjects
