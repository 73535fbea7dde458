"""`python -m mmlu_track.compare`: the release gate's command line (see `cli.compare_main`)."""

from mmlu_track.commands.cli import compare_main

if __name__ == "__main__":
    compare_main()
