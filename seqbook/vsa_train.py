"""The command line for the longer runs of chapter 8: train a VSA network on Fashion-MNIST or on
molecules and record the result. The work is done by library functions
(:func:`seqbook.vsa_models.build_classifier`, :func:`seqbook.molecules.encode_solubility`,
:func:`seqbook.train.train_vsa`); this module only reads the arguments and writes the JSON.

The paper's full-scale runs (symbol dimension 1024, 2000 steps of batch 128; RMSprop with learning
rate 1e-3 and smoothing 0.9, the optimiser of the authors' code) on a GPU::

    python -m seqbook.vsa_train --model self  --dim 1024 --steps 2000 --batch 128 --device cuda
    python -m seqbook.vsa_train --model cross --dim 1024 --steps 2000 --batch 128 --device cuda
    python -m seqbook.vsa_train --model resnet --blocks 12 --dim 1024 --steps 2000 --device cuda
    python -m seqbook.vsa_train --model resnet --blocks 12 --no-skip --dim 1024 --steps 2000 \
        --device cuda

The same attention classifiers on molecules (the solubility data of :func:`seqbook.data.load_solubility`,
encoded by :class:`seqbook.molecules.MoleculeEncoder`)::

    python -m seqbook.vsa_train --data solubility --model self --dim 256 --steps 500 --batch 64

Each prints one JSON line with the settings, the final training loss and the test accuracy
(``--out FILE`` also writes it, with the loss curve, to a file).
"""

from __future__ import annotations

import argparse
import json
import os

import torch
from torch import nn

from .checks import int_at_least
from .data import load_fashion_mnist
from .losses import macro_auroc
from .molecules import encode_solubility
from .train import predict_similarities, train_vsa
from .utils import code_commit, cpu_name, seed_everything
from .vsa_models import PAPER_ACCURACY, VSAAttentionClassifier, build_classifier


def _device_name(model: nn.Module) -> str:
    device = next(model.parameters()).device
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{cpu_name()} ({os.cpu_count()} cores)"


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m seqbook.vsa_train``."""
    first_sentence = " ".join(__doc__.split(". ")[0].split()) + "."
    parser = argparse.ArgumentParser(prog="python -m seqbook.vsa_train", description=first_sentence)
    positive, count = int_at_least(1), int_at_least(0)
    parser.add_argument("--data", choices=["fashion-mnist", "solubility"], default="fashion-mnist")
    parser.add_argument("--model", choices=["self", "cross", "resnet"], default="self")
    parser.add_argument("--dim", type=positive, default=1024, help="symbol dimension n")
    parser.add_argument("--steps", type=positive, default=2000)
    parser.add_argument("--batch", type=positive, default=128)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--alpha", type=float, default=0.9, help="RMSprop smoothing constant")
    parser.add_argument("--blocks", type=count, default=12, help="resnet: residual blocks (2 layers each)")
    parser.add_argument("--no-skip", action="store_true", help="resnet: drop the binding skips")
    parser.add_argument("--out-scale", type=float, default=0.25,
                        help="resnet: initial weight scale of each block's last layer "
                             "(the authors' code: 1.0)")
    parser.add_argument("--queries", type=positive, default=32, help="cross: number of inducing points")
    parser.add_argument("--mlp-hidden", type=positive, default=None,  # default: dim, as the authors' code
                        help="self/cross: hidden width of the block's MLP (default: dim)")
    parser.add_argument("--codebook-sparsity", type=float, default=0.0,
                        help="share of each class symbol's angles set to 0 (authors' attention code: 0.75)")
    parser.add_argument("--train-size", type=count, default=0, help="use only the first N training images")
    parser.add_argument("--eval-every", type=count, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default=None, help="cpu, cuda, ... (default: best available)")
    parser.add_argument("--threads", type=count, default=0, help="CPU threads for PyTorch (0: its default)")
    parser.add_argument("--out", default=None, help="also write the result (with the loss curve) as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def fashion_classifier(args: argparse.Namespace) -> nn.Module:
    """The Fashion-MNIST network that the parsed flags ``args`` describe, drawn from the current
    random state (:func:`main` seeds it with ``args.seed`` first)."""
    return build_classifier(args.model, args.dim, args.blocks, not args.no_skip, args.queries,
                            args.out_scale, args.mlp_hidden, args.codebook_sparsity)


def main(argv: list[str] | None = None) -> dict:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.data == "solubility":
        if args.model == "resnet":
            parser.error("--data solubility takes --model self or cross")
        train, test = encode_solubility(args.dim, args.seed)
        seed_everything(args.seed)
        model = VSAAttentionClassifier(args.dim, args.model, args.queries, rows=train[0].shape[1], cols=None,
                                       num_classes=3, d_ff=args.mlp_hidden,
                                       codebook_sparsity=args.codebook_sparsity)
    else:
        seed_everything(args.seed)
        train, test = load_fashion_mnist("train"), load_fashion_mnist("test")
        model = fashion_classifier(args)
    if args.train_size:
        train = tuple(t[:args.train_size] for t in train)
    run = train_vsa(model, train, test, args.steps, args.batch, args.lr, args.alpha, device=args.device,
                    seed=args.seed, eval_every=args.eval_every, progress=not args.quiet, desc=args.model)
    result = {
        "commit": code_commit(),
        "model": args.model, "dim": args.dim, "steps": args.steps, "batch": args.batch, "lr": args.lr,
        "alpha": args.alpha, "seed": args.seed, "codebook_sparsity": args.codebook_sparsity,
        "device": str(next(model.parameters()).device), "device_name": _device_name(model),
        "threads": torch.get_num_threads(), "torch": torch.__version__,
        "parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "final_train_loss": round(run.history.final_loss, 4),
        "test_accuracy": round(run.test_accuracy, 4), "test_loss": round(run.test_loss, 4),
        "seconds": round(run.seconds, 1),
    }
    if args.data == "solubility":
        auroc = macro_auroc(predict_similarities(model, *test[:-1]), test[-1])
        result.update(data="solubility", test_macro_auroc=round(auroc, 4))
    else:
        chance = args.model == "resnet" and args.no_skip
        result.update(paper_test_accuracy=0.1 if chance else PAPER_ACCURACY[args.model])
    if args.model == "resnet":
        result.update(blocks=args.blocks, layers=2 * args.blocks, skip=not args.no_skip,
                      out_scale=args.out_scale)
    else:
        result.update(mlp_hidden=args.mlp_hidden or args.dim)
    if args.model == "cross":
        result.update(queries=args.queries)
    print(json.dumps(result))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({**result, "step_loss": run.history.step_loss,
                       "eval_steps": run.eval_steps, "eval_accuracy": run.eval_accuracy}, f)
    return result


if __name__ == "__main__":
    main()
