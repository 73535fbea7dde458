"""What was chosen from the settings, once, as a command starts: a record of its own beside the
frozen config, which stays as the user asked.

A setting such as `threads=auto` or an unset `tracking.mlflow_uri` asks for a choice the
surroundings make (the CPUs this process may use, `MLFLOW_TRACKING_URI`, the working folder). The
entry point makes those choices once (`pipeline.resolve.resolve`) into a `Resolved` that travels
beside the `EvalConfig` through the run: nothing downstream rewrites the config. The run records
both (`RunStart.config` as asked, `RunStart.resolved` as chosen: `results.json`, the SQL store,
MLflow's `resolved.*` params), and `--cfg job` prints the choices under the composed config.

The other choices a command makes from what it reads are kept apart the same way: the gate's δ
under `gate.margin=auto` (a noise floor at the n compared) is the policy its comparison carries
(`Comparison.settings`), and the MMLU-Redux set's content fingerprint is part of the run's
identity (`eval.plan.identity`), never written into `data.annotations`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from mmlu_track.support.credentials import redact


@dataclass(frozen=True)
class Resolved:
    """The choices a run's settings leave to the surroundings, made once as the command starts."""

    mlflow_uri: str | None  # the tracking URI the run records into (tracking.mlflow=false: as given)
    threads: int | None  # torch's CPU threads for in-process scoring (None: a served model)
    threads_why: str | None = None  # how `threads` was chosen (`eval.threads`)

    def to_json(self) -> dict[str, Any]:
        """The choices as stored and shown: the URI's password as `***`."""
        doc = dataclasses.asdict(self)
        doc["mlflow_uri"] = redact(self.mlflow_uri) if self.mlflow_uri else None
        return doc

    def lines(self) -> list[str]:
        """The choices as YAML lines under a heading (`--cfg job` prints them after the config)."""
        doc = self.to_json()
        return ["# resolved from the settings as this command starts (not settings themselves):"] + [
            f"#   {key}: {'null' if value is None else value}" for key, value in doc.items()
        ]
