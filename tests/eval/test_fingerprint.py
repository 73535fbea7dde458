"""eval/fingerprint.py: a weights file's sha256 read once and cached under its stamp, read again
whenever the file changes or another is put in its place; a folder's over its files' names and
contents, hidden files aside."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from mmlu_track.eval.fingerprint import cached_sha256, file_sha256, folder_sha256


def test_a_files_hash_is_cached_until_the_file_changes(tmp_path: Path) -> None:
    weights, cache = tmp_path / "model.gguf", tmp_path / "cache"
    weights.write_bytes(b"weights v1")
    assert file_sha256(weights) == hashlib.sha256(b"weights v1").hexdigest()
    assert cached_sha256([weights], cache) == [hashlib.sha256(b"weights v1").hexdigest()]
    stamp = json.loads((cache / "file_sha256.json").read_text())[str(weights.resolve())]
    assert stamp[-1] == hashlib.sha256(b"weights v1").hexdigest()
    # A hit is read from the cache, not the file: a doctored entry with the file's stamp is believed.
    (cache / "file_sha256.json").write_text(json.dumps({str(weights.resolve()): [*stamp[:-1], "cached"]}))
    assert cached_sha256([weights], cache) == ["cached"]
    # Rewritten in place, even with its size and mtime put back: its ctime moved, it is read again.
    st = weights.stat()
    weights.write_bytes(b"weights v2")
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert cached_sha256([weights], cache) == [hashlib.sha256(b"weights v2").hexdigest()]
    (cache / "file_sha256.json").write_text("not json")  # a damaged cache only costs a read
    assert cached_sha256([weights], cache) == [hashlib.sha256(b"weights v2").hexdigest()]


def test_a_folders_hash_covers_names_and_contents_but_not_hidden_files(tmp_path: Path) -> None:
    model, cache = tmp_path / "model", tmp_path / "cache"
    (model / "sub").mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (model / "sub" / "weights.bin").write_bytes(b"\x00\x01")
    first = folder_sha256(model, cache)
    (model / ".cache").mkdir()
    (model / ".cache" / "lock").write_text("x")
    (model / ".gitattributes").write_text("*.bin lfs")
    assert folder_sha256(model, cache) == first
    (model / "sub" / "weights.bin").rename(model / "sub" / "other.bin")
    assert folder_sha256(model, cache) != first  # the same bytes under another name: another model
    (model / "sub" / "other.bin").rename(model / "sub" / "weights.bin")
    assert folder_sha256(model, cache) == first
