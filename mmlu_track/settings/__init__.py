"""Every setting: its typed record and default, checks, parsers, identity, the subjects."""
