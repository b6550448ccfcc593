"""Chapter 8's classifier without training: class prototypes of Fashion-MNIST in FHRR.

Exactly the chapter's cell ``ch8-prototypes``: each image's 28 rows become symbols through a fixed
``SymbolProjection(28, n)`` (its Gaussian projection and an untrained LayerNorm), each row symbol
is bound to a random position symbol and the 28 are bundled into one symbol per image (the bag of
rows: bundled without the positions); the prototype of a class is the bundle of its 6000
training images' symbols, and a test image goes to the most similar prototype. A run is a seed:
``torch.manual_seed(seed)`` before the projection, the position symbols from
``torch.Generator().manual_seed(22 + seed)``; the chapter's run is seed 0 at n = 64. The file
records the test accuracy (10 000 images) at n = 64, 256 and 1024 with positions, and at n = 64
without them.

Run from the repository root (``SEQBOOK_DATA`` must point at the data)::

    python results/ch08_prototypes_seeds.py [--seeds 0 1 2]
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runinfo import provenance, script_parser, write_result  # noqa: E402

from seqbook.data import load_fashion_mnist  # noqa: E402
from seqbook.vsa import bind, bundle, random_symbols, similarity  # noqa: E402
from seqbook.vsa_models import SymbolProjection  # noqa: E402

DIMS = (64, 256, 1024)


def prototype_accuracy(seed: int, n: int, with_positions: bool, train_set, test_set) -> float:
    torch.manual_seed(seed)
    projection = SymbolProjection(28, n)
    positions = random_symbols(28, n, generator=torch.Generator().manual_seed(22 + seed))

    def image_symbols(images):
        rows = projection(images)
        return bundle(bind(rows, positions) if with_positions else rows)

    with torch.no_grad():
        train_codes = torch.cat([image_symbols(x) for x in train_set[0].split(5000)])
        prototypes = torch.stack([bundle(train_codes[train_set[1] == c]) for c in range(10)])
        test_codes = torch.cat([image_symbols(x) for x in test_set[0].split(5000)])
    guess = similarity(test_codes, prototypes, pairwise=True).argmax(-1)
    return (guess == test_set[1]).float().mean().item()


def main(argv=None) -> None:
    args = script_parser(__file__, __doc__, seeds=(0, 1, 2)).parse_args(argv)
    torch.set_num_threads(1)
    train_set, test_set = load_fashion_mnist("train"), load_fashion_mnist("test")
    runs = []
    for seed in args.seeds:
        run = dict(seed=seed, positions={n: prototype_accuracy(seed, n, True, train_set, test_set)
                                         for n in DIMS},
                   bag_of_rows_64=prototype_accuracy(seed, 64, False, train_set, test_set))
        runs.append(run)
        print(run, flush=True)
    claims = {
        "binding the rows to positions beats the bag of rows at n = 64 at every seed":
            all(r["positions"][64] > r["bag_of_rows_64"] for r in runs),
        "the prototypes gain with n at every seed": all(
            r["positions"][64] < r["positions"][256] < r["positions"][1024] for r in runs),
        "at n = 1024 the prototypes stay below 75 % at every seed":
            all(r["positions"][1024] < 0.75 for r in runs),
    }
    summary = {str(n): dict(min=min(r["positions"][n] for r in runs),
                            max=max(r["positions"][n] for r in runs)) for n in DIMS}
    summary["bag_of_rows_64"] = dict(min=min(r["bag_of_rows_64"] for r in runs),
                                     max=max(r["bag_of_rows_64"] for r in runs))
    result = dict(**provenance(), recipe="cell ch8-prototypes: SymbolProjection(28, n), rows bound "
                  "to random positions and bundled, one prototype per class (the bundle of its "
                  "training images), nearest prototype by FHRR similarity",
                  runs=runs, summary=summary, claims=claims)
    write_result(args.out, result)
    for claim, holds in claims.items():
        print(f"{claim}: {holds}")


if __name__ == "__main__":
    main()
