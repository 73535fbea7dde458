"""Runs made by other tools, read as this tool's: lm-evaluation-harness's logged samples (`lm_eval`)."""
