"""Reports of a comparison, rendered only (no I/O beyond the PNG file asked for): console table,
Markdown (verdict first), JSON, PNG."""

from __future__ import annotations

import dataclasses
import html
import re
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from mmlu_track.config import is_served, to_dict
from mmlu_track.gate.stats import BOOTSTRAP_MIN_FLIPS, BOOTSTRAP_MIN_PER_SUBJECT, Comparison, Delta, pts
from mmlu_track.identity import SHOWN_NEUTRAL, is_result_neutral
from mmlu_track.typed import flatten

if TYPE_CHECKING:
    from mmlu_track.config import CompareConfig
    from mmlu_track.gate.policy import Verdict
    from mmlu_track.records.run import ModelInfo, RunStart
    from mmlu_track.records.stored import StoredRun

TITLE_CHARS = 90  # characters of a deltas.png title line: 8-inch figure, 10-point font
NOTHING_DIFFERS = "nothing that changes results (a noise check)"
NEUTRAL = "not changing results"
ICONS = {
    "pass": "✅ PASS",
    "regression": "❌ REGRESSION",
    "inconclusive": "⚠️ INCONCLUSIVE",
    "analysis": "📊 ANALYSIS",
}
GAP_ROWS = 6  # a few-shot gap shows this many biggest gains and biggest losses unfolded

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


def title(base: StoredRun, cand: StoredRun, mode: str) -> str:
    """The comparison in a line; for two runs of one model, what else differs (baseline → candidate)."""
    if mode == "fewshot_gap":
        return f"Few-shot gap of {cand.model_name}: k={cand.k} vs k={base.k}"
    differs = what_differs(base, cand) or [f"{d} ({NEUTRAL})" for d in neutral_differs(base, cand)]
    if cand.model_name == base.model_name and differs:
        more = f" (+{len(differs) - 2} more)" if len(differs) > 2 else ""
        return f"{cand.model_name}, baseline → candidate: {'; '.join(differs[:2])}{more}"
    return f"{cand.model_name} vs baseline {base.model_name}"


def _settings(start: RunStart) -> dict[str, object]:
    """The run's settings that can change its results (`identity.RESULT_NEUTRAL` left out)."""
    return {k: v for k, v in flatten(to_dict(start.config)).items() if not is_result_neutral(k)}


def what_differs(base: StoredRun, cand: StoredRun) -> list[str]:
    """What differs between two comparable runs beyond the protocol (which the gate requires equal),
    as `setting baseline → candidate`: every setting that differs, then what they resolved to (the
    weights, the dtype and device they ran in, the engine) and the libraries."""
    a, b = base.record, cand.record
    if a is None or b is None:
        return []
    ma, mb = a.start.model, b.start.model

    def weights(m: ModelInfo) -> str:
        return m.revision or (m.weights_sha256 or "?")[:12]

    def engine(m: ModelInfo) -> str:
        return "served" if is_served(m.source) else "in-process"

    def dtype(setting: object, ran: str) -> str:
        return ran if setting == ran else f"{setting} ({ran})"  # `auto (float32)`: said once

    sa, sb = _settings(a.start), _settings(b.start)
    pairs: list[tuple[str, object, object]] = [("model", ma.name, mb.name)]
    pairs += [(k, sa.get(k), sb.get(k)) for k in sorted(sa.keys() | sb.keys()) if k != "model.name"]
    pairs += [
        ("weights", weights(ma), weights(mb)),
        ("engine", engine(ma), engine(mb)),
        ("ran in", ma.dtype, mb.dtype),
        ("ran on", ma.device, mb.device),
        *((lib, a.start.versions.get(lib), b.start.versions.get(lib)) for lib in ("transformers", "torch")),
    ]
    if sa.get("dtype") != sb.get("dtype"):  # the setting with what it resolved to; no `ran in` line
        pairs = [(n, x, y) for n, x, y in pairs if n != "ran in"]
        resolved = {"dtype": (dtype(sa.get("dtype"), ma.dtype), dtype(sb.get("dtype"), mb.dtype))}
        pairs = [(n, *resolved.get(n, (x, y))) for n, x, y in pairs]
    return [f"{name} {x} → {y}" for name, x, y in pairs if x != y]


def neutral_differs(base: StoredRun, cand: StoredRun) -> list[str]:
    """The settings of `identity.SHOWN_NEUTRAL` that differ (`batch_size 64 → 8`): they do not
    change results, and a noise check is about them."""
    a, b = (flatten(to_dict(r.config)) for r in (base, cand))
    return [f"{k} {a.get(k)} → {b.get(k)}" for k in SHOWN_NEUTRAL if a.get(k) != b.get(k)]


def _differs_line(base: StoredRun, cand: StoredRun) -> str:
    text = "; ".join(map(md_text, what_differs(base, cand))) or NOTHING_DIFFERS
    if neutral := neutral_differs(base, cand):
        text += f"; {NEUTRAL}: {'; '.join(map(md_text, neutral))}"
    return f"What differs: {text}."


def _p(p: float | None) -> str:
    return "–" if p is None else f"{p:.3g}"


def _row(d: Delta, mark: str = "", *, subject: bool = False) -> str:
    """A table row; Δ in bold only where it is a real difference: a subject flagged or improved
    after correction, an overall or category row whose interval excludes 0."""
    real = d.flagged or d.improved if subject else d.ci_low > 0 or d.ci_high < 0
    delta = f"**{pts(d.delta)}**" if real else pts(d.delta)
    return (
        f"| {mark}{d.name} | {d.n} | {100 * d.baseline_acc:.2f} | {100 * d.candidate_acc:.2f} | "
        f"{delta} | [{pts(d.ci_low)}, {pts(d.ci_high)}] | {d.lost} / {d.gained} | "
        f"{_p(d.p_regression)} | {_p(d.p_regression_adj)} |"
    )


_HEADER = (
    "| | n | baseline % | candidate % | Δ pts | 95% CI | lost / gained | p (drop) | p adj. |\n"
    "|---|---:|---:|---:|---:|---|---:|---:|---:|"
)


def _first_line(verdict: Verdict, escape: Callable[[str], str] = str) -> str:
    code = "" if verdict.status == "analysis" else f" (exit {verdict.exit_code})"
    return f"{ICONS[verdict.status]}: {escape(verdict.headline)}{code}"


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


def _mlflow_links(base: StoredRun, cand: StoredRun, uri: str | None) -> list[str]:
    """Links from the report to the two runs in the MLflow UI (a tracking server only)."""
    if not (uri and uri.startswith(("http://", "https://"))):
        return []
    from mmlu_track.credentials import strip_userinfo

    uri = strip_userinfo(uri)  # a report is shared: its links never carry a password (a browser asks)
    # Percent-encoded: a `)`, `<` or space in the configured URI would end the link or start markup.
    base_url = quote(uri.rstrip("/"), safe=":/?#[]@!$&'*+,;=%~")
    links = [
        f"[{side} run]({base_url}/#/runs/{quote(run.mlflow_run_id, safe='')})"
        for side, run in (("baseline", base), ("candidate", cand))
        if run.mlflow_run_id
    ]
    return ["", "MLflow: " + " · ".join(links)] if links else []


def markdown(
    comp: Comparison,
    verdict: Verdict,
    base: StoredRun,
    cand: StoredRun,
    cfg: CompareConfig,
    *,
    sequential: dict[str, Any] | None = None,
) -> str:
    """Verdict first, then the overall rows, then subjects sorted by Δ (flagged marked), full table folded."""
    s = comp.settings
    gate_mode = cfg.mode == "gate"
    # Names (models, paths, ids, a policy's name) are the user's: escaped wherever they are shown.
    heading = f"## MMLU {'release gate' if gate_mode else 'few-shot gap'}: {_first_line(verdict, md_text)}"
    lines = [heading, ""]
    lines += [f"- {md_text(r)}" for r in verdict.reasons]
    policy = (
        f", policy {md_code(cfg.gate.name)} (α={s.alpha}, δ={100 * s.delta:.1f} pts, min effect "
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
        *_mlflow_links(base, cand, cfg.tracking.mlflow_uri),
        "",
        _HEADER,
        _row(comp.micro),
        _row(comp.macro),
        *(_row(c) for c in comp.categories),
        "",
        *_method_lines(comp, gate_mode, sequential),
    ]
    ordered = sorted(comp.subjects, key=lambda d: d.delta)
    flagged = [d for d in ordered if d.flagged]
    improved = [d for d in ordered if d.improved]
    lines += ["", f"### Subjects: {len(flagged)} flagged ⚠️, {len(improved)} improved ⬆️", ""]
    if gate_mode:  # flagged, then the subjects whose answers changed most: unchanged ones add nothing
        changed = [d for d in ordered if not d.flagged and d.lost + d.gained]
        changed.sort(key=lambda d: (-abs(d.delta), -(d.lost + d.gained)))
        shown = flagged + changed[: max(0, 10 - len(flagged))]
    else:
        shown = _gap_rows(ordered)
    if shown:
        lines += [_HEADER, *(_row(d, _mark(d), subject=True) for d in shown)]
    else:
        lines += ["No subject has a changed answer."]
    if improved and gate_mode:
        lines += ["", "Improved: " + ", ".join(f"{d.name} ({pts(d.delta)})" for d in improved)]
    lines += ["", f"<details><summary>All {len(ordered)} subjects, sorted by Δ</summary>", "", _HEADER]
    lines += [_row(d, _mark(d), subject=True) for d in ordered]
    lines += ["", "</details>", ""]
    return "\n".join(lines)


def _mark(d: Delta) -> str:
    return "⚠️ " if d.flagged else ("⬆️ " if d.improved else "")


def console(
    comp: Comparison,
    verdict: Verdict,
    base: StoredRun,
    cand: StoredRun,
    cfg: CompareConfig,
    *,
    sequential: dict[str, Any] | None = None,
) -> str:
    width = max(len(d.name) for d in (*comp.subjects, *comp.categories)) + 4
    head = f"{'':<{width}}{'n':>6} {'base %':>7} {'cand %':>7} {'Δ pts':>7}  {'95% CI':<17} {'p adj':>8}"

    def line(d: Delta, mark: str = "  ") -> str:
        ci = f"[{pts(d.ci_low)}, {pts(d.ci_high)}]"
        return (
            f"{mark}{d.name:<{width - 2}}{d.n:>6} {100 * d.baseline_acc:7.2f} {100 * d.candidate_acc:7.2f} "
            f"{pts(d.delta):>7}  {ci:<17} {_p(d.p_regression_adj):>8}"
        )

    rows = [_first_line(verdict), f"  {title(base, cand, cfg.mode)}", *(f"  - {r}" for r in verdict.reasons)]
    rows.append(head.replace("95% CI", f"{100 * (1 - comp.settings.alpha):.0f}% CI"))
    rows += [
        line(d, "! " if d.flagged else ("+ " if d.improved else "  "))
        for d in sorted(comp.subjects, key=lambda d: d.delta)
    ]
    rows += ["-" * len(head), *(line(c) for c in comp.categories), line(comp.macro), line(comp.micro)]
    rows += [r.replace("**", "") for r in _method_lines(comp, cfg.mode == "gate", sequential)]
    return "\n".join(rows)


def to_json(
    comp: Comparison, verdict: Verdict, base: StoredRun, cand: StoredRun, cfg: CompareConfig
) -> dict[str, Any]:
    def run(r: StoredRun) -> dict[str, Any]:
        return {
            "id": r.id, "model": r.model_name, "revision": r.model_revision, "k": r.k,
            "formulation": r.formulation, "scoring": r.scoring, "data_fingerprint": r.data_fingerprint,
            "acc_micro": r.acc_micro, "mlflow_run_id": r.mlflow_run_id,
        }  # fmt: skip

    return {
        "mode": cfg.mode,
        "policy": dataclasses.asdict(cfg.gate),
        "verdict": {
            "status": verdict.status,
            "headline": verdict.headline,
            "reasons": list(verdict.reasons),
            "exit_code": verdict.exit_code,
        },
        "baseline": run(base),
        "candidate": run(cand),
        **{k: v for k, v in dataclasses.asdict(comp).items() if k != "settings"},
    }


def wrapped(heading: str, width: int = TITLE_CHARS) -> str:
    """A plot title in lines that fit the figure's width (a long one was cut at its edge)."""
    return "\n".join(textwrap.fill(line, width) for line in heading.splitlines())


def deltas_png(comp: Comparison, path: Path, heading: str, margin_line: bool = True) -> Path:
    """Per-subject Δ with its score interval; flagged subjects red, improved green; −δ in a gate."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ordered = sorted(comp.subjects, key=lambda d: d.delta)
    colors = ["#C44E52" if d.flagged else "#55A868" if d.improved else "#4C72B0" for d in ordered]
    fig, ax = plt.subplots(figsize=(8, max(2.5, 0.22 * len(ordered) + 1.5)))
    y = range(len(ordered))
    ax.errorbar(
        [100 * d.delta for d in ordered], list(y), fmt="none",
        xerr=[[100 * (d.delta - d.ci_low) for d in ordered], [100 * (d.ci_high - d.delta) for d in ordered]],
        ecolor="#888888", capsize=2,
    )  # fmt: skip
    ax.scatter([100 * d.delta for d in ordered], list(y), c=colors, zorder=3, s=18)
    ax.set_yticks(list(y), [d.name for d in ordered], fontsize=7)
    ax.axvline(0, color="#333333", linewidth=0.8)
    ax.axvline(
        100 * comp.micro.delta, color="#DD8452", linestyle="--", label=f"micro Δ {pts(comp.micro.delta)}"
    )
    if margin_line:
        ax.axvline(-100 * comp.settings.delta, color="#C44E52", linestyle=":", label="−δ (margin)")
    lows, highs = [100 * d.ci_low for d in ordered], [100 * d.ci_high for d in ordered]
    pad = 0.05 * max(1.0, max(highs) - min(lows))
    ax.set_xlim(max(-100.0, min(lows) - pad), min(100.0, max(highs) + pad))
    level = f"{100 * (1 - comp.settings.alpha):.0f}%"
    ax.set_xlabel(f"Δ accuracy, points (candidate − baseline), {level} score intervals")
    ax.set_title(wrapped(heading), fontsize=10)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
