"""The gate seam: statistics (`stats`, no I/O) -> policy (`policy`) -> reports (`report`, render only);
`run` reads two stored runs and ties them together. May import `store` and `eval.results`; never torch.
"""
