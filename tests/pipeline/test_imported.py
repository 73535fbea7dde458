"""pipeline/imported.py through `python -m mmlu_track.runs import` on real lm-eval 0.4.13 output
(`tests/data/lm_eval/`, its make.py): runs stored once, compared question by question with a native
run of the same weights and with each other, chat protocols recognised, bad input recording nothing."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mmlu_track.eval import prompts
from mmlu_track.eval.data import load_subjects
from mmlu_track.eval.in_process import InProcess
from mmlu_track.pipeline.imported import PACKAGED

from ..conftest import LM_EVAL_DATA, CliResult, question_results, stored_runs
from ..conftest import import_lm_eval as _import

DATA = LM_EVAL_DATA
Cli = Callable[..., CliResult]


def _compare(cli: Cli, tmp_path: Path, db: str, base: str, cand: str) -> tuple[CliResult, dict[str, object]]:
    """The gate (warn_only: exit 0 whatever the verdict) and its report.json, when it ran."""
    folder = tmp_path / f"report-{base[:6]}-{cand[:6]}"
    got = cli("compare", f"baseline={base}", f"candidate={cand}", f"tracking.db_url={db}",
              "tracking.mlflow=false", "gate=warn_only", f"hydra.run.dir={folder}", cwd=tmp_path)  # fmt: skip
    if got.code != 0:
        return got, {}
    report = Path(got.out.split("reports in ")[1].splitlines()[0]) / "report.json"
    return got, json.loads(report.read_text())


def _id(got: CliResult) -> str:
    return got.out.split("imported run ")[1].split()[0]


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


def _first_questions(root: Path, subjects: tuple[str, ...], n: int) -> Path:
    """A local MMLU folder of each subject's first `n` test questions and its dev rows: what lm-eval's
    `--limit n` scored, as a native run's questions (the same indices, so the same fingerprint)."""
    data = load_subjects(PACKAGED, subjects)
    for subject, d in data.items():
        for split, questions in (("test", d.test[:n]), ("dev", d.dev)):
            (root / split).mkdir(parents=True, exist_ok=True)
            rows = [
                {"question": q.question, "choices": list(q.choices), "answer": q.answer} for q in questions
            ]
            (root / split / f"{subject}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


@pytest.mark.slow  # the packaged SmolLM2-135M: the weights lm-eval ran
def test_an_import_and_a_native_run_of_the_same_weights_pair_every_question(
    cli: Cli, tmp_path: Path, db: str
) -> None:
    got = _import(cli, tmp_path, db, str(DATA / "five_shot"))  # --limit 4: each subject's first 4
    assert got.code == 0, got.err
    assert "(smol_hf, 8 questions, harness prompts, micro " in got.out
    assert "with no pinned revision" in got.err  # a local folder, no revision: said
    local = _first_questions(tmp_path / "mmlu", ("abstract_algebra", "anatomy"), 4)
    native = cli("eval", "formulation=harness", "k=5", "data=local", f"data.path={local}",
                 "subjects=[abstract_algebra,anatomy]", "dtype=float32", "device=cpu", "tracking=sql_only",
                 f"tracking.db_url={db}", f"hydra.run.dir={tmp_path / 'native'}", cwd=tmp_path)  # fmt: skip
    assert native.code == 0, native.err
    imported, ours = sorted(stored_runs(db), key=lambda r: r.model_name != "smol_hf")
    assert (imported.protocol.differences(ours.protocol), imported.formulation) == ([], "harness")
    got, report = _compare(cli, tmp_path, db, imported.id, ours.id)
    micro = report["micro"]
    assert isinstance(micro, dict), got.err
    # lm-eval's float32 log-likelihoods and this tool's agree (within 1e-4): every prediction the same
    assert (micro["n"], micro["lost"], micro["gained"]) == (8, 0, 0), got.out
    theirs = {(r.subject, r.index): r.logprobs for r in question_results(db, imported.id)}
    for r in question_results(db, ours.id):
        lm_eval = theirs[(r.subject, r.index)]
        assert r.logprobs is not None
        assert lm_eval is not None
        assert max(abs(a - b) for a, b in zip(r.logprobs, lm_eval, strict=True)) < 1e-4


def _by_hand(folder: str) -> dict[int, bool]:
    """Each logged question's correctness read from lm-eval's samples file alone (first maximum)."""
    (path,) = (DATA / folder).rglob("samples_*.jsonl")
    out = {}
    for line in path.read_text().splitlines():
        doc = json.loads(line)
        # [log-likelihood, is_greedy] per choice, or that pair in a list (as lm-eval's filter kept it)
        values = [float(r[0][0] if isinstance(r[0], list) else r[0]) for r in doc["filtered_resps"]]
        out[doc["doc_id"]] = values.index(max(values)) == doc["doc"]["answer"]
    return out


def test_two_imports_compare_with_the_counts_read_from_their_files(cli: Cli, tmp_path: Path, db: str) -> None:
    base = _id(_import(cli, tmp_path, db, str(DATA / "whole_subject")))
    cand = _id(_import(cli, tmp_path, db, str(DATA / "whole_subject_tiny")))  # random weights
    got, report = _compare(cli, tmp_path, db, base, cand)
    b, c = _by_hand("whole_subject"), _by_hand("whole_subject_tiny")
    lost = sum(b[i] and not c[i] for i in b)
    gained = sum(c[i] and not b[i] for i in b)
    micro = report["micro"]
    assert isinstance(micro, dict), got.err
    assert (micro["n"], micro["lost"], micro["gained"]) == (100, lost, gained)
    assert micro["baseline_acc"] == sum(b.values()) / 100
    assert min(lost, gained) > 5  # answers that differ: the counts say something


def test_chat_template_runs_are_this_tools_chat_protocols(
    cli: Cli, tmp_path: Path, db: str, tiny_lm: Any
) -> None:
    for folder in ("chat_multiturn", "chat_single_system"):
        got = _import(cli, tmp_path, db, str(DATA / folder))
        assert got.code == 0, got.err
        assert "harness prompts" in got.out
    multi, single = sorted(stored_runs(db), key=lambda r: r.protocol.chat)
    assert (multi.protocol.chat, single.protocol.chat, multi.k) == ("multiturn", "single_turn", 5)
    assert single.config.chat.system == "Answer with the letter of the right choice."
    # A native chat run of the packaged SmolLM2 (the tiny model has its tokenizer) hashes its template
    # as the import does: they compare.
    backend = InProcess(tiny_lm)
    for run in (multi, single):
        style = prompts.Style(run.protocol.chat, run.config.chat.system, backend.apply_chat_template,
                              backend.chat_template)  # fmt: skip
        assert run.template_hash == prompts.template_hash("harness", style)


def _reworded(tmp_path: Path, name: str, text: str) -> Path:
    """A copy of the zero_shot run whose every context starts with `text`: prompts of lm-eval's own;
    the run of a model named `name` (other files, so another run, whatever the prompts)."""
    folder = tmp_path / name
    shutil.copytree(next((DATA / "zero_shot").iterdir()), folder)
    (results,) = folder.glob("results_*.json")
    results.write_text(
        results.read_text().replace('"model_name": "/tmp/smol_hf"', f'"model_name": "org/{name}"')
    )
    for samples in folder.glob("samples_*.jsonl"):
        lines = []
        for line in samples.read_text().splitlines():
            doc = json.loads(line)
            for arg in doc["arguments"].values():
                arg["arg_0"] = text + arg["arg_0"]
            lines.append(json.dumps(doc))
        samples.write_text("\n".join(lines) + "\n")
    return folder


def test_lm_evals_own_prompts_compare_only_with_the_same_prompts(cli: Cli, tmp_path: Path, db: str) -> None:
    own = _id(_import(cli, tmp_path, db, str(_reworded(tmp_path, "own", "Think.\n"))))
    same = _id(_import(cli, tmp_path, db, str(_reworded(tmp_path, "same", "Think.\n")), "--name", "other"))
    other = _id(_import(cli, tmp_path, db, str(_reworded(tmp_path, "other", "Reason.\n")), "--name", "third"))
    harness = _id(_import(cli, tmp_path, db, str(DATA / "zero_shot"), "--name", "fourth"))
    runs = {r.id: r for r in stored_runs(db)}
    assert runs[own].formulation == "lm-eval"
    assert runs[own].template_hash.startswith("lm-eval:")
    assert _compare(cli, tmp_path, db, own, same)[0].code == 0
    for cand in (other, harness):
        refused, _ = _compare(cli, tmp_path, db, own, cand)
        assert refused.code == 2
        (line,) = refused.errors
        said = (
            "formulation differs (baseline lm-eval, candidate harness)"
            if cand == harness
            else ("prompt template (template hash) differs (baseline lm-eval:")
        )
        assert said in line


def test_the_57_tasks_of_the_mmlu_group_import_as_one_run(cli: Cli, tmp_path: Path, db: str) -> None:
    got = _import(cli, tmp_path, db, str(DATA / "all_subjects"))
    assert "(smol_hf, 57 questions, harness prompts" in got.out, got.err
    (run,) = stored_runs(db)
    assert len(run.config.subjects) == 57
    assert run.record is not None
    assert len(run.record.scores.subjects) == 57


PRO = DATA.parent / "lm_eval_pro"


def _pro_pair(cli: Cli, tmp_path: Path, db: str, folder: str, *native: str) -> tuple[Any, Any, str]:
    """lm-eval's MMLU-Pro output in `folder` imported, a native run of `native`'s settings on the same
    rows and weights, and their comparison: every question paired, none lost or gained."""
    got = _import(cli, tmp_path, db, str(PRO / folder), "--data", str(PRO / "data"))
    assert got.code == 0, got.err
    ours = cli("eval", "benchmark=mmlu_pro", "data=mmlu_pro_local", f"data.path={PRO / 'data'}",
               "subjects=[health,math]", *native, "dtype=float32", "device=cpu", "tracking=sql_only",
               f"tracking.db_url={db}", f"hydra.run.dir={tmp_path / 'native'}", cwd=tmp_path)  # fmt: skip
    assert ours.code == 0, ours.err
    imported, native_run = sorted(stored_runs(db), key=lambda r: r.model_name != "smol_hf")
    assert imported.protocol.differences(native_run.protocol) == []
    assert imported.protocol.benchmark == "mmlu_pro"
    compared, report = _compare(cli, tmp_path, db, imported.id, native_run.id)
    micro = report["micro"]
    assert isinstance(micro, dict), compared.err
    assert (micro["n"], micro["lost"], micro["gained"]) == (6, 0, 0), compared.out
    assert f"(smol_hf, 6 questions, {native[-1].split('=')[1]} prompts, micro " in got.out
    return imported, native_run, ours.out


@pytest.mark.slow  # the packaged SmolLM2-135M: the weights lm-eval ran
def test_a_leaderboard_mmlu_pro_import_pairs_every_question_with_a_native_run(
    cli: Cli, tmp_path: Path, db: str
) -> None:
    imported, ours, printed = _pro_pair(cli, tmp_path, db, "leaderboard", "formulation=leaderboard")
    assert "from MMLU " in printed  # the native run's report: by origin, and chance per question
    assert "chance (a uniform guess over each question's options)" in printed
    assert ours.formulation == "leaderboard"
    theirs = {r.index: r for r in question_results(db, imported.id)}
    native = question_results(db, ours.id)
    assert {r.options for r in native} == {3, 4, 9, 10}
    for r in native:  # lm-eval's log-likelihoods on the same fp32 weights: each option's within 1e-4
        lm_eval = theirs[r.index]
        assert (lm_eval.options, lm_eval.src, lm_eval.prediction) == (r.options, r.src, r.prediction)
        assert r.logprobs is not None
        assert lm_eval.logprobs is not None
        assert len(r.logprobs) == r.options == len(lm_eval.logprobs)
        assert max(abs(a - b) for a, b in zip(r.logprobs, lm_eval.logprobs, strict=True)) < 1e-4
        assert (r.src or "").startswith("ori_mmlu-")
    without = _import(cli, tmp_path, f"sqlite:///{tmp_path / 'other.db'}", str(PRO / "leaderboard"),
                      "--data", str(tmp_path / "nowhere"))  # fmt: skip
    assert without.code == 2
    assert "MMLU-Pro folder" in without.err
    assert len(without.err.strip().splitlines()) == 1


@pytest.mark.slow  # the packaged SmolLM2-135M generating chains of thought
def test_lm_evals_chain_of_thought_import_pairs_with_a_native_chain_of_thought(
    cli: Cli, tmp_path: Path, db: str
) -> None:
    cot = ["scoring=cot", "scoring.max_new_tokens=256", "formulation=cot_lm_eval"]
    imported, ours, _ = _pro_pair(cli, tmp_path, db, "cot", *cot)
    theirs = {r.index: r for r in question_results(db, imported.id)}
    for r in question_results(db, ours.id):  # the same generations, read by the same rules
        assert (theirs[r.index].generated, theirs[r.index].extraction) == (r.generated, r.extraction)
