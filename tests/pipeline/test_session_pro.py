"""MMLU-Pro runs end to end (`benchmark=mmlu_pro`; scored as lm-eval 0.4.13's `leaderboard_mmlu_pro`
scores them: tests/pipeline/test_imported.py pairs its output with a native run), stored with their
options and origin, reported by category and origin, compared through the gate, never with an MMLU
run, its chains of thought read and resumed, and bad input refused before anything is recorded."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from ..conftest import CliResult, question_results, stored_runs

Cli = Callable[..., CliResult]
PRO_DATA = Path(__file__).resolve().parents[1] / "data" / "lm_eval_pro"
TINY = ["model=tiny", "device=cpu", "tracking=sql_only"]  # a chain of thought is the model's own text
FAKE = ["model=fake", "device=cpu", "tracking=sql_only"]
PRO = [
    "benchmark=mmlu_pro",
    "data=mmlu_pro_local",
    f"data.path={PRO_DATA / 'data'}",
    "subjects=[math,health]",
]


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


def test_two_mmlu_pro_runs_are_gated_and_never_compared_with_mmlu(cli: Cli, tmp_path: Path, db: str) -> None:
    common = ["model=fake", "device=cpu", "tracking=sql_only", f"tracking.db_url={db}"]
    for seed in (0, 1):
        got = cli("eval", *PRO, *common, f"model.tiny_seed={seed}", "scoring.choice_order=circular",
                  f"hydra.run.dir={tmp_path / f'pro{seed}'}", cwd=tmp_path)  # fmt: skip
        assert got.code == 0, got.err
    mmlu = cli(
        "eval", *common, "subjects=[anatomy]", "limit=2", f"hydra.run.dir={tmp_path / 'mmlu'}", cwd=tmp_path
    )
    assert mmlu.code == 0, mmlu.err
    first_mmlu, cand, base = stored_runs(db)
    for r in question_results(db, cand.id):  # each question asked in one rotation per option
        assert len(r.rotations) == r.options - 1
        assert [len(a.logprobs or ()) for a in r.rotations] == [r.options] * (r.options - 1)
    gate = ["tracking.mlflow=false", "gate=warn_only", f"tracking.db_url={db}"]
    got = cli("compare", f"baseline={base.id}", f"candidate={cand.id}", "gate.metric=circular", *gate,
              f"hydra.run.dir={tmp_path / 'cmp'}", cwd=tmp_path)  # fmt: skip
    assert got.code == 0, got.err
    assert "math" in got.out
    assert "health" in got.out
    across = cli("compare", f"baseline={first_mmlu.id}", f"candidate={cand.id}", *gate,
                 f"hydra.run.dir={tmp_path / 'across'}", cwd=tmp_path)  # fmt: skip
    assert across.code == 2
    assert "benchmark differs (baseline mmlu, candidate mmlu_pro)" in across.err
    assert len(across.err.strip().splitlines()) == 1


def _rows(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().split("\n") if line.strip()]


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"options": [f"o{i}" for i in range(11)], "answer": "A", "answer_index": 0}, "11 options"),
        ({"options": ["only"], "answer": "A", "answer_index": 0}, "1 options (1 not N/A)"),
        ({"answer": "J", "answer_index": 9}, "answer 'J' is not a letter of its 3 options (A-C)"),
        ({"answer": "B", "answer_index": 2}, "answer 'B' and answer_index 2 disagree"),
    ],
)
def test_a_bad_question_is_one_line_exit_2_and_nothing_recorded(
    cli: Cli, tmp_path: Path, db: str, change: dict[str, object], said: str
) -> None:
    folder = tmp_path / "pro"
    folder.mkdir()
    (folder / "validation.jsonl").write_text((PRO_DATA / "data" / "validation.jsonl").read_text())
    rows = _rows(PRO_DATA / "data" / "test.jsonl")
    rows[1] = {**rows[1], **change}  # the 3-option question
    (folder / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = cli("eval", *PRO[:2], f"data.path={folder}", "subjects=[math,health]", *FAKE,
              f"tracking.db_url={db}",
              f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)  # fmt: skip
    assert got.code == 2
    (line,) = got.err.strip().splitlines()
    assert f"{folder / 'test.jsonl'}: test row 2: " in line
    assert said in line
    assert not Path(db.removeprefix("sqlite:///")).exists() or stored_runs(db) == []


def test_a_category_with_fewer_shots_than_k_is_one_line(cli: Cli, tmp_path: Path, db: str) -> None:
    folder = tmp_path / "pro"
    folder.mkdir()
    shots = _rows(PRO_DATA / "data" / "validation.jsonl")
    kept = [r for r in shots if r["category"] != "health"] + [r for r in shots if r["category"] == "health"][
        :3
    ]
    (folder / "validation.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    (folder / "test.jsonl").write_text((PRO_DATA / "data" / "test.jsonl").read_text())
    got = cli("eval", *PRO[:2], f"data.path={folder}", "subjects=[math,health]", *FAKE,
              f"tracking.db_url={db}",
              f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)  # fmt: skip
    assert got.code == 2
    (line,) = got.err.strip().splitlines()
    assert "category 'health' has 3 validation rows, fewer than k=5 shots" in line


@pytest.mark.usefixtures("mlflow_store")
def test_the_noise_floor_and_the_sequential_gate_work_on_mmlu_pro(cli: Cli, tmp_path: Path, db: str) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    logged = [*PRO, *FAKE[:2], f"tracking.db_url={db}", f"tracking.mlflow_uri={uri}"]
    folder = tmp_path / "noise"
    noise = cli("noise", *logged, "noise.shot_seeds=[1,2]", f"hydra.run.dir={folder}", cwd=tmp_path)
    assert noise.code == 0, noise.err
    doc = json.loads((folder / "noise.json").read_text())
    names = ["repeat", "batching (1, None)", "shot seed 1", "shot seed 2"]
    assert [p["name"] for p in doc["pairs"]] == names
    assert set(doc["shot_seed_spread"]["subjects"]) == {"math", "health"}
    (base, *_) = [r for r in stored_runs(db) if r.protocol.shot_seed is None]  # the noise default: limit=2
    gate = [f"gate.baseline={base.id}", "gate.sequential=true", "gate.looks=2", "gate.margin=0.5"]
    gated = cli("eval", *logged, "limit=2", "model.tiny_seed=1", *gate, f"hydra.run.dir={tmp_path / 'seq'}",
                cwd=tmp_path)  # fmt: skip
    assert gated.code in (0, 1), gated.err  # a verdict, whichever: never unusable input or a bug
    assert "PASS" in gated.out or "REGRESSION" in gated.out or "INCONCLUSIVE" in gated.out
    from mlflow import MlflowClient

    runs = MlflowClient(uri).search_runs(
        [e.experiment_id for e in MlflowClient(uri).search_experiments()], max_results=50
    )
    assert any(r.data.params.get("benchmark") == "mmlu_pro" for r in runs)
    notes = [r.data.tags.get("mlflow.note.content", "") for r in runs if r.data.params.get("benchmark")]
    assert any("(MMLU-Pro, 95 % Wilson intervals)" in n and "MMLU-Pro, category" in n for n in notes)


def test_a_chain_of_thought_run_records_how_each_answer_was_read(cli: Cli, tmp_path: Path, db: str) -> None:
    cot = [
        *PRO,
        *TINY,
        f"tracking.db_url={db}",
        "scoring=cot",
        "formulation=cot_lm_eval",
        "scoring.max_new_tokens=6",
    ]
    got = cli("eval", *cot, f"hydra.run.dir={tmp_path / 'cot'}", cwd=tmp_path)
    assert got.code == 0, got.err
    assert "answers read by: " in got.out
    (run,) = stored_runs(db)
    results = question_results(db, run.id)
    assert all(r.extraction in ("answer is", "answer:", "last letter", "none", "beyond") for r in results)
    assert all(
        r.generated is not None and r.new_tokens <= 6 and r.finish in ("stop", "end", "length")
        for r in results
    )
    shown = cli("runs", "--db", db, "show", run.id, cwd=tmp_path)
    assert "answers read by: " in shown.out
    (row,) = cli("runs", "--db", db, "list", cwd=tmp_path).out.splitlines()[1:2]
    assert row.split()[5:7] == ["cot", "mmlu_pro:cot_lm_eval"]  # the scoring and prompt columns
    guessed = cli("eval", *cot, "scoring.failed=random", f"hydra.run.dir={tmp_path / 'guess'}", cwd=tmp_path)
    assert guessed.code == 0, guessed.err
    again = next(r for r in stored_runs(db) if r.id != run.id)
    by_index = {r.index: r for r in results}
    for r in question_results(db, again.id):  # a guess only where no rule read a letter, else the same
        was = by_index[r.index]
        assert r.extraction == ("guess" if was.extraction == "none" else was.extraction)
        assert r.prediction is not None or was.extraction == "beyond"


def _lm_eval_cot() -> dict[int, dict[str, object]]:
    """lm-eval 0.4.13's own mmlu_pro (chain of thought, max_gen_toks 256) samples, by question_id."""
    out = {}
    for path in (PRO_DATA / "cot").rglob("samples_*.jsonl"):
        for line in path.read_text().split("\n"):
            if line.strip():
                doc = json.loads(line)
                out[doc["doc"]["question_id"]] = doc
    return out


def test_a_chain_of_thought_is_lm_evals_prompt_and_answer() -> None:
    """lm-eval's own contexts byte for byte, and its answers read the same; its greedy generations
    equal a native run's on the same weights: tests/pipeline/test_imported.py (the import pairs them)."""
    from mmlu_track.eval import mmlu_pro, prompts
    from mmlu_track.eval.answers import extract

    theirs = _lm_eval_cot()
    data = mmlu_pro.load_local(PRO_DATA / "data")
    questions = {q.qid: q for c in data.categories.values() for q in c.test}
    assert sorted(theirs) == sorted(questions)
    for qid, sample in theirs.items():
        q = questions[qid]
        context = sample["arguments"]["gen_args_0"]["arg_0"]  # type: ignore[index]
        assert context == prompts.render(
            "cot_lm_eval", q.subject, mmlu_pro.shot_pool(data, "category", q.subject, 5)[:5], q
        )
        text, (filtered,) = sample["resps"][0][0], sample["filtered_resps"]  # type: ignore[index]
        if filtered != "[invalid]":  # where lm-eval's one regex matched, the cascade reads the same
            assert extract(text, len(q.choices)) == ("ABCDEFGHIJ".index(filtered), "answer is")


def test_a_chain_of_thought_stopped_midway_resumes_and_generates_nothing_twice(
    cli: Cli, tmp_path: Path, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mmlu_track.eval.in_process import InProcess

    real = InProcess.generate
    asked: list[int] = []

    def interrupted(self: InProcess, requests: list[object], progress: object) -> object:
        if asked:  # the second subject: Ctrl-C, after the first was committed
            raise KeyboardInterrupt
        asked.append(len(requests))
        return real(self, requests, progress)  # type: ignore[arg-type]

    cot = [
        *PRO,
        *TINY,
        f"tracking.db_url={db}",
        "scoring=cot",
        "formulation=cot_official",
        "scoring.max_new_tokens=4",
    ]
    monkeypatch.setattr(InProcess, "generate", interrupted)
    stopped = cli("eval", *cot, f"hydra.run.dir={tmp_path / 'first'}", cwd=tmp_path)
    assert stopped.code == 130
    (run,) = stored_runs(db)
    first = question_results(db, run.id)
    assert len(first) == asked[0] == 3  # one category's questions, generated and committed

    def counted(self: InProcess, requests: list[object], progress: object) -> object:
        asked.append(len(requests))
        return real(self, requests, progress)  # type: ignore[arg-type]

    monkeypatch.setattr(InProcess, "generate", counted)
    resumed = cli("eval", *cot, f"hydra.run.dir={tmp_path / 'second'}", cwd=tmp_path)
    assert resumed.code == 0, resumed.err
    assert asked[1:] == [3]  # only the other category's questions
    (again,) = stored_runs(db)
    assert again.id == run.id
    kept = {r.index: r for r in question_results(db, run.id)}
    assert all(kept[r.index] == r for r in first)  # the committed generations as they were
