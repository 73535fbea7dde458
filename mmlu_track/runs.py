"""`python -m mmlu_track.runs`: list, show, sync and upgrade stored runs (see `commands.runs`)."""

from mmlu_track.commands.runs import cli

if __name__ == "__main__":
    cli()
