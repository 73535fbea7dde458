"""Streaming: peak memory of a whole run does not grow with the number of questions scored.

Subjects are scored and committed one at a time and nothing per question is kept on the model's
side (only the last position's logits are computed), so 12x the questions must not raise the
peak. A run that kept each question's logits (about 200 kB each for this vocabulary) would add
about 90 MB here and fail.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .. import processes

# The run's own peak RSS, printed as it ends, in a process of its own so one run can't hide another.
# Both runs start from the same imports in a fresh interpreter: the difference is what the run added.
PEAK = (
    "import resource, runpy\n"
    "try:\n"
    "    runpy.run_module('mmlu_track', run_name='__main__', alter_sys=True)\n"
    "finally:\n"
    "    print('PEAK_KB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, flush=True)\n"
)
SUBJECTS = "[anatomy,astronomy,marketing,nutrition,sociology,virology,world_religions,prehistory]"


def _peak_mb(limit: int, tmp: Path) -> float:
    args = ["model=tiny", "device=cpu", "tracking=sql_only", "k=2", f"subjects={SUBJECTS}", f"limit={limit}",
            f"tracking.db_url=sqlite:///{tmp / 'runs.db'}", f"hydra.run.dir={tmp / str(limit)}"]  # fmt: skip
    env = {**os.environ, "HYDRA_FULL_ERROR": ""}
    proc = processes.run(["-c", PEAK, *args], cwd=tmp, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("PEAK_KB"))
    return int(line.split()[1]) / 1024


@pytest.mark.slow  # two interpreters with torch, 520 questions of the tiny model
def test_peak_memory_does_not_grow_with_questions(tmp_path: Path) -> None:
    small = _peak_mb(5, tmp_path)  # 40 questions
    large = _peak_mb(60, tmp_path)  # 480 questions
    assert large - small < 40, f"peak RSS {small:.0f} MB for 40 questions, {large:.0f} MB for 480"
