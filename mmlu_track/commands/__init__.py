"""The commands: Hydra entry points, launchers, `runs`, the noise command."""
