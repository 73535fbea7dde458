"""`python -m mmlu_track.noise`: the evaluation's own noise (see `commands.noise` and `cli.noise_main`)."""

from mmlu_track.commands.cli import noise_main

if __name__ == "__main__":
    noise_main()
