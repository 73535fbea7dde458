"""What a model's weights are, known before they are loaded: `Pinned`, the fields of `ModelInfo`
that a run's identity hashes (`plan.identity`), as loading the weights would record them.

A finished run is reused only when the weights are pinned the same as the run recorded them
(`load.pinned`): a file's or a folder's sha256 (a GGUF, a saved model), a random model's seed, a
hub commit (the in-process backend's `in_process.pinned`), or the revision a served model is
declared to be (required: `settings.checks`). A hub model at a branch is pinned only once loaded
(the branch resolves to a commit then).
"""

from __future__ import annotations

from dataclasses import dataclass

from mmlu_track.settings.config import EvalConfig


@dataclass(frozen=True)
class Pinned:
    """The weights' part of a run's identity, as loading them would record it (`ModelInfo`)."""

    location: str
    revision: str | None
    weights_sha256: str | None
    dtype: str  # the dtype they run in (`auto` resolved), or "served"


def served(run: EvalConfig) -> Pinned:
    """A served model's weights: the revision it is declared to serve, as its run records them."""
    return Pinned(str(run.model.served_name), run.model.revision, None, "served")
