"""Chapter 7's capacity of the continuous Hopfield network over several draws of the patterns: how
many random patterns one update retrieves from noisy cues, against the dimension d.

Exactly the chapter's measurement (cell ``ch7-continuous-capacity``): patterns drawn uniformly on
the sphere of radius sqrt(d), d = 12, 16, 20, 24, P = 10 ... 100 000 (four per decade); 200 stored
patterns (all of them when P < 200) cued with Gaussian noise of standard deviation 0.5 on every
entry; retrieved when one update at beta = 1 lands within 0.05 sqrt(d) of the pattern. A draw is
the generator seed; the chapter's run is seed 9. For each draw the file records the P at which half
of the cues are retrieved (interpolated in log P) and its growth from each d to the next.

Run from the repository root::

    python results/ch07_continuous_capacity_seeds.py [--seeds 9 0 1 ...]
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runinfo import provenance, script_parser, write_result  # noqa: E402

from seqbook.hopfield import retrieve  # noqa: E402

CONT_D = [12, 16, 20, 24]
CONT_P = [round(10 ** (k / 4)) for k in range(4, 21)]
CONT_CUES = 200


def recall_rate(d: int, P: int, g: torch.Generator) -> float:
    X = F.normalize(torch.randn(P, d, generator=g), dim=-1) * math.sqrt(d)
    x = X[:CONT_CUES]
    q = x + 0.5 * torch.randn(x.shape, generator=g)
    err = (retrieve(X, q, 1.0) - x).norm(dim=-1) / math.sqrt(d)
    return (err < 0.05).float().mean().item()


def log_crossing(P, y, level=0.5) -> float:
    i = int(np.argmax(np.asarray(y) < level))
    a, b = math.log(P[i - 1]), math.log(P[i])
    return math.exp(a + (y[i - 1] - level) / (y[i - 1] - y[i]) * (b - a))


def one_draw(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    rates = {d: [recall_rate(d, P, g) for P in CONT_P] for d in CONT_D}
    p50 = [log_crossing(CONT_P, rates[d]) for d in CONT_D]
    return dict(seed=seed, p50=[round(p) for p in p50],
                growth=[round(b / a, 2) for a, b in zip(p50[:-1], p50[1:], strict=True)])


def main(argv=None) -> None:
    args = script_parser(__file__, __doc__, seeds=(9, *range(9))).parse_args(argv)
    torch.set_num_threads(1)
    runs = []
    for seed in args.seeds:
        runs.append(one_draw(seed))
        print(runs[-1], flush=True)
    growth = [r for run in runs for r in run["growth"]]
    summary = dict(growth=dict(min=min(growth), max=max(growth)),
                   p50_at_24=dict(min=min(r["p50"][-1] for r in runs),
                                  max=max(r["p50"][-1] for r in runs)))
    claims = {
        "every 4 more dimensions multiply P50 by 5 to 20 at every draw":
            all(5 < r < 20 for r in growth),
    }
    result = dict(
        **provenance(),
        recipe="cell ch7-continuous-capacity: d = 12..24 step 4, P = 10..1e5 (4 per decade), "
               "200 cues with noise 0.5, one update at beta = 1, tolerance 0.05 sqrt(d)",
        runs=runs,
        summary=summary,
        claims=claims,
    )
    write_result(args.out, result)
    print(summary)


if __name__ == "__main__":
    main()
