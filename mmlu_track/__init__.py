"""mmlu_track: MMLU evaluation, tracking and release gating."""
