"""The floor every seam stands on: the typed records that cross seams (subjects and answer
letters, question results and scores, the run record and its parts, a stored run as read back).

Imports only the other floor modules (`config`, `credentials`, `paired`); no torch, SQL or MLflow.
"""
