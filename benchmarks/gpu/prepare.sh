#!/usr/bin/env bash
# Run on a machine with network access, before the GPU run: packs what a bare GPU machine lacks.
#   .whl/       wheels for Python 3.12 (the GPU image's Python) of the packages its image lacks
#   .gpu_data/  the data files the tests, notebooks and FHRR runs read (no network there)
#   .gpu_src/   mamba_ssm's Python source: its Triton kernels for the kernels step (the package index
#               has no wheel, and its compiled selective scan cannot be built there)
# The three folders are ignored by git; with the working tree they must fit in 64 MiB (checked at the end).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
rm -rf .whl .gpu_data .gpu_src  # not .triton_cache: an earlier GPU run's autotuning, kept
mkdir -p .whl .gpu_data .gpu_src

platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
         manylinux1_x86_64 manylinux_2_24_x86_64 manylinux_2_31_x86_64 manylinux_2_34_x86_64 any; do
  platforms+=(--platform "$p")
done
# nbval and the Jupyter kernel it drives, the data loader's and the date chapters' needs, torch-hd.
# Each is named with --no-deps so that nothing the GPU image already has (torch, numpy, ...) is packed.
# Not debugpy (4 MB): ipykernel imports it only if present, and a kernel runs without it.
wheels=(nbval nbformat nbclient jupyter_client jupyter_core ipykernel ipython ipython_pygments_lexers
        traitlets pyzmq tornado comm matplotlib-inline nest_asyncio platformdirs decorator
        jedi parso pexpect ptyprocess prompt_toolkit wcwidth stack_data asttokens executing pure_eval
        fastjsonschema jsonschema jsonschema-specifications referencing rpds-py
        pooch faker tzdata torch-hd nest-asyncio2
        fla-core==0.6.0 einops)  # flash-linear-attention's kernels (pure Python and Triton)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${platforms[@]}" -d .whl "${wheels[@]}"

# mamba_ssm's source, without building it (the build would compile its CUDA extension)
tmp=$(mktemp -d)
MAMBA_SKIP_CUDA_BUILD=TRUE python3 -m pip download -q --no-deps --no-binary :all: --no-build-isolation \
  -d "$tmp" mamba-ssm==2.3.2.post1
tar -xzf "$tmp"/mamba_ssm-*.tar.gz -C "$tmp"
# only what its Mamba-2 Triton kernels and their PyTorch reference import (the tree and the packed
# folders must stay under 64 MiB together)
( cd "$tmp"/mamba_ssm-*/ && cp --parents LICENSE mamba_ssm/__init__.py mamba_ssm/modules/__init__.py \
    mamba_ssm/modules/ssd_minimal.py mamba_ssm/ops/__init__.py mamba_ssm/ops/triton/__init__.py \
    mamba_ssm/ops/triton/{k_activations,layernorm_gated,softplus,ssd_bmm,ssd_chunk_scan}.py \
    mamba_ssm/ops/triton/{ssd_chunk_state,ssd_combined,ssd_state_passing}.py \
    mamba_ssm/utils/__init__.py mamba_ssm/utils/determinism.py mamba_ssm/utils/torch.py "$root/.gpu_src/" )
rm -rf "$tmp"

# Data: The Time Machine and Fashion-MNIST, from wherever this machine has good copies
# (SEQBOOK_DATA, the user cache, the system's datasets folder, else a download).
python3 - <<'PY'
import shutil
from seqbook import data
from seqbook.fetch import fetch
for remote in [data.TIME_MACHINE, *data.FASHION_MNIST.values()]:
    shutil.copy(fetch(remote), f".gpu_data/{remote.fname}")
PY
du -sh .whl .gpu_data .gpu_src
# The device takes the tree and the packed folders together up to 64 MiB: say so before it refuses
python3 - <<'PY'
import pathlib, subprocess, sys
tracked = subprocess.run(["git", "ls-files", "-z"], capture_output=True, check=True).stdout
size = sum(pathlib.Path(p).stat().st_size for p in tracked.decode().split("\0") if p and pathlib.Path(p).is_file())
for folder in (".whl", ".gpu_data", ".gpu_src", ".triton_cache"):  # the last from an earlier GPU run
    size += sum(f.stat().st_size for f in pathlib.Path(folder).rglob("*") if f.is_file())
print(f"tree and packed folders: {size / 2**20:.1f} MiB of 64")
sys.exit(size > 64 * 2**20)
PY
