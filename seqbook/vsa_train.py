"""Train the VSA networks of chapter 8 on Fashion-MNIST or on molecules; also a command-line entry point.

The paper's full-scale runs (symbol dimension 1024, 2000 steps of batch 128; RMSprop with learning
rate 1e-3 and smoothing 0.9, the optimiser of the authors' code) on a GPU::

    python -m seqbook.vsa_train --model self  --dim 1024 --steps 2000 --batch 128 --device cuda
    python -m seqbook.vsa_train --model cross --dim 1024 --steps 2000 --batch 128 --device cuda
    python -m seqbook.vsa_train --model resnet --blocks 12 --dim 1024 --steps 2000 --device cuda
    python -m seqbook.vsa_train --model resnet --blocks 12 --no-skip --dim 1024 --steps 2000

The same attention classifiers on molecules (the solubility data of :func:`seqbook.data.load_solubility`,
encoded by :class:`seqbook.vsa.MoleculeEncoder`)::

    python -m seqbook.vsa_train --data solubility --model self --dim 256 --steps 500 --batch 64

Each prints one JSON line with the settings, the final training loss and the test accuracy
(``--out FILE`` also writes it, with the loss curve, to a file).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import dataclass, field

import torch
from torch import nn

from .data import ATOM_FEATURES, BOND_FEATURES, load_fashion_mnist, load_solubility
from .train import History, fit, random_batches
from .utils import cpu_name, get_device, seed_everything
from .vsa import MoleculeEncoder, VSAAttentionClassifier, VSAResNet, codebook_loss

PAPER_ACCURACY = {"self": 0.886, "cross": 0.855, "resnet": 0.858}


def _similarities(model: nn.Module, *inputs: torch.Tensor) -> torch.Tensor:
    out = model(*inputs)
    return out[0] if isinstance(out, tuple) else out  # attention models also return their scores


def vsa_loss(model: nn.Module, batch) -> torch.Tensor:
    """``loss_fn`` for :func:`seqbook.train.fit`: mean(1 - similarity to the true class symbol).

    ``batch`` is ``(*inputs, labels)``: ``(images, labels)``, or ``(symbols, mask, labels)``."""
    *inputs, labels = batch
    return codebook_loss(_similarities(model, *inputs), labels)


@torch.no_grad()
def predict(model: nn.Module, *inputs: torch.Tensor, batch_size: int = 1000) -> torch.Tensor:
    """The similarities to every class symbol (N, C) for a whole split, in eval mode, on the CPU."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    sims = [_similarities(model, *(x[start:start + batch_size].to(device) for x in inputs)).cpu()
            for start in range(0, len(inputs[0]), batch_size)]
    model.train(was_training)
    return torch.cat(sims)


@torch.no_grad()
def evaluate(model: nn.Module, *data: torch.Tensor, batch_size: int = 1000) -> tuple[float, float]:
    """Accuracy (nearest class symbol) and mean loss over a whole split ``(*inputs, labels)``;
    returns ``(accuracy, loss)``."""
    *inputs, labels = data
    sims = predict(model, *inputs, batch_size=batch_size)
    labels = labels.cpu()
    correct = int((sims.argmax(-1) == labels).sum())
    return correct / len(labels), float(codebook_loss(sims, labels))


def encode_solubility(embed_dim: int,
                      seed: int = 0) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
    """The solubility molecules as padded FHRR symbol sets: ``(symbols, mask, labels)`` for the
    training and the test split, both padded to the largest bond count of either (50)."""
    seed_everything(seed)
    train, test = load_solubility("train"), load_solubility("test")
    encoder = MoleculeEncoder(len(ATOM_FEATURES), len(BOND_FEATURES), embed_dim)
    longest = max(len(b) for b in train.bonds + test.bonds)
    return ((*encoder.encode(train, longest), train.labels), (*encoder.encode(test, longest), test.labels))


def macro_auroc(similarities: torch.Tensor, labels: torch.Tensor) -> float:
    """The area under the ROC curve of each class against the rest, scored by its similarity,
    averaged over the classes (one-vs-rest macro AUROC)."""
    from sklearn.metrics import roc_auc_score

    sims, labels = similarities.detach().cpu().numpy(), labels.cpu().numpy()
    return float(sum(roc_auc_score(labels == c, sims[:, c]) for c in range(sims.shape[1])) / sims.shape[1])


def build_model(kind: str, embed_dim: int, num_layers: int = 12, skip: bool = True, num_queries: int = 32,
                out_scale: float = 0.25, d_ff: int | None = None,
                codebook_sparsity: float = 0.0) -> nn.Module:
    """``kind`` in {"self", "cross", "resnet"}: the paper's two attention classifiers or the deep
    residual network of its figure 3 (``out_scale``: initial scale of each block's last layer;
    ``d_ff``: hidden width of the attention blocks' MLP, default ``embed_dim`` as in the authors'
    code; ``codebook_sparsity``: share of each class symbol's angles set to 0)."""
    if kind == "resnet":
        return VSAResNet(embed_dim, num_layers=num_layers, skip=skip, out_scale=out_scale,
                         codebook_sparsity=codebook_sparsity)
    return VSAAttentionClassifier(embed_dim, kind=kind, num_queries=num_queries, d_ff=d_ff,
                                  codebook_sparsity=codebook_sparsity)


@dataclass
class VSARun:
    """What one training run returns: the history, evaluations along the way and the test result."""

    history: History
    eval_steps: list[int] = field(default_factory=list)
    eval_accuracy: list[float] = field(default_factory=list)
    test_accuracy: float = float("nan")
    test_loss: float = float("nan")
    seconds: float = 0.0


def train_vsa(model: nn.Module, train: tuple[torch.Tensor, ...],
              test: tuple[torch.Tensor, ...], steps: int, batch_size: int = 128,
              lr: float = 1e-3, alpha: float = 0.9, eps: float = 1e-8, clip: float | None = None,
              device: torch.device | str | None = None, seed: int = 0, eval_every: int = 0,
              eval_size: int = 1000, progress: bool = True, desc: str = "vsa") -> VSARun:
    """Train with RMSprop (the optimiser of the authors' code: learning rate ``lr``, smoothing
    ``alpha``) on random mini-batches of ``train`` and measure accuracy on the whole of ``test`` at
    the end. ``train`` and ``test`` are ``(*inputs, labels)``: ``(images, labels)``, or
    ``(symbols, mask, labels)`` for encoded molecules.

    Every ``eval_every`` steps (0: never) the accuracy on the first ``eval_size`` test images is
    recorded, for learning curves.
    """
    device = torch.device(device) if device is not None else get_device()
    generator = seed_everything(seed)
    model.to(device)
    # Shuffling uses a seeded CPU generator: the same batches on every device.
    batches = random_batches(*(t.to(device) for t in train), batch_size=batch_size, generator=generator)
    optimizer = torch.optim.RMSprop(model.parameters(), lr=lr, alpha=alpha, eps=eps)
    run = VSARun(history=History())
    held_out = [t[:eval_size] for t in test]

    def eval_fn(m: nn.Module) -> float:
        acc, loss = evaluate(m, *held_out)
        run.eval_accuracy.append(acc)
        return loss

    start = time.perf_counter()
    run.history = fit(model, vsa_loss, batches, steps, optimizer=optimizer, clip=clip, device=device,
                      seed=None, eval_fn=eval_fn if eval_every else None, eval_every=eval_every,
                      progress=progress, desc=desc)
    run.eval_steps = list(run.history.eval_step)
    run.test_accuracy, run.test_loss = evaluate(model, *test)
    run.seconds = time.perf_counter() - start
    return run


def _device_name(model: nn.Module) -> str:
    device = next(model.parameters()).device
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{cpu_name()} ({os.cpu_count()} cores)"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m seqbook.vsa_train", description=__doc__.split("\n")[0])
    parser.add_argument("--data", choices=["fashion-mnist", "solubility"], default="fashion-mnist")
    parser.add_argument("--model", choices=["self", "cross", "resnet"], default="self")
    parser.add_argument("--dim", type=int, default=1024, help="symbol dimension n")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--alpha", type=float, default=0.9, help="RMSprop smoothing constant")
    parser.add_argument("--blocks", type=int, default=12, help="resnet: residual blocks (2 layers each)")
    parser.add_argument("--no-skip", action="store_true", help="resnet: drop the binding skips")
    parser.add_argument("--out-scale", type=float, default=0.25,
                        help="resnet: initial weight scale of each block's last layer (paper: 1.0)")
    parser.add_argument("--queries", type=int, default=32, help="cross: number of inducing points")
    parser.add_argument("--mlp-hidden", type=int, default=None,  # default: dim, as the authors' code
                        help="self/cross: hidden width of the block's MLP (default: dim)")
    parser.add_argument("--codebook-sparsity", type=float, default=0.0,
                        help="share of each class symbol's angles set to 0 (authors' attention code: 0.75)")
    parser.add_argument("--train-size", type=int, default=0, help="use only the first N training images")
    parser.add_argument("--eval-every", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default=None, help="cpu, cuda, ... (default: best available)")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads for PyTorch (0: its default)")
    parser.add_argument("--out", default=None, help="also write the result (with the loss curve) as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
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
        model = build_model(args.model, args.dim, args.blocks, not args.no_skip, args.queries, args.out_scale,
                            args.mlp_hidden, args.codebook_sparsity)
    if args.train_size:
        train = tuple(t[:args.train_size] for t in train)
    run = train_vsa(model, train, test, args.steps, args.batch, args.lr, args.alpha, device=args.device,
                    seed=args.seed, eval_every=args.eval_every, progress=not args.quiet, desc=args.model)
    result = {
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
        auroc = macro_auroc(predict(model, *test[:-1]), test[-1])
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
