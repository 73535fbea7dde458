"""Streaming: peak memory of a whole run does not grow with the number of questions scored.

Subjects are scored and committed one at a time and nothing per question is kept on the model's
side (only the last position's logits are computed), so 12x the questions must not raise the
peak. A run that kept each question's logits (about 200 kB each for this vocabulary) would add
about 90 MB here and fail.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# The child's peak RSS, as seen by its parent, in a process of its own so one run can't hide another.
WRAP = (
    "import resource, subprocess, sys\n"
    "cmd = [sys.executable, '-m', 'mmlu_track', *sys.argv[1:]]\n"
    "r = subprocess.run(cmd, capture_output=True, text=True)\n"
    "sys.stderr.write(r.stderr[-2000:])\n"
    "print('PEAK_KB', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    "sys.exit(r.returncode)\n"
)
SUBJECTS = "[anatomy,astronomy,marketing,nutrition,sociology,virology,world_religions,prehistory]"


def _peak_mb(limit: int, tmp: Path) -> float:
    args = ["model=tiny", "device=cpu", "tracking=sql_only", "k=2", f"subjects={SUBJECTS}", f"limit={limit}",
            f"tracking.db_url=sqlite:///{tmp / 'runs.db'}", f"hydra.run.dir={tmp / str(limit)}"]  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-c", WRAP, *args],
        cwd=tmp,
        env={**os.environ, "HYDRA_FULL_ERROR": ""},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("PEAK_KB"))
    return int(line.split()[1]) / 1024


def test_peak_memory_does_not_grow_with_questions(tmp_path: Path) -> None:
    small = _peak_mb(5, tmp_path)  # 40 questions
    large = _peak_mb(60, tmp_path)  # 480 questions
    assert large - small < 40, f"peak RSS {small:.0f} MB for 40 questions, {large:.0f} MB for 480"
