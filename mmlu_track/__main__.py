"""`python -m mmlu_track`: the evaluation's Hydra entry point (see `cli.main`)."""

from mmlu_track.commands.cli import main

if __name__ == "__main__":
    main()
