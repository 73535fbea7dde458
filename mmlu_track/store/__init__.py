"""The store seam: a typed `RunRecord` -> the SQL store and MLflow (the only modules that talk to them).

May import `config`, `paired` and `eval.results` / `eval.subjects` (the results' types; no torch);
never `gate`, never `eval.pipeline`.
"""
