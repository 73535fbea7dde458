"""The orchestrator, above eval and store: plan -> units -> score -> commit -> finalize.

May import the floor (`records`, `config`, ...), `eval` and `store`; never `gate` (the sequential
gate is handed in as a `Looks`) nor the entry points.
"""
