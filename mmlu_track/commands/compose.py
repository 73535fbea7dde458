"""Hydra's side of the commands: the settings' defaults registered as config nodes, a composed
DictConfig as plain values, and OmegaConf's errors as one line naming the full key.

Only `commands/` imports this module (and hydra): below it, settings are typed dataclasses.
"""

from __future__ import annotations

import re
from typing import Any

# A prompt's text (chat.system), recorded with every run, is written in the command or a config file,
# never taken from the environment (a variable's value may be a secret, another machine's another prompt).
_FROM_ENVIRONMENT = re.compile(r"\$\{\s*(oc\.env|env)\s*:")


def plain(cfg: Any) -> dict[str, Any]:
    """A composed DictConfig as plain, resolved Python values (raises on a missing `???`, and on a
    prompt's text taken from the environment: `ConfigError`)."""
    from omegaconf import OmegaConf

    from mmlu_track.settings.typed import ConfigError

    chat = OmegaConf.to_container(cfg, resolve=False).get("chat")  # type: ignore[union-attr]
    system = chat.get("system") if isinstance(chat, dict) else None
    if isinstance(system, str) and _FROM_ENVIRONMENT.search(system):
        raise ConfigError(
            "chat.system takes its text from the environment (${oc.env:...}): write it in the command or "
            "a config file (it is part of the prompt every run records)"
        )
    raw = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    if not isinstance(raw, dict):
        raise TypeError(f"a composed config is a mapping, not {type(raw).__name__} (a bug)")
    return {str(k): v for k, v in raw.items()}


def _node(cls: type[Any]) -> dict[str, Any]:
    """A settings dataclass as a config node: every field with its default, `???` where one is
    required, a nested node for a nested dataclass, `${oc.env:VAR,default}` where the field's
    metadata names an environment variable."""
    import dataclasses
    import types
    import typing

    from mmlu_track.settings.subjects import SUBJECTS

    node: dict[str, Any] = {}
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        hint = hints[field.name]
        inner = (
            [a for a in typing.get_args(hint) if a is not type(None)]
            if isinstance(hint, types.UnionType)
            else [hint]
        )
        if len(inner) == 1 and dataclasses.is_dataclass(inner[0]):
            node[field.name] = _node(inner[0])  # type: ignore[arg-type]
        elif field.default is dataclasses.MISSING:
            node[field.name] = "???"
        elif field.default == SUBJECTS:
            node[field.name] = "all"
        elif env := field.metadata.get("env"):
            node[field.name] = f'${{oc.env:{env},"{field.default}"}}'
        else:
            node[field.name] = field.default
    return node


REQUIRED = "Missing mandatory value: "  # OmegaConf's words for a `???`


def _required(key: str) -> str:
    # A group option's `???` merged over a default keeps the default: an option that needs a value
    # the defaults lack (tracking=server's URL) says `${required:KEY}`, and an override replaces it.
    raise ValueError(f"{REQUIRED}{key}")


def register_defaults() -> None:
    """The defaults live once, in `config.py`'s dataclasses: stored here as the nodes
    `eval_defaults` and `compare_defaults` that `eval.yaml` and `compare.yaml` start from, so the
    YAML files state only what a choice changes."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    from mmlu_track.settings.config import CompareConfig, EvalConfig, NoiseConfig

    store = ConfigStore.instance()
    store.store(name="eval_defaults", node=_node(EvalConfig))
    store.store(name="compare_defaults", node=_node(CompareConfig))
    store.store(name="noise_defaults", node=_node(NoiseConfig))
    if not OmegaConf.has_resolver("required"):
        OmegaConf.register_new_resolver("required", _required)


def config_message(err: Exception) -> str:
    """One line for a configuration error, naming the full key (OmegaConf's first line may not)."""
    from omegaconf.errors import InterpolationResolutionError, MissingMandatoryValue

    if isinstance(err, MissingMandatoryValue) and getattr(err, "full_key", None):
        return f"Missing mandatory value: {err.full_key}"
    line = str(err).splitlines()[0]
    if REQUIRED in line:  # from `${required:KEY}`
        return line[line.find(REQUIRED) :]
    key = getattr(err, "full_key", None)  # an interpolation's own line names no key
    return f"{key}: {line}" if isinstance(err, InterpolationResolutionError) and key else line


def as_typed(overrides: Any) -> list[str]:
    """A Hydra overrides list (`HydraConfig.get().overrides.task`) as the strings typed: read
    unresolved, since an override's value may hold `${...}`, which iterating the node would try to
    interpolate (a traceback for `model.name=${oops}`, before any check could say it in one line)."""
    from omegaconf import OmegaConf

    return [str(o) for o in OmegaConf.to_container(overrides, resolve=False)]  # type: ignore[union-attr]


def sub_overrides(overrides: list[str], group: str) -> list[str]:
    """`group.key=value` overrides as `key=value`."""
    prefix = f"{group}."
    return [o.lstrip("+~")[len(prefix) :] for o in overrides if o.lstrip("+~").startswith(prefix)]


def raw_refs(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Run references as typed: Hydra reads `baseline=8809` as an int and `1e5` as a float."""
    for key in ("baseline", "candidate"):
        if key not in raw:
            continue
        if raw.get(key) is None or isinstance(raw[key], str):
            continue
        for override in overrides:
            name, sep, value = override.partition("=")
            if sep and name.lstrip("+~") == key:
                raw[key] = value.strip().strip("'\"")
    return raw
