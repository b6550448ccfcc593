#!/usr/bin/env bash
# Run on a machine with network access, before the GPU run: packs what a bare GPU machine lacks.
#   .whl/       wheels for Python 3.12 (the GPU image's Python) of the packages its image lacks
#   .gpu_data/  the data files the tests, notebooks and FHRR runs read (no network there)
# Both folders are ignored by git; together with the working tree they stay well under 64 MiB.
set -euo pipefail
cd "$(dirname "$0")/../.."
rm -rf .whl .gpu_data
mkdir -p .whl .gpu_data

platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
         manylinux1_x86_64 manylinux_2_24_x86_64 manylinux_2_31_x86_64 manylinux_2_34_x86_64 any; do
  platforms+=(--platform "$p")
done
# nbval and the Jupyter kernel it drives, the data loader's and the date chapters' needs, torch-hd.
# Each is named with --no-deps so that nothing the GPU image already has (torch, numpy, ...) is packed.
wheels=(nbval nbformat nbclient jupyter_client jupyter_core ipykernel ipython ipython_pygments_lexers
        traitlets pyzmq tornado comm debugpy matplotlib-inline nest_asyncio platformdirs decorator
        jedi parso pexpect ptyprocess prompt_toolkit wcwidth stack_data asttokens executing pure_eval
        fastjsonschema jsonschema jsonschema-specifications referencing rpds-py
        pooch faker tzdata torch-hd nest-asyncio2)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${platforms[@]}" -d .whl "${wheels[@]}"

# Data: The Time Machine and Fashion-MNIST, from wherever this machine has good copies
# (SEQBOOK_DATA, the user cache, the system's datasets folder, else a download).
python3 - <<'PY'
import shutil
from seqbook import data
from seqbook.fetch import fetch
for remote in [data.TIME_MACHINE, *data.FASHION_MNIST.values()]:
    shutil.copy(fetch(remote), f".gpu_data/{remote.fname}")
PY
du -sh .whl .gpu_data
