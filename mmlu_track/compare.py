"""`python -m mmlu_track.compare`: the release gate's command line; everything is in `gate.py`.

A shim of its own, so that the statistics (`comparison.py`) never import the gate that uses them.
"""

from mmlu_track.gate import main

if __name__ == "__main__":
    main()
