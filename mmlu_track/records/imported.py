"""Where an imported run came from: `Imported`, the record a run read from another tool's output
carries beside its start (`RunStart.imported`), instead of the weights this process loaded.

An imported run was scored elsewhere (lm-evaluation-harness's `--log_samples` output): its
identity holds the sha256 of the files it was read from, so a native evaluation never resumes or
takes it, and importing the same files again finds it. Its prompts are either one of this tool's
formulations, byte for byte (it compares with native runs of that protocol), or the other tool's
own, keyed by the hash of every context (`lm-eval:<hash>`: it compares with imports of identical
prompts only).
"""

from __future__ import annotations

from dataclasses import dataclass

from mmlu_track.records import codec

OWN_PROMPTS = "lm-eval"  # the formulation a run of lm-eval's own prompts is listed and compared under


@codec.closed
@dataclass(frozen=True)
class Imported:
    """An imported run's origin: the tool, its files and what it recorded of the run."""

    tool: str  # `lm-eval`
    results_file: str  # the results file, absolute
    sha256: str  # of the results file and each samples file, in task order
    prompts: str  # the formulation every context equals byte for byte, or `lm-eval:<hash of them>`
    model_args: dict[str, str]  # `--model_args` as lm-eval recorded them (pretrained, revision, dtype, …)
    versions: dict[str, str]  # lm-eval's version and git hash, transformers', the model's sha and dtype
    limit: float | None  # lm-eval's --limit (the first N docs of each task); None: every question
    date: str | None  # when lm-eval ran (UTC, ISO 8601)
    chat_template_sha: str | None  # the chat template lm-eval applied (None: raw prompts)
    fewshot_as_multiturn: bool
    system_instruction: str | None
    pinned: bool  # whether the weights are identified (a revision, or the model's sha)

    @property
    def own_prompts(self) -> bool:
        """Whether the prompts are lm-eval's own, not one of this tool's formulations."""
        return self.prompts.startswith(f"{OWN_PROMPTS}:")

    def summary(self) -> str:
        """One line: the tool, when it ran, its prompts and the file."""
        limit = f", --limit {self.limit:g}" if self.limit is not None else ""
        when = f" on {self.date[:10]}" if self.date else ""
        return f"imported from {self.tool}{when} ({self.prompts} prompts{limit}): {self.results_file}"
