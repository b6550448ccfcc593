"""Chapter 8's network without skips under two widths of PyTorch's CPU kernels, on one machine.

Chapter 8 trains the 24-layer network without binding skips at n = 64 for 2,000 steps (the command
of ``results/cpu/run_resnet_ablation.sh`` with ``--no-skip``) and finds that seed 0 ends far apart
on an AMD EPYC and on an Intel Xeon. This script asks whether PyTorch's own CPU kernels explain it.
For each seed it runs the command twice on the machine at hand, in fresh interpreters: with the
kernels PyTorch picks for the processor (``native``; AVX-512 on the Intel Xeon that made the
committed file) and with ``ATEN_CPU_CAPABILITY=avx2``; and it hashes the network's initial weights
under those two and under ``ATEN_CPU_CAPABILITY=default`` (the generic kernels, whose normal
numbers come from a scalar routine). If the AVX2 and the AVX-512 kernels draw the same weights and
end at the same accuracy, neither the initial draw nor the width of PyTorch's vector kernels is
what separates two processors that run them; what remains is code that picks its path by processor
outside PyTorch's kernel switch, such as the matrix-product library. For seed 0 it also sets the
first three losses beside those of the chapter's committed run, made on a 2-core AMD EPYC.

Run from the repository root (two runs at a time, one thread each)::

    python results/ch08_kernels_seeds.py [--seeds 0 1 2]
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ch08_seeds import BUDGET_ARGS, VARIANTS  # noqa: E402
from runinfo import provenance, script_parser, write_result  # noqa: E402

CAPABILITIES = {"native": None, "avx2": "avx2", "default": "default"}
INIT = """
import hashlib, sys
import torch
from seqbook.utils import seed_everything
from seqbook.vsa_train import build_parser, fashion_classifier
args = build_parser().parse_args(sys.argv[1:])  # the run's own flags
seed_everything(args.seed)  # as python -m seqbook.vsa_train does, then the same model
model = fashion_classifier(args)
h = hashlib.sha256()
for p in model.state_dict().values():
    h.update(p.detach().contiguous().numpy().tobytes())
print(torch.backends.cpu.get_cpu_capability(), h.hexdigest()[:16])
"""


def env_for(capability: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
    if capability:
        env["ATEN_CPU_CAPABILITY"] = capability
    return env


def initial_hash(seed: int, capability: str | None) -> tuple[str, str]:
    """(the capability PyTorch dispatched at, a hash of the network's initial weights)."""
    flags = [*BUDGET_ARGS, *VARIANTS["no skips"], "--seed", str(seed)]
    out = subprocess.run([sys.executable, "-c", INIT, *flags], capture_output=True, text=True,
                         check=True, env=env_for(capability), cwd=ROOT).stdout.split()
    return out[0], out[1]


def train(seed: int, capability: str | None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.json"
        subprocess.run([sys.executable, "-m", "seqbook.vsa_train", *BUDGET_ARGS, *VARIANTS["no skips"],
                        "--seed", str(seed), "--out", str(path)],
                       check=True, env=env_for(capability), cwd=ROOT)
        r = json.loads(path.read_text())
    losses = hashlib.sha256(json.dumps(r["step_loss"]).encode()).hexdigest()[:16]
    return dict(test_accuracy=r["test_accuracy"], final_train_loss=r["final_train_loss"],
                test_loss=r["test_loss"], step_loss_sha256=losses, step_loss_first3=r["step_loss"][:3],
                seconds=r["seconds"])


def main(argv=None) -> None:
    args = script_parser(__file__, __doc__).parse_args(argv)
    runs = []
    for seed in args.seeds:
        hashes = {name: initial_hash(seed, cap) for name, cap in CAPABILITIES.items()}
        runs.append(dict(seed=seed, dispatched={k: v[0] for k, v in hashes.items()},
                         initial_weights={k: v[1] for k, v in hashes.items()}))
    jobs = [(r, name) for r in runs for name in ("native", "avx2")]
    with ThreadPoolExecutor(2) as pool:
        done = list(pool.map(lambda job: train(job[0]["seed"], CAPABILITIES[job[1]]), jobs))
    for (r, name), trained in zip(jobs, done, strict=True):
        r[name] = trained
        print(f"seed {r['seed']} {name} ({r['dispatched'][name]}): {trained['test_accuracy']:.4f}",
              flush=True)
    # the chapter's committed seed-0 run (a 2-core AMD EPYC): the same first loss, if the two
    # processors start from the same weights on the same first batch
    epyc = json.loads((ROOT / "results/cpu/fhrr_resnet_noskip_n64_seed0.json").read_text())
    epyc_first3 = epyc["step_loss"][:3]
    seed0 = next(r for r in runs if r["seed"] == 0)
    same_init = all(r["initial_weights"]["native"] == r["initial_weights"]["avx2"] for r in runs)
    same_run = all(r["native"][k] == r["avx2"][k] for r in runs
                   for k in ("test_accuracy", "final_train_loss", "test_loss", "step_loss_sha256"))
    result = dict(
        **provenance(),
        recipe="python -m seqbook.vsa_train " + " ".join([*BUDGET_ARGS, *VARIANTS["no skips"]]),
        epyc_seed0=dict(source="results/cpu/fhrr_resnet_noskip_n64_seed0.json",
                        device_name=epyc["device_name"], step_loss_first3=epyc_first3),
        runs=runs,
        claims={
            "seed 0: the first step's loss equals the AMD EPYC's committed run's, bit for bit (the same "
            "initial weights and batch), and the second differs": seed0["native"]["step_loss_first3"][0]
            == epyc_first3[0] and seed0["native"]["step_loss_first3"][1] != epyc_first3[1],
            "the native and the AVX2 kernels draw the same initial weights at every seed": same_init,
            "the generic kernels draw other initial weights at every seed": all(
                r["initial_weights"]["default"] != r["initial_weights"]["avx2"] for r in runs),
            "the native and the AVX2 kernels give the same run (accuracy, losses, every step's "
            "loss) at every seed": same_run,
        },
    )
    write_result(args.out, result)


if __name__ == "__main__":
    main()
