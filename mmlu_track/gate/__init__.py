"""The gate seam: statistics (`stats`, no I/O) -> policy (`policy`) -> reports (`report`, render only);
`run` reads two stored runs and ties them together. May import the floor and `store` (it reads
typed `StoredRun` records, never ORM rows); never `eval`, `pipeline` or torch.
"""
