"""The eval seam: config -> data -> prompts -> model scoring -> question results (torch lives here).

May import the floor (`records`, `config`, `credentials`, `paired`); never `store`, `gate` or the
`pipeline` that drives it.
"""
