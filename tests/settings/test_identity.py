"""A run's identity never depends on how a value was typed (issue 86): the subjects are a set, the
stop strings too, and at 0 shots chat=multiturn asks what chat=single_turn does; the answer patterns
keep their order (the extraction tries them in it)."""

from __future__ import annotations

from mmlu_track.records.protocol import EvalProtocol
from mmlu_track.settings.identity import canonical, identity_dict

from ..conftest import compose_eval


def test_the_order_subjects_are_typed_in_changes_neither_the_settings_nor_the_identity() -> None:
    one = compose_eval(["model=tiny", "subjects=[marketing,anatomy]"])
    two = compose_eval(["model=tiny", "subjects=[anatomy,marketing,anatomy]"])
    assert one.subjects == two.subjects == ("anatomy", "marketing")  # the benchmark's own order
    assert identity_dict(one) == identity_dict(two)
    everything = compose_eval(["model=tiny"])
    assert canonical(everything) is everything  # `all` is already in that order: nothing rebuilt


def test_mmlu_pro_categories_take_mmlu_pros_order() -> None:
    pro = ["benchmark=mmlu_pro", "data=mmlu_pro_local", "data.path=/d"]
    cfg = compose_eval([*pro, "subjects=[physics,biology,law]"])
    assert cfg.subjects == ("biology", "law", "physics")


def test_stop_strings_are_a_set_and_patterns_keep_their_order() -> None:
    stops = ["scoring.stop=[Question:,Answer:,Question:]", "scoring.stop=[Answer:,Question:]"]
    a, b = (compose_eval(["model=tiny", "scoring=generate", s]) for s in stops)
    assert a.scoring.stop == b.scoring.stop == ("Answer:", "Question:")
    assert identity_dict(a) == identity_dict(b)
    pattern = ["model=tiny", "scoring=generate_pattern"]
    forward = compose_eval([*pattern, r"scoring.patterns=['answer: ([ABCD])','([ABCD])']"])
    backward = compose_eval([*pattern, r"scoring.patterns=['([ABCD])','answer: ([ABCD])']"])
    assert forward.scoring.patterns == ("answer: ([ABCD])", "([ABCD])")
    assert identity_dict(forward) != identity_dict(backward)


def test_at_zero_shots_multiturn_is_single_turn_and_at_k_shots_it_is_not() -> None:
    single, multi = (compose_eval(["model=tiny", "k=0", f"chat={c}"]) for c in ("single_turn", "multiturn"))
    assert multi.chat.style == "single_turn"
    assert identity_dict(single) == identity_dict(multi)
    protocol = {"questions": "q", "n_questions": 1, "dev_fingerprint": None, "template_hash": "t"}
    assert EvalProtocol.of(single, **protocol) == EvalProtocol.of(multi, **protocol)
    five = compose_eval(["model=tiny", "k=5", "chat=multiturn"])
    assert five.chat.style == "multiturn"
    # The few-shot gap of a multiturn run is measured against its 0-shot run, now single_turn.
    at_five = EvalProtocol.of(five, **protocol)
    assert at_five.differences(EvalProtocol.of(multi, **protocol), fewshot_gap=True) == []
    assert any("chat" in d for d in at_five.differences(EvalProtocol.of(single, **protocol)))
