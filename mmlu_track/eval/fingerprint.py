"""Weights fingerprints: the sha256 of a weights file (a GGUF) or of a model folder, which a run
records and resumes and gates by. No torch.

Each file's hash is cached in `cache_dir/file_sha256.json` under its resolved path, with its size,
mtime, ctime and inode: a 15 GB folder, or the GGUF every run of it opens, is read once, not every
run. Any write to a file, or another file put in its place, changes its ctime (which no tool sets
back) or its inode, and it is read again. A cache that cannot be read or written only costs time.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def file_sha256(path: Path) -> str:
    """The hex sha256 of one file's bytes, read afresh (no cache); OSError if it cannot be read."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def cached_sha256(paths: Sequence[Path], cache_dir: Path) -> list[str]:
    """Each file's sha256, from the cache where its stamp is unchanged."""
    cache_file = cache_dir / "file_sha256.json"
    try:
        cache: dict[str, list[Any]] = json.loads(cache_file.read_text())
    except (OSError, ValueError):
        cache = {}
    if not isinstance(cache, dict):  # a damaged cache is only a cache
        cache = {}
    hashes, changed = [], False
    for path in paths:
        st = path.stat()
        key, stamp = str(path.resolve()), [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
        hit = cache.get(key)
        if not isinstance(hit, list) or hit[:-1] != stamp:
            cache[key], changed = [*stamp, file_sha256(path)], True
        hashes.append(str(cache[key][-1]))
    if changed:
        with contextlib.suppress(OSError):
            cache_dir.mkdir(parents=True, exist_ok=True)
            tmp = cache_file.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(cache))
            os.replace(tmp, cache_file)
    return hashes


def folder_sha256(folder: Path, cache_dir: Path) -> str:
    """sha256 over a model folder's files (names and contents; hidden ones aside), so other
    weights in the same folder are another model."""
    files = sorted(
        p for p in folder.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)
    )  # fmt: skip
    h = hashlib.sha256()
    for path, sha in zip(files, cached_sha256(files, cache_dir), strict=True):
        h.update(f"{path.relative_to(folder).as_posix()}\0{sha}\n".encode())
    return h.hexdigest()
