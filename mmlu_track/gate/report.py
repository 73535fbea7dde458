"""Reports of a comparison, rendered only: the console table, Markdown (verdict first: report.md,
GitHub's job summary, the MLflow description) and JSON. The figure: `gate.plot`."""

from __future__ import annotations

import dataclasses
import html
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from mmlu_track.gate.differs import NEUTRAL, NOTHING_DIFFERS, neutral_differs, title, what_differs
from mmlu_track.gate.stats import BOOTSTRAP_MIN_FLIPS, BOOTSTRAP_MIN_PER_SUBJECT, Comparison, Delta, pts

if TYPE_CHECKING:
    from mmlu_track.gate.outcome import Outcome
    from mmlu_track.gate.policy import Verdict
    from mmlu_track.records.stored import StoredRun

# The word first: where no emoji font is installed (a browser on a server, a CI log) the emoji is a box.
ICONS = {
    "pass": "PASS ✅",
    "regression": "REGRESSION ❌",
    "inconclusive": "INCONCLUSIVE ⚠️",
    "analysis": "ANALYSIS 📊",
}
GAP_ROWS = 4  # a few-shot gap shows this many biggest gains and biggest losses in its table

_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~$#])")
# Our own intervals ("[-1.20 pts, +0.40 pts]") stay as written: with every other bracket escaped
# and none at the start (where a reference definition would begin), they are never a link.
_INTERVAL = re.compile(r"(?<=.)\[[-+]\d+\.\d\d( pts)?, [-+]\d+\.\d\d( pts)?\]")
_PLAIN_CODE = re.compile(r"[\w.:@/+-]*")


def _md_part(text: str) -> str:
    one_line = re.sub(r"[\r\n]+", " ", text)  # a newline in a name would start a block of its own
    return _MD_SPECIAL.sub(r"\\\1", html.escape(one_line, quote=False))


def md_text(text: str) -> str:
    """`text` (a model name, a path, a reason embedding either) as Markdown that shows it as written:
    HTML escaped (a folder named `<img src=x onerror=...>` is text, not markup, in report.md and
    the job summary) and Markdown's specials backslash-escaped (`|` never splits a table cell,
    `**` never starts bold)."""
    out, last = [], 0
    for m in _INTERVAL.finditer(text):
        out += [_md_part(text[last : m.start()]), m.group()]
        last = m.end()
    return "".join([*out, _md_part(text[last:])])


def md_code(text: str) -> str:
    """An id or setting in backticks; as escaped text when it holds anything a code span cannot
    show as written (a backtick, `|` in a table, HTML that a summary might render)."""
    return f"`{text}`" if _PLAIN_CODE.fullmatch(text) else md_text(text)


def _differs_line(base: StoredRun, cand: StoredRun) -> str:
    text = "; ".join(map(md_text, what_differs(base, cand))) or NOTHING_DIFFERS
    if neutral := neutral_differs(base, cand):
        text += f"; {NEUTRAL}: {'; '.join(map(md_text, neutral))}"
    return f"What differs: {text}."


def _p(p: float | None) -> str:
    return "–" if p is None else f"{p:.3g}"


def _label(d: Delta, subject: bool) -> str:
    # A subject's words, not its identifier: MLflow's artifact viewer gives a table's columns equal
    # widths and broke `abstract_algebra` mid-word; at the spaces, it wraps where a reader expects.
    return d.name.replace("_", " ") if subject else d.name


def _row(d: Delta, mark: str = "", *, subject: bool = False) -> str:
    """A table row; Δ in bold only where it is a real difference: a subject flagged or improved
    after correction, an overall or category row whose interval excludes 0. The p-value: a
    subject's after correction (what flags it), an overall row's own. A category by its first word
    (`other`, not `other (business, health, misc.)`, which the narrow column broke mid-word)."""
    real = d.flagged or d.improved if subject else d.ci_low > 0 or d.ci_high < 0
    delta = f"**{pts(d.delta)}**" if real else pts(d.delta)
    name = _label(d, subject).split(" (")[0]
    return (
        f"| {mark}{name} | {d.n} | {100 * d.baseline_acc:.2f} | {100 * d.candidate_acc:.2f} | "
        f"{delta} | [{pts(d.ci_low)}, {pts(d.ci_high)}] | {d.lost} | {d.gained} | "
        f"{_p(d.p_regression_adj if subject else d.p_regression)} |"
    )


def _bullet(d: Delta, *, subject: bool = True) -> str:
    """A row as a list item: a table of 57 rows is a scroll box in MLflow's artifact viewer, and its
    descriptions show a table as run-together text."""
    real = d.flagged or d.improved if subject else d.ci_low > 0 or d.ci_high < 0
    delta = f"**{pts(d.delta)}**" if real else pts(d.delta)
    p = f", p adj. {_p(d.p_regression_adj)}" if subject else ""
    return (
        f"- {_mark(d)}{_label(d, subject)} ({d.n} q): {100 * d.baseline_acc:.2f} → "
        f"{100 * d.candidate_acc:.2f} %, Δ {delta} pts [{pts(d.ci_low)}, {pts(d.ci_high)}], "
        f"{d.lost} lost / {d.gained} gained{p}"
    )


# Short headers: MLflow's viewer cuts a header wider than its (equal) column with an ellipsis.
_ALIGN = "|---|---:|---:|---:|---:|---|---:|---:|---:|"
_HEADER = f"| | n | base % | cand % | Δ pts | 95% CI | lost | gained | p drop |\n{_ALIGN}"
_SUBJECT_HEADER = f"| subject | n | base % | cand % | Δ pts | 95% CI | lost | gained | p adj. |\n{_ALIGN}"
TABLE_ROWS = 8  # the most rows of a table: MLflow's viewer shows about that many before scrolling


def _first_line(verdict: Verdict, escape: Callable[[str], str] = str, *, code: bool = True) -> str:
    """The verdict in words first (then its emoji), its headline, and (`code`) the exit code."""
    exit_code = "" if verdict.status == "analysis" or not code else f" (exit {verdict.exit_code})"
    return f"{ICONS[verdict.status]}: {escape(verdict.headline)}{exit_code}"


def exit_line(verdict: Verdict) -> str:
    """What the verdict does to a release, said once below the reasons (not in the heading)."""
    does = "does not block the release" if verdict.exit_code == 0 else "blocks the release"
    return f"Exit code {verdict.exit_code}: {does}."


def _gap_rows(ordered: list[Delta]) -> list[Delta]:
    """The biggest losses and the biggest gains, both visible (ordered by Δ ascending)."""
    if len(ordered) <= 2 * GAP_ROWS:
        return ordered
    return ordered[:GAP_ROWS] + ordered[-GAP_ROWS:]


def _method_lines(comp: Comparison, gate_mode: bool, sequential: dict[str, Any] | None = None) -> list[str]:
    s = comp.settings
    lines = [f"Intervals ({100 * (1 - s.alpha):.0f}%): {comp.intervals}."]
    if sequential:
        ni = comp.noninferiority
        lines.append(
            f"The verdict is the sequential gate's (testing by betting, valid at every look). For reference "
            f"only, Tango's fixed-sample non-inferiority test on these questions: p = {_p(ni.p_value)}, "
            f"one-sided lower bound {pts(ni.lower_bound)} pts "
            + (
                "(not valid after stopping on the data)."
                if sequential.get("stopped_early", True)
                else "(every look was taken: the planned sample, read once)."
            )
        )
    elif gate_mode:
        ni = comp.noninferiority
        lines.append(
            f"Non-inferiority (Δ micro > −{100 * ni.margin:.1f} pts): Tango's score test with an exact "
            f"critical value, p = {_p(ni.p_value)}; one-sided {100 * (1 - s.alpha):.0f}% lower bound "
            f"{pts(ni.lower_bound)} pts → **{'shown' if ni.shown else 'not shown'}**. The verdict rests on "
            "this test and on exact McNemar tests (overall; per subject after correction). The table's "
            f"{100 * (1 - s.alpha):.0f}% intervals are two-sided: their lower ends sit below this bound "
            "by design and are not what the verdict compares with −δ."
        )
    if comp.bootstrap:
        b = comp.bootstrap
        lines.append(
            f"Subject-stratified paired bootstrap ({s.bootstrap_resamples} resamples), for reference: micro "
            f"[{pts(b['micro'][0])}, {pts(b['micro'][1])}], "
            f"macro [{pts(b['macro'][0])}, {pts(b['macro'][1])}] pts."
        )
    elif s.bootstrap_resamples > 0:
        lines.append(
            f"No bootstrap interval: it needs at least {BOOTSTRAP_MIN_FLIPS} changed answers and "
            f"{BOOTSTRAP_MIN_PER_SUBJECT} questions per subject to be sound."
        )
    return lines


def _mlflow_links(o: Outcome, experiments: Mapping[str, str]) -> list[str]:
    """Links from the report to the two runs in the MLflow UI (a tracking server only), on the
    machine-learning pages when their experiments (`experiments`: MLflow run id → experiment id)
    are known (a bare run link opens under MLflow 3's GenAI tabs)."""
    uri = o.server
    if uri is None:
        return []
    from mmlu_track.store.mlflow import run_page

    links = [
        f"[{side} run]({run_page(uri, experiments.get(run.mlflow_run_id), run.mlflow_run_id)})"
        for side, run in (("baseline", o.base), ("candidate", o.cand))
        if run.mlflow_run_id
    ]
    return ["", "MLflow: " + " · ".join(links)] if links else []


def markdown(o: Outcome, experiments: Mapping[str, str] | None = None) -> str:
    """Verdict first (in words, then its emoji), what it does to a release, the overall rows, then
    the subjects that tell (flagged, changed) in a short table; every subject follows, by Δ, from
    `all_subjects` (a list) or `all_subjects_folded` (a folded table, for GitHub's job summary).
    `experiments`: the runs' MLflow experiments, for the links to their pages."""
    comp, verdict, base, cand, cfg = o.comp, o.verdict, o.base, o.cand, o.cfg
    s = comp.settings
    gate_mode = cfg.mode == "gate"
    # Names (models, paths, ids, a policy's name) are the user's: escaped wherever they are shown.
    kind = "release gate" if gate_mode else "few-shot gap"
    lines = [f"## MMLU {kind}: {_first_line(verdict, md_text, code=False)}", ""]
    lines += [f"- {md_text(r)}" for r in verdict.reasons]
    if verdict.status != "analysis":
        lines += ["", exit_line(verdict)]
    policy = (
        f", policy {md_code(s.name)} (α={s.alpha}, δ={100 * s.delta:.1f} pts, min effect "
        f"{100 * s.min_effect:.0f} pts, {s.correction})"
        if gate_mode
        else f" (α={s.alpha}, {s.correction})"
    )
    lines += [
        "",
        f"**{md_text(title(base, cand, cfg.mode))}** — candidate run {md_code(cand.id[:12])} vs baseline "
        f"{md_code(base.id[:12])}, {comp.micro.n} paired questions, formulation {md_code(cand.formulation)}, "
        f"scoring {md_code(cand.scoring)}, "
        f"k={base.k}{'' if base.k == cand.k else f'→{cand.k}'}{policy}.",
        "",
        _differs_line(base, cand),
        *_mlflow_links(o, experiments or {}),
        "",
        _HEADER,
        _row(comp.micro),
        _row(comp.macro),
        *(_row(c) for c in comp.categories),
        "",
        *_method_lines(comp, gate_mode, o.sequential),
    ]
    return "\n".join([*lines, "", *_subject_lines(comp, gate_mode)])


def _subject_lines(comp: Comparison, gate_mode: bool) -> list[str]:
    ordered = sorted(comp.subjects, key=lambda d: d.delta)
    flagged = [d for d in ordered if d.flagged]
    improved = [d for d in ordered if d.improved]
    lines = [f"### Subjects: {len(flagged)} flagged ⚠️, {len(improved)} improved ⬆️", ""]
    if gate_mode:  # flagged, then the subjects whose answers changed most: unchanged ones add nothing
        changed = [d for d in ordered if not d.flagged and d.lost + d.gained]
        changed.sort(key=lambda d: (-abs(d.delta), -(d.lost + d.gained)))
        shown = (flagged + changed)[:TABLE_ROWS]
        what = "flagged first, then the largest changes"
    else:
        shown = _gap_rows(ordered)
        what = "the largest losses and gains"
    if shown:
        lines += [f"Of {len(ordered)} subjects, {len(shown)} ({what}):", "", _SUBJECT_HEADER]
        lines += [_row(d, _mark(d), subject=True) for d in shown]
    else:
        lines += ["No subject has a changed answer."]
    if improved and gate_mode:
        lines += ["", "Improved: " + ", ".join(f"{_label(d, True)} ({pts(d.delta)})" for d in improved)]
    return lines


def all_subjects(comp: Comparison) -> str:
    """Every subject by Δ, as a list (report.md: MLflow's viewer shows a long table in a scroll box
    and raw HTML as text)."""
    ordered = sorted(comp.subjects, key=lambda d: d.delta)
    return "\n".join(["", f"### All {len(ordered)} subjects, sorted by Δ", "", *map(_bullet, ordered), ""])


def all_subjects_folded(comp: Comparison) -> str:
    """Every subject by Δ, as a table folded under `<details>` (GitHub's job summary renders it)."""
    ordered = sorted(comp.subjects, key=lambda d: d.delta)
    lines = ["", f"<details><summary>All {len(ordered)} subjects, sorted by Δ</summary>", "", _SUBJECT_HEADER]
    lines += [_row(d, _mark(d), subject=True) for d in ordered]
    return "\n".join([*lines, "", "</details>", ""])


def description(o: Outcome) -> list[str]:
    """A comparison's MLflow description after its first line: the verdict's reasons and exit code,
    what differs, and the overall rows as a list (MLflow renders a description's table as run-together
    text)."""
    comp, verdict, base, cand = o.comp, o.verdict, o.base, o.cand
    lines = [f"**{md_text(title(base, cand, o.cfg.mode))}**", ""]
    lines += [f"- {md_text(r)}" for r in verdict.reasons]
    if verdict.status != "analysis":
        lines += ["", exit_line(verdict)]
    lines += ["", _differs_line(base, cand), ""]
    lines += [_bullet(d, subject=False) for d in (comp.micro, comp.macro, *comp.categories)]
    flagged = sum(d.flagged for d in comp.subjects)
    return [*lines, "", f"Subjects flagged: {flagged} of {len(comp.subjects)} (all of them in report.md)."]


def _mark(d: Delta) -> str:
    return "⚠️ " if d.flagged else ("⬆️ " if d.improved else "")


def console(o: Outcome) -> str:
    """The comparison as the console prints it: the verdict's line, the comparison in a line, the reasons,
    every subject by Δ (`!` flagged, `+` improved), then the categories, macro and micro, then the method."""
    comp, verdict, base, cand, cfg = o.comp, o.verdict, o.base, o.cand, o.cfg
    width = max(len(d.name) for d in (*comp.subjects, *comp.categories)) + 4
    head = f"{'':<{width}}{'n':>6} {'base %':>7} {'cand %':>7} {'Δ pts':>7}  {'95% CI':<17} {'p adj':>8}"

    def line(d: Delta, mark: str = "  ") -> str:
        ci = f"[{pts(d.ci_low)}, {pts(d.ci_high)}]"
        return (
            f"{mark}{d.name:<{width - 2}}{d.n:>6} {100 * d.baseline_acc:7.2f} {100 * d.candidate_acc:7.2f} "
            f"{pts(d.delta):>7}  {ci:<17} {_p(d.p_regression_adj):>8}"
        )

    runs = f"candidate run {cand.id[:12]}, baseline run {base.id[:12]}"  # what a model name was taken as
    rows = [
        _first_line(verdict),
        f"  {title(base, cand, cfg.mode)} ({runs})",
        *(f"  - {r}" for r in verdict.reasons),
    ]
    rows.append(head.replace("95% CI", f"{100 * (1 - comp.settings.alpha):.0f}% CI"))
    rows += [
        line(d, "! " if d.flagged else ("+ " if d.improved else "  "))
        for d in sorted(comp.subjects, key=lambda d: d.delta)
    ]
    rows += ["-" * len(head), *(line(c) for c in comp.categories), line(comp.macro), line(comp.micro)]
    rows += [r.replace("**", "") for r in _method_lines(comp, cfg.mode == "gate", o.sequential)]
    return "\n".join(rows)


def to_json(o: Outcome) -> dict[str, Any]:
    """The comparison as report.json holds it: mode, policy, verdict, both runs, every statistic of the
    `Comparison` and the non-inferiority test with its questions needed (searched now, on first use).
    The sequential gate's section is added by `publish`."""
    comp, verdict, base, cand, cfg = o.comp, o.verdict, o.base, o.cand, o.cfg

    def run(r: StoredRun) -> dict[str, Any]:
        return {
            "id": r.id, "model": r.model_name, "revision": r.model_revision, "k": r.k,
            "formulation": r.formulation, "scoring": r.scoring, "data_fingerprint": r.data_fingerprint,
            "acc_micro": r.acc_micro, "mlflow_run_id": r.mlflow_run_id,
        }  # fmt: skip

    return {
        "mode": cfg.mode,
        "policy": dataclasses.asdict(comp.settings),
        "verdict": {
            "status": verdict.status,
            "headline": verdict.headline,
            "reasons": list(verdict.reasons),
            "exit_code": verdict.exit_code,
        },
        "baseline": run(base),
        "candidate": run(cand),
        **{k: v for k, v in dataclasses.asdict(comp).items() if k != "settings"},
        "noninferiority": comp.noninferiority.to_json(),  # with its questions needed, searched on use
    }
