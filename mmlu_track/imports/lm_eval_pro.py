"""lm-eval's MMLU-Pro tasks read as this tool's MMLU-Pro runs: `leaderboard_mmlu_pro` (log-likelihood,
one task over the 14 categories) and the chain-of-thought `mmlu_pro_<category>` tasks (generated, read
by lm-eval's one regex). Each doc is matched by its `question_id` to the MMLU-Pro data the import is
given, its text and options checked; a generation's text is kept as lm-eval logged it (`resps`) with
lm-eval's own answer (`filtered_resps`). Everything refused is one line naming the file and line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from mmlu_track.eval.data import DataError, Question
from mmlu_track.imports import lm_eval_fields as fields
from mmlu_track.settings.subjects import PRO_CATEGORIES

PRO_TASK = "leaderboard_mmlu_pro"  # lm-eval's (the Open LLM Leaderboard v2's) MMLU-Pro: one task
COT_TASK = re.compile(r"mmlu_pro_(?P<category>[a-z_]+)")  # its chain of thought, a task per category


def cot_category(task: str) -> str | None:
    """The category of lm-eval's chain-of-thought task `mmlu_pro_<category>`, else None."""
    found = COT_TASK.fullmatch(task)
    category = found["category"].replace("_", " ") if found else None
    return category if category in PRO_CATEGORIES else None


class ProTests:
    """MMLU-Pro's test questions by `question_id`; a doc must be the data's question of that id, text
    and options (whitespace collapsed), logged once."""

    def __init__(self, questions: Iterable[Question], *, generated: bool = False) -> None:
        """Index `questions` (the test split of the data given, or a category's) by their id;
        `generated`: the docs are lm-eval's chains of thought (its mmlu_pro tasks)."""
        self.by_id = {q.qid: q for q in questions}
        self.taken: dict[int, str] = {}
        self.generated = generated

    def match(self, doc: Mapping[str, Any], where: str) -> Question:
        """The test question `doc` is; one line when none is, or when it was matched already."""
        qid = doc.get("question_id")
        question = self.by_id.get(qid) if isinstance(qid, int) else None
        if question is None:
            raise DataError(f"{where}: question_id {qid!r} is no test question of the MMLU-Pro data given")
        options = doc.get("options")
        if not isinstance(options, list) or fields.key(
            str(doc.get("question")), map(str, options)
        ) != fields.key(question.question, question.choices):
            raise DataError(f"{where}: question {qid} is not the data's (another revision of MMLU-Pro?)")
        if question.index in self.taken:
            raise DataError(f"{where}: the same question as {self.taken[question.index]} (logged twice)")
        self.taken[question.index] = where.rpartition(": ")[2]
        return question


def generation(line: Mapping[str, Any], where: str) -> tuple[str, str, str | None]:
    """A generated sample's (context, the text lm-eval generated, lm-eval's answer: a letter, or
    None where its regex read none, `[invalid]`)."""
    args = line.get("arguments")
    first = args.get("gen_args_0") if isinstance(args, dict) else None
    context = first.get("arg_0") if isinstance(first, dict) else None
    resps = line.get("resps")
    first_resp = resps[0] if isinstance(resps, list) and resps else None
    text = first_resp[0] if isinstance(first_resp, list) and first_resp else None
    filtered = line.get("filtered_resps")
    said = filtered[0] if isinstance(filtered, list) and len(filtered) == 1 else None
    if not isinstance(context, str) or not isinstance(text, str) or not isinstance(said, str):
        raise DataError(
            f"{where}: a generated sample needs its context, its generation (resps) and filtered_resps"
        )
    return context, text, None if said == "[invalid]" else said
