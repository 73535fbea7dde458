"""`python -m mmlu_track`: the Hydra entry point. The DictConfig stops here."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"


def plain(cfg: Any) -> dict[str, Any]:
    """A composed DictConfig as plain, resolved Python values (raises on a missing `???`)."""
    from omegaconf import OmegaConf

    raw = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    assert isinstance(raw, dict)
    return {str(k): v for k, v in raw.items()}


@contextmanager
def hydra_exit_codes(interrupted: str) -> Iterator[None]:
    """Hydra exits 1 on a bad override or config name, the code that means "regression": make it 2.
    Ctrl-C ends with one line (`interrupted`) and the shell's code for SIGINT, 130."""
    try:
        yield
    except SystemExit as exc:
        if exc.code == 1:
            raise SystemExit(2) from None
        raise
    except KeyboardInterrupt:
        print(f"mmlu_track: {interrupted}", file=sys.stderr)
        raise SystemExit(130) from None


def config_message(err: Exception) -> str:
    """One line for a configuration error, naming the full key (OmegaConf's first line may not)."""
    from omegaconf.errors import MissingMandatoryValue

    if isinstance(err, MissingMandatoryValue) and getattr(err, "full_key", None):
        return f"Missing mandatory value: {err.full_key}"
    return str(err).splitlines()[0]


def _fail(message: str) -> NoReturn:
    print(f"mmlu_track: error: {message}", file=sys.stderr)
    sys.exit(2)


def main() -> None:
    if not (CONF_DIR / "eval.yaml").is_file():
        _fail(f"config folder {CONF_DIR} is missing: install the project with `pip install -e .`")
    import hydra
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import DictConfig
    from omegaconf.errors import OmegaConfBaseException

    from mmlu_track.config import ConfigError, eval_config_from_dict
    from mmlu_track.data import DataError

    @hydra.main(config_path=str(CONF_DIR), config_name="eval", version_base="1.3")
    def app(cfg: DictConfig) -> float:
        try:
            eval_cfg = eval_config_from_dict(plain(cfg))
        except (ConfigError, OmegaConfBaseException) as err:
            _fail(config_message(err))
        from hydra.types import RunMode

        from mmlu_track.models import ModelError
        from mmlu_track.pipeline import TruncationError, run
        from mmlu_track.store_sql import StoreError

        hydra_cfg = HydraConfig.get()
        # Jobs of one sweep share a tag in MLflow and a column in the SQL store.
        sweep = str(Path(hydra_cfg.sweep.dir).resolve()) if hydra_cfg.mode == RunMode.MULTIRUN else None
        try:
            out = run(eval_cfg, Path(hydra_cfg.runtime.output_dir), sweep=sweep)
        except (DataError, ModelError, StoreError, TruncationError) as err:
            _fail(str(err))
        return out.scores.micro.acc

    with hydra_exit_codes("interrupted; run the same command to resume"):
        app()


if __name__ == "__main__":
    main()
