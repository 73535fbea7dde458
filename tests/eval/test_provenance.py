"""eval/provenance.py: what a run records to be reproduced: its seeds (torch's only where the model
runs in this process), the packages' versions, the commit, and the command line without a password."""

from __future__ import annotations

import random
import re
from pathlib import Path

import numpy as np

from mmlu_track.eval import provenance

from ..conftest import ROOT


def test_seeds_are_set_and_recorded_torchs_only_in_process() -> None:
    seeds = provenance.set_seeds(2**32 + 7, torch=False)
    assert seeds == {"python": 2**32 + 7, "numpy": 7, "fewshot": 2**32 + 7, "subsample": 2**32 + 7}
    drawn = (random.random(), np.random.random())
    provenance.set_seeds(2**32 + 7, torch=True)
    assert (random.random(), np.random.random()) == drawn  # seeded again: the same draws
    assert provenance.set_seeds(3, torch=True)["torch"] == 3


def test_versions_commit_and_host_as_recorded(tmp_path: Path) -> None:
    import importlib.metadata
    import platform

    versions = provenance.versions()
    assert list(versions) == ["python", *provenance.PACKAGES]
    assert versions["python"] == platform.python_version()
    assert versions["numpy"] == importlib.metadata.version("numpy")
    assert provenance.git_commit(tmp_path) is None  # outside a checkout
    commit = provenance.git_commit(ROOT)
    assert commit is None or re.fullmatch(r"[0-9a-f]{40}(-dirty)?", commit)
    host = provenance.host(["python", "-m", "mmlu_track", "tracking.db_url=postgresql://u:pw-77@h/db"])
    assert host["argv"] == ["python", "-m", "mmlu_track", "tracking.db_url=postgresql://u:***@h/db"]
    assert host["hostname"] == platform.node()
