"""The eval seam: config -> data -> prompts -> model scoring -> results (torch lives here only).

May import `mmlu_track.config`, `paired`, and `store` (the pipeline hands each subject and the
finished `RunRecord` to the stores); never `gate`.
"""
