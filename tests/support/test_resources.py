"""support/resources.py: the package finds its Hydra configs and its Alembic migrations, inside an
installed wheel or beside the package in a checkout."""

from __future__ import annotations

from mmlu_track.support.resources import CONF_DIR, MIGRATIONS_DIR

from ..conftest import ROOT


def test_the_configs_and_migrations_are_found() -> None:
    assert (CONF_DIR / "eval.yaml").is_file()
    assert (CONF_DIR / "compare.yaml").is_file()
    assert (CONF_DIR / "model" / "tiny.yaml").is_file()
    assert (MIGRATIONS_DIR / "alembic.ini").is_file()
    assert sorted(MIGRATIONS_DIR.glob("versions/0001*.py"))
    # In this checkout (an editable install): the repository's own folders, not copies.
    assert (CONF_DIR.resolve(), MIGRATIONS_DIR.resolve()) == (ROOT / "conf", ROOT / "migrations")
