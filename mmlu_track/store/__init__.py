"""The store seam: typed run records -> the SQL store and MLflow (the only modules that talk to them).

May import the floor (`records`, `config`, `credentials`, `resources`); never `eval`, `gate` or
`pipeline`. Readers above get `records.stored.StoredRun`, never an ORM row.
"""
