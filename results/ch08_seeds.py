"""Chapter 8's trained results over several seeds: the page's short runs and figure 3 at n = 64.

Two sets of runs, each with exactly the recipe the chapter uses, one CPU thread:

* ``page``: the chapter's own cells at their CPU settings (cell 0319b9ed: n = 64, 120 steps of batch 128,
  held-out accuracy on 500 test images every 20 steps; molecules at n = 64, 300 steps of batch 64).
  The three 24-layer residual networks (binding skips with ``out_scale`` 0.25, no skips, binding
  skips with ``out_scale`` 1), the self- and cross-attention classifiers, and the two attention
  classifiers on the solubility molecules, each built after ``torch.manual_seed(seed)`` and
  trained with ``train_vsa(..., seed=seed)``; the molecule encoder is drawn after
  ``torch.manual_seed(seed)`` too. The chapter runs seed 0.
* ``budget``: figure 3 at the authors' budget, ``python -m seqbook.vsa_train --model resnet --dim 64
  --steps 2000 --batch 128 --device cpu --threads 1 --eval-every 100 --seed S`` with and without
  ``--no-skip`` and ``--out-scale 1`` (the command of ``results/cpu/run_resnet_ablation.sh``, whose
  seed-0 files the chapter reads), called through ``seqbook.vsa_train.main``.
* ``kernel``: the no-skip n = 64 run of seed 0 once more in a subprocess with
  ``ATEN_CPU_CAPABILITY=default`` (PyTorch's plain, non-vectorised CPU kernels): the same machine,
  the same command; the rounding of the sums differs, and so does that of the initial draw
  (PyTorch draws normal numbers with a scalar routine under its generic kernels and a vectorised
  one under its AVX2 and AVX-512 kernels, which draw the same numbers:
  ``results/ch08_kernels_seeds.py``).

For seed 0 of the ``budget`` runs the script reads the chapter's committed files
``results/cpu/fhrr_resnet*_n64_seed0.json`` (the same command, made on the same kind of machine, a
2-core AMD EPYC; a rerun here of the first of them gave the same test accuracy, 0.8145) instead of
training again. The budget runs go in order of importance (first the no-skip network with
``out_scale`` 0.25, whose result the chapter's text is about), and ``--resume`` keeps the runs
already in the JSON, so the script can be stopped and continued.

Run from the repository root::

    python results/ch08_seeds.py [--seeds 0 1 2] [--page-seeds 0 1 2] [--resume]

It writes ``results/ch08_seeds.json`` after every run, so an interrupted run keeps what it did.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runinfo import provenance, write_result  # noqa: E402

from seqbook import vsa_train  # noqa: E402
from seqbook.data import ATOM_FEATURES, BOND_FEATURES, load_fashion_mnist, load_solubility  # noqa: E402
from seqbook.losses import macro_auroc  # noqa: E402
from seqbook.molecules import MoleculeEncoder  # noqa: E402
from seqbook.train import predict_similarities, train_vsa  # noqa: E402
from seqbook.utils import small_model_threads  # noqa: E402
from seqbook.vsa import bundle, similarity  # noqa: E402
from seqbook.vsa_models import PAPER_ACCURACY, VSAAttentionClassifier, build_classifier  # noqa: E402

OUT = ROOT / "results" / "ch08_seeds.json"
# chapter 8, cell 0319b9ed, CPU values
PAGE = dict(
    DIM=64, BATCH=128, RES_BLOCKS=12, RES_STEPS=120, ATT_STEPS=120, EVAL_EVERY=20, MOL_DIM=64, MOL_STEPS=300
)
RESNETS = [
    ("binding skips", True, 0.25),
    ("no skips", False, 0.25),
    ("binding skips, out_scale 1", True, 1.0),
]
VARIANTS = {  # figure 3 at the authors' budget: name -> vsa_train flags
    "binding skips": [],
    "binding skips, out_scale 1": ["--out-scale", "1"],
    "no skips": ["--no-skip"],
    "no skips, out_scale 1": ["--no-skip", "--out-scale", "1"],
}
BUDGET_ARGS = [
    "--model",
    "resnet",
    "--dim",
    "64",
    "--steps",
    "2000",
    "--batch",
    "128",
    "--device",
    "cpu",
    "--threads",
    "1",
    "--quiet",
    "--eval-every",
    "100",
]


def page_runs(seed: int, train_set, test_set, mol) -> dict:
    """The chapter's cells 09a73101, 738c17fb, b07e85a3, 00365e20, 3236ddf4 with ``seed`` for 0."""
    p, device = PAGE, torch.device("cpu")
    out = {}
    for name, skip, scale in RESNETS:
        torch.manual_seed(seed)
        model = build_classifier("resnet", p["DIM"], num_layers=p["RES_BLOCKS"], skip=skip, out_scale=scale)
        run = train_vsa(
            model,
            train_set,
            test_set,
            p["RES_STEPS"],
            p["BATCH"],
            device=device,
            seed=seed,
            eval_every=p["EVAL_EVERY"],
            eval_size=500,
            progress=False,
            desc=name,
        )
        out[name] = dict(
            test_accuracy=round(run.test_accuracy, 4), final_train_loss=round(run.history.final_loss, 4)
        )
        if name == "no skips":  # cell 738c17fb: the loss of the constant output bundle(class symbols)
            codes = model.codebook.codes.cpu()
            out["constant_loss"] = round(1 - similarity(bundle(codes), codes).mean().item(), 4)
    for kind in ["self", "cross"]:
        torch.manual_seed(seed)
        model = build_classifier(kind, p["DIM"], num_queries=32)
        run = train_vsa(
            model,
            train_set,
            test_set,
            p["ATT_STEPS"],
            p["BATCH"],
            device=device,
            seed=seed,
            eval_every=p["EVAL_EVERY"],
            eval_size=500,
            progress=False,
            desc=kind,
        )
        out[kind] = dict(test_accuracy=round(run.test_accuracy, 4))
    mol_train, mol_test = mol
    torch.manual_seed(seed)
    encoder = MoleculeEncoder(len(ATOM_FEATURES), len(BOND_FEATURES), embed_dim=p["MOL_DIM"])
    longest = max(len(b) for b in mol_train.bonds + mol_test.bonds)
    mol_x, mol_mask = encoder.encode(mol_train, max_bonds=longest)
    mol_x_test, mol_mask_test = encoder.encode(mol_test, max_bonds=longest)
    for kind in ["self", "cross"]:
        torch.manual_seed(seed)
        model = VSAAttentionClassifier(
            p["MOL_DIM"], kind, num_queries=32, rows=longest, cols=None, num_classes=3
        )
        run = train_vsa(
            model,
            (mol_x, mol_mask, mol_train.labels),
            (mol_x_test, mol_mask_test, mol_test.labels),
            p["MOL_STEPS"],
            64,
            device=device,
            seed=seed,
            progress=False,
            desc=f"{kind} (molecules)",
        )
        auroc = macro_auroc(predict_similarities(model, mol_x_test, mol_mask_test), mol_test.labels)
        out[f"molecules {kind}"] = dict(
            test_accuracy=round(run.test_accuracy, 4), macro_auroc=round(auroc, 4)
        )
    return out


def budget_run(seed: int, name: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.json"
        vsa_train.main([*BUDGET_ARGS, *VARIANTS[name], "--seed", str(seed), "--out", str(path)])
        r = json.loads(path.read_text())
    return dict(
        test_accuracy=r["test_accuracy"],
        final_train_loss=r["final_train_loss"],
        held_out_step100=r["eval_accuracy"][0],
        eval_accuracy=r["eval_accuracy"],
        seconds=r["seconds"],
        device_name=r["device_name"],
    )


def kernel_run(seed: int) -> dict:
    """The no-skip n = 64 run under ``ATEN_CPU_CAPABILITY=default``, in a fresh interpreter."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.json"
        env = {**os.environ, "ATEN_CPU_CAPABILITY": "default"}
        subprocess.run(
            [
                sys.executable,
                "-m",
                "seqbook.vsa_train",
                *BUDGET_ARGS,
                *VARIANTS["no skips"],
                "--seed",
                str(seed),
                "--out",
                str(path),
            ],
            check=True,
            env=env,
            cwd=ROOT,
        )
        r = json.loads(path.read_text())
    return dict(
        test_accuracy=r["test_accuracy"],
        final_train_loss=r["final_train_loss"],
        eval_accuracy=r["eval_accuracy"],
        step_loss_first5=r["step_loss"][:5],
        seconds=r["seconds"],
    )


def summarise(result: dict) -> None:
    runs = result["runs"]
    page = [r for r in runs if r["set"] == "page"]
    budget = {}
    for r in runs:
        if r["set"] == "budget":
            budget.setdefault(r["variant"], {})[r["seed"]] = r
    summary, claims = {}, {}
    if page:
        for key in [
            "binding skips",
            "no skips",
            "binding skips, out_scale 1",
            "self",
            "cross",
            "molecules self",
            "molecules cross",
        ]:
            acc = [r["page"][key]["test_accuracy"] for r in page]
            summary[f"page {key}"] = dict(min=min(acc), max=max(acc), mean=round(statistics.mean(acc), 4))
        skip = [r["page"]["binding skips"]["test_accuracy"] for r in page]
        nos = [r["page"]["no skips"]["test_accuracy"] for r in page]
        sc1 = [r["page"]["binding skips, out_scale 1"]["test_accuracy"] for r in page]
        logreg = result["logreg"]
        claims.update(
            {
                "120 steps: binding skips above 60% at every seed": min(skip) > 0.6,
                "120 steps: no skips below 25% (chance level) at every seed": max(nos) < 0.25,
                "120 steps: out_scale 1 more than 20 points below out_scale 0.25 at every seed": all(
                    b < a - 0.2 for a, b in zip(skip, sc1, strict=True)
                ),
                "120 steps: the no-skip loss ends within 0.05 of the constant output's at every seed": all(
                    abs(r["page"]["no skips"]["final_train_loss"] - r["page"]["constant_loss"]) < 0.05
                    for r in page
                ),
                "120 steps: self-attention above 70%, cross above 60%, self above cross at every seed": all(
                    r["page"]["self"]["test_accuracy"] > 0.7
                    and r["page"]["cross"]["test_accuracy"] > 0.6
                    and r["page"]["self"]["test_accuracy"] > r["page"]["cross"]["test_accuracy"]
                    for r in page
                ),
                "120 steps: both attention models below the paper at every seed": all(
                    r["page"][k]["test_accuracy"] < PAPER_ACCURACY[k] for r in page for k in ["self", "cross"]
                ),
                "molecules: both above the most common class + 25 points at every seed": all(
                    r["page"][f"molecules {k}"]["test_accuracy"] > logreg["majority"] + 0.25
                    for r in page
                    for k in ["self", "cross"]
                ),
                "molecules: accuracy above the fingerprint regression's - 2 points at every seed": all(
                    r["page"][f"molecules {k}"]["test_accuracy"] > logreg["accuracy"] - 0.02
                    for r in page
                    for k in ["self", "cross"]
                ),
                "molecules: macro AUROC above the regression's - 0.03 at every seed": all(
                    r["page"][f"molecules {k}"]["macro_auroc"] > logreg["macro_auroc"] - 0.03
                    for r in page
                    for k in ["self", "cross"]
                ),
            }
        )
    for name, by_seed in budget.items():
        acc = [by_seed[s]["test_accuracy"] for s in sorted(by_seed)]
        summary[f"n=64 2000 steps {name}"] = dict(
            seeds=sorted(by_seed), min=min(acc), max=max(acc), mean=round(statistics.mean(acc), 4)
        )
    acc = {name: {s: r["test_accuracy"] for s, r in by_seed.items()} for name, by_seed in budget.items()}
    early = {name: {s: r["held_out_step100"] for s, r in by_seed.items()} for name, by_seed in budget.items()}
    sk, sk1, ns, ns1 = "binding skips", "binding skips, out_scale 1", "no skips", "no skips, out_scale 1"
    if len(acc.get(ns, {})) >= 3:
        claims["n=64, 2000 steps: no skips, out_scale 0.25 spans more than 20 points over the seeds"] = (
            max(acc[ns].values()) - min(acc[ns].values()) > 0.2
        )
    pair = sorted(set(acc.get(sk, {})) & set(acc.get(sk1, {})))
    if len(pair) >= 3:
        claims["n=64, 2000 steps: with skips the two scales end within 3 points at every seed"] = all(
            abs(acc[sk][s] - acc[sk1][s]) < 0.03 for s in pair
        )
        claims["n=64, 2000 steps: with skips out_scale 1 is 5+ points behind at step 100 at every seed"] = (
            all(early[sk1][s] < early[sk][s] - 0.05 for s in pair)
        )
    if all(len(acc.get(v, {})) >= 3 for v in (sk, sk1, ns)):
        skip_runs = [a for v in (sk, sk1) for a in acc[v].values()]
        noskip_runs = [a for v in (ns, ns1) for a in acc.get(v, {}).values()]
        claims["n=64, 2000 steps: every skip run more than 15 points above every no-skip run"] = (
            min(skip_runs) > max(noskip_runs) + 0.15
        )
    result["summary"], result["claims"] = summary, claims


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="budget runs")
    parser.add_argument("--resume", action="store_true", help="keep the runs already in the JSON")
    parser.add_argument("--page-seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--no-kernel", action="store_true", help="skip the ATEN_CPU_CAPABILITY=default run")
    args = parser.parse_args(argv)
    small_model_threads("cpu", 1)

    # chapter 8, cell e930bc3d: the two molecule baselines (deterministic)
    import numpy as np
    from rdkit import Chem
    from rdkit.Chem import rdFingerprintGenerator
    from sklearn.linear_model import LogisticRegression

    mol = load_solubility("train"), load_solubility("test")
    morgan = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=2048)
    fps = [np.stack([morgan.GetFingerprintAsNumPy(Chem.MolFromSmiles(s)) for s in m.smiles]) for m in mol]
    logreg = LogisticRegression(max_iter=2000).fit(fps[0], mol[0].labels.numpy())
    proba = torch.tensor(logreg.predict_proba(fps[1]))
    baselines = dict(
        majority=round((mol[1].labels == torch.bincount(mol[0].labels).argmax()).double().mean().item(), 4),
        accuracy=round((proba.argmax(1) == mol[1].labels).double().mean().item(), 4),
        macro_auroc=round(macro_auroc(proba, mol[1].labels), 4),
    )
    result = dict(
        **provenance(),
        recipe=dict(page=PAGE, budget="python -m seqbook.vsa_train " + " ".join(BUDGET_ARGS)),
        variants={k: " ".join(v) for k, v in VARIANTS.items()},
        other_cpu=dict(
            note="the chapter's committed seed-0 runs (results/cpu/*_seed0.json) come from a 2-core AMD "
            "EPYC; the review of 2026-11-28 ran the no-skip n = 64 command with --seed 0 on a "
            "2-core Intel Xeon, the same torch 2.13.0+cpu, and got this test accuracy "
            "(shared/reviews/chapters-7-8-9.md, N2)",
            intel_xeon_noskip_n64_seed0=0.433,
        ),
        logreg=baselines,
        runs=[],
    )

    def save():
        summarise(result)
        write_result(OUT, result, report=False)  # after every run; the claims once, at the end

    if args.resume and OUT.exists():
        result["runs"] = json.loads(OUT.read_text())["runs"]
    done = {(r["set"], r["seed"], r.get("variant")) for r in result["runs"]}
    train_set, test_set = load_fashion_mnist("train"), load_fashion_mnist("test")
    for seed in args.page_seeds:
        if ("page", seed, None) in done:
            continue
        result["runs"].append(dict(set="page", seed=seed, page=page_runs(seed, train_set, test_set, mol)))
        print("page seed", seed, json.dumps(result["runs"][-1]["page"]), flush=True)
        save()
    tags = {
        "binding skips": "",
        "binding skips, out_scale 1": "_scale1",
        "no skips": "_noskip",
        "no skips, out_scale 1": "_noskip_scale1",
    }
    order = [("no skips", seed) for seed in args.seeds]
    order += [(name, seed) for seed in args.seeds for name in ["binding skips", "binding skips, out_scale 1"]]
    order += [("no skips, out_scale 1", seed) for seed in args.seeds]
    for name, seed in order:
        if ("budget", seed, name) in done:
            continue
        if seed == 0:  # the chapter's committed run of the same command
            path = f"results/cpu/fhrr_resnet{tags[name]}_n64_seed0.json"
            c = json.loads((ROOT / path).read_text())
            r = dict(
                test_accuracy=c["test_accuracy"],
                final_train_loss=c["final_train_loss"],
                held_out_step100=c["eval_accuracy"][0],
                eval_accuracy=c["eval_accuracy"],
                seconds=c["seconds"],
                device_name=c["device_name"],
                source=path,
            )
        else:
            r = budget_run(seed, name)
        result["runs"].append(dict(set="budget", seed=seed, variant=name, **r))
        print(f"budget seed {seed} {name}: {r['test_accuracy']:.4f} ({r['seconds']:.0f} s)", flush=True)
        save()
    if not args.no_kernel and ("kernel", 0, "no skips") not in done:
        r = kernel_run(0)
        result["runs"].append(
            dict(set="kernel", seed=0, variant="no skips", aten_cpu_capability="default", **r)
        )
        print(f"kernel=default seed 0 no skips: {r['test_accuracy']:.4f}", flush=True)
        save()
    summarise(result)  # also when every run was already in the JSON
    write_result(OUT, result)


if __name__ == "__main__":
    main()
