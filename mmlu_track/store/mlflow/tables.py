"""Per-question tables for MLflow's artifact view: logged with `MlflowClient.log_table`, which the UI
shows as a table a reviewer filters (`change` is `lost`, a subject, a letter) without downloading
predictions.jsonl. Pure: results in, columns out (`{column: [value per question]}`).

- `question_columns`: an evaluation's questions (`questions.json`): subject, index, the question
  and its choices (where the run's data was at hand), gold, prediction, correct, the letters'
  log-probs or the generated text, and a circular run's all-rotations outcome.
- `paired_columns`: a comparison's paired questions (`paired_questions.json`): the question
  (where the data was at hand), both runs' answers and what changed, the changed ones first.
"""

from __future__ import annotations

from collections.abc import Sequence

from mmlu_track.records.results import Docs, QuestionResult
from mmlu_track.settings.subjects import LETTERS

QUESTIONS_TABLE = "questions.json"
PAIRED_TABLE = "paired_questions.json"
Columns = dict[str, list[object]]


def _letter(choice: int | None) -> str:
    return "" if choice is None else LETTERS[choice]  # "": not a letter (invalid, counted wrong)


def _choices(choices: object) -> str:
    if not isinstance(choices, list | tuple):
        return ""
    return "\n".join(f"{LETTERS[i]}. {c}" for i, c in enumerate(choices))


def question_columns(results: Sequence[QuestionResult], docs: Docs | None = None) -> Columns:
    """An evaluation's questions as table columns, by subject and index: subject, index, the question
    and its choices (with `docs`), gold, prediction ("": not a letter), correct, then, where any
    question has them, the annotation, the letters' log-probs, the generated text and the rotations'
    outcomes."""
    rows = sorted(results, key=lambda r: (r.subject, r.index))
    out: Columns = {"subject": [r.subject for r in rows], "index": [r.index for r in rows]}
    if any(r.src is not None for r in rows):  # MMLU-Pro: where each question came from
        out["src"] = [r.src for r in rows]
    if docs:
        texts = [docs.get((r.subject, r.index), {}) for r in rows]
        out["question"] = [str(t.get("question", "")) for t in texts]
        out["choices"] = [_choices(t.get("choices")) for t in texts]
    out |= {
        "gold": [LETTERS[r.gold] for r in rows],
        "prediction": [_letter(r.prediction) for r in rows],
        "correct": [r.correct for r in rows],
    }
    if any(r.annotation is not None for r in rows):  # beside correct: what MMLU-Redux says of the key
        out["annotation"] = [r.annotation for r in rows]
    if any(r.logprobs is not None for r in rows):
        widest = max(len(r.logprobs or ()) for r in rows)  # a column per letter any question has
        for i, letter in enumerate(LETTERS[:widest]):
            out[f"logprob_{letter}"] = [
                None if r.logprobs is None or i >= len(r.logprobs) else round(r.logprobs[i], 4) for r in rows
            ]
    if any(r.generated is not None for r in rows):
        out["generated"] = [r.generated for r in rows]
    if any(r.extraction is not None for r in rows):  # a chain of thought: how its answer was read
        out["extraction"] = [r.extraction for r in rows]
        out["new_tokens"] = [r.new_tokens for r in rows]
        out["finish"] = [r.finish for r in rows]
    if any(r.rotations for r in rows):
        out["correct_in_all_rotations"] = [r.circular_correct for r in rows]
        out["consistent"] = [r.consistent for r in rows]
    return out


def change(base: QuestionResult, cand: QuestionResult, metric: str = "accuracy") -> str:
    """`lost` (right in the baseline only), `gained`, `other answer` (wrong in both, another
    letter), or "" (unchanged), on the comparison's metric."""
    b, c = base.outcome(metric), cand.outcome(metric)
    if b != c:
        return "lost" if b else "gained"
    return "" if base.chosen == cand.chosen else "other answer"


def paired_columns(
    baseline: Sequence[QuestionResult],
    candidate: Sequence[QuestionResult],
    metric: str = "accuracy",
    docs: Docs | None = None,
) -> Columns:
    """A comparison's paired questions as table columns, the changed ones first, then by subject and
    index: what changed on `metric`, the question (with `docs`), gold, both runs' answers and outcomes,
    and the annotation where given. Every candidate question must be in `baseline` (else KeyError)."""
    base = {(r.subject, r.index): r for r in baseline}
    rows = [(change(base[(c.subject, c.index)], c, metric), base[(c.subject, c.index)], c) for c in candidate]
    rows.sort(key=lambda row: (row[0] == "", row[2].subject, row[2].index))  # the changed first
    texts = [docs.get((c.subject, c.index), {}) for _, _, c in rows] if docs else None
    annotated = any(c.annotation for c in candidate)  # MMLU-Redux's word on each key, where given
    return {
        "change": [what for what, _, _ in rows],
        "subject": [c.subject for _, _, c in rows],
        "index": [c.index for _, _, c in rows],
        **({"question": [str(t.get("question", "")) for t in texts]} if texts else {}),
        "gold": [LETTERS[c.gold] for _, _, c in rows],
        "baseline": [_letter(b.prediction) for _, b, _ in rows],
        "candidate": [_letter(c.prediction) for _, _, c in rows],
        "baseline_correct": [b.outcome(metric) for _, b, _ in rows],
        "candidate_correct": [c.outcome(metric) for _, _, c in rows],
        **({"annotation": [c.annotation for _, _, c in rows]} if annotated else {}),
    }
