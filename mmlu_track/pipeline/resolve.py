"""The one place a run's settings are resolved against its surroundings (`settings.resolved`):
the CPU threads in-process scoring may use (`threads=auto`: affinity, cgroup quota, the shards this
launch runs on the host) and the MLflow URI it records into (explicit, else `MLFLOW_TRACKING_URI`,
else `./mlflow.db` made absolute). Called by the entry points as a command starts."""

from __future__ import annotations

from pathlib import Path

from mmlu_track.eval import load, threads
from mmlu_track.settings.config import EvalConfig
from mmlu_track.settings.resolved import Resolved
from mmlu_track.store.locations import mlflow_uri


def resolve(cfg: EvalConfig, host_share: int = 1, launch_dir: Path | None = None) -> Resolved:
    """The choices `cfg` leaves open, made now; `host_share`: the evaluations this launch runs at once
    on this host (joblib's jobs), among which `threads=auto` divides the CPUs; `launch_dir`: where
    the command was started (default: here), where a default `./mlflow.db` is anchored (a launched
    job may run in a folder of its own)."""
    cpu = threads.choose(cfg.threads, host_share) if load.in_process(cfg) else None
    tracking = cfg.tracking
    return Resolved(
        # With MLflow off, the URI as given (None: none): where a later `runs sync` sends the run.
        mlflow_uri=mlflow_uri(tracking.mlflow_uri, launch_dir) if tracking.mlflow else tracking.mlflow_uri,
        threads=cpu.count if cpu else None,
        threads_why=cpu.why if cpu else None,
    )
