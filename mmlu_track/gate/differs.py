"""What differs between two runs a comparison pairs, in words a reviewer reads: the title of a
comparison (`title`), every setting and resolved fact that differs (`what_differs`, `baseline →
candidate`), and apart, the settings that do not change results but a noise check is about
(`neutral_differs`). Pure: the runs' records in, lines out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mmlu_track.settings.config import is_served, to_dict
from mmlu_track.settings.identity import SHOWN_NEUTRAL, is_result_neutral
from mmlu_track.settings.typed import flatten

if TYPE_CHECKING:
    from mmlu_track.records.run import ModelInfo, RunStart
    from mmlu_track.records.stored import StoredRun

NOTHING_DIFFERS = "nothing that changes results (a noise check)"
NEUTRAL = "not changing results"


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
