"""`python -m mmlu_track.noise`: the evaluation's own noise (see `noise_floor` and `cli.noise_main`)."""

from mmlu_track.cli import noise_main

if __name__ == "__main__":
    noise_main()
