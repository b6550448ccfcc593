"""The command line that trains chapter 6's GPT on one process or many: on *The Time Machine*
(characters, the default) or on any UTF-8 file. The work is done by :mod:`seqbook.distributed`
(process groups, DDP and FSDP2, the global batches, checkpoints); this module reads the arguments,
prepares the token ids and writes the JSON log.

One process (a CPU, or the first GPU)::

    python -m seqbook.gpt_train --steps 2000 --json-log run.json

One machine with N GPUs (or N CPU processes: gloo on CPUs, NCCL on GPUs)::

    torchrun --nproc-per-node N -m seqbook.gpt_train --parallel fsdp --steps 2000 --json-log run.json

Several machines: the same command on each, with torchrun's rendezvous options (``--nnodes 2``,
``--node-rank 0`` on the first and ``1`` on the second, or ``--rdzv-backend c10d
--rdzv-endpoint HOST:PORT --rdzv-id JOB`` with the same HOST:PORT on all of them)::

    torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint host0:29500 \\
        --rdzv-id gpt1 -m seqbook.gpt_train --parallel fsdp --checkpoint-dir ckpt --json-log run.json

Every machine reads the text itself (``--data FILE`` must be on each); only rank 0 writes and reads
checkpoints, and the other ranks receive the state from it.

Data: ``--data FILE`` reads a UTF-8 file (``--tokenizer char``: its characters; ``--tokenizer bpe
--vocab-size N``: chapter 1's byte-level BPE trained on the training part); without ``--data``,
*The Time Machine* in the book's 27-symbol alphabet (``char``) or its raw text (``bpe``). The last
``--valid-frac`` of the tokens is held out for the evaluations.

The batch: ``--batch-size B`` sequences per optimiser step over all processes; each of the W
processes takes B / W of them in ``--accumulate K`` micro-batches of B / (W K) (so B must be
divisible by W K). The run is the same for any W and K: the windows of step s are drawn from
(seed, s) alone.

Checkpoints (``--checkpoint-dir DIR``; every ``--checkpoint-every S`` steps and at the end) are a
folder ``DIR/step_00000042`` with ``tensors.safetensors`` (model, AdamW state, every rank's random
states) and ``state.json`` (everything else, and the tensor file's SHA-256): no pickle, and they load
on any number of processes. ``--resume`` continues from the newest one in DIR (``--resume PATH``: from
that folder); the model, data and run settings must match, the number of processes, ``--parallel`` and
``--accumulate`` may differ. A newest one that is damaged (a file missing, unreadable or failing its
checksum, or a ``state.json`` whose step is not its folder's) is renamed ``damaged_step_...``
(kept, never deleted) and the next older intact one of the run serves (with ``--keep 1`` there is
none); ``--resume PATH`` has no such fallback. ``--resume auto`` continues
from the newest one if DIR has one and starts at step 0 if not, so that one command line serves a
job's first start and every restart (``torchrun --max-restarts N`` starts the processes again after
one fails; rank 0 decides, so on several machines DIR must be on storage they all see).
``--stop-after S`` ends the run at step S, as a preempted job.

``--bf16`` runs the forward pass under bfloat16 autocast on GPUs; on a CPU it is refused (an error,
not silently ignored). ``--dtype float64`` trains in double precision (for the proofs).

The JSON log (``--json-log FILE``, rewritten after every checkpoint and at the end; ``main`` returns the
same dict) has, stably:

- ``format`` ("seqbook.gpt_train log"), ``version`` (1), ``command`` (the command line as a list),
  ``commit`` (``SEQBOOK_COMMIT`` or git's HEAD, None when unknown), ``torch``;
- ``world_size``, ``parallel`` ("ddp", "fsdp", or "none" alone), ``backend`` ("gloo", "nccl" or
  None), ``device`` ("cpu"/"cuda"), ``device_name``, ``dtype``, ``bf16``;
- ``config`` (the GPTConfig fields), ``parameters``, ``data`` (``source``, ``tokenizer``,
  ``vocab_size``, ``train_tokens``, ``valid_tokens``, ``sha256`` of the training ids);
- the run settings ``steps``, ``batch_size``, ``lr``, ``weight_decay``, ``warmup``, ``schedule``,
  ``min_lr_factor``, ``clip``, ``seed``, and ``accumulate``, ``micro_batch_size``,
  ``tokens_per_step``;
- per step, lists of one length: ``step``, ``loss`` (the global batch's mean cross-entropy in nats,
  before the step's update), ``lr``, ``grad_norm`` (the global norm before clipping); per evaluation
  ``eval_step``, ``eval_loss`` (mean loss on ``--eval-windows`` evenly spaced windows of the
  held-out tail, rounded down to a multiple of the processes, at every ``--eval-every`` steps and at
  the last);
- ``final_loss``, ``final_eval_loss``, ``seconds`` and ``tokens_per_second`` (this invocation),
  ``peak_memory_mib`` and ``peak_memory`` (what it measured: on a GPU the most memory PyTorch's
  tensors took on rank 0's device, ``torch.cuda.max_memory_allocated``; on a CPU rank 0's peak
  resident set, which includes Python and the libraries), the peak so far at each write,
  ``resumed_from`` (None, or ``path``, ``step``, ``world_size``, ``parallel``, ``rng_restored``,
  ``skipped``: why each damaged newer checkpoint was passed over),
  ``stopped_at`` (the step of ``--stop-after``, else None), ``checkpoints`` (folders written).

A resumed run's lists hold the whole run, the steps before the resume included.

Why ``--json-log`` and not ``--log``: torchrun reads the whole command line with abbreviations on,
so an option of ours that is the start of one of its own (``--log`` of ``--log-dir``) stops it;
none of this module's options is (a test checks), and this parser takes no abbreviations either.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

import torch

from .bpe import train_bpe
from .checks import int_at_least, number_at_least
from .data import load_time_machine, split_text, time_machine_ids
from .distributed import (
    PARALLEL,
    CheckpointError,
    RunSettings,
    checkpoint_folders,
    init_distributed,
    launched_world_size,
    shutdown_distributed,
    train_distributed,
)
from .gpt import POSITIONAL, GPTConfig
from .utils import code_commit, cpu_name
from .vocab import Vocab

__all__ = ["main", "build_parser", "load_ids"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m seqbook.gpt_train", allow_abbrev=False,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Train chapter 6's GPT on one process or many (torchrun): DDP or FSDP2, gradient "
                    "accumulation, checkpoints that resume on any number of processes, a JSON log.",
    )
    positive, count = int_at_least(1), int_at_least(0)
    g = p.add_argument_group("data")
    g.add_argument("--data", default=None, metavar="FILE",
                   help="a UTF-8 text file (None: The Time Machine)")
    g.add_argument("--tokenizer", choices=["char", "bpe"], default="char",
                   help="characters, or a byte-level BPE trained on the training part")
    g.add_argument("--vocab-size", type=int_at_least(256), default=512,
                   help="bpe: tokens of the trained byte-level BPE, the 256 bytes included")
    g.add_argument("--valid-frac", type=float, default=0.1, help="held-out tail of the text")
    g = p.add_argument_group("model (GPTConfig)")
    g.add_argument("--n-layer", type=positive, default=4, help="blocks")
    g.add_argument("--n-head", type=positive, default=4, help="attention heads per block")
    g.add_argument("--n-embd", type=positive, default=128, help="width of the residual stream")
    g.add_argument("--block-size", type=positive, default=128, help="tokens per training window")
    g.add_argument("--dropout", type=float, default=0.0, help="dropout probability")
    g.add_argument("--positional", choices=POSITIONAL, default="learned", help="position code")
    g = p.add_argument_group("optimisation")
    g.add_argument("--steps", type=positive, default=1000, help="optimiser steps of the whole run")
    g.add_argument("--batch-size", type=positive, default=64,
                   help="sequences per optimiser step, over all processes")
    g.add_argument("--accumulate", type=positive, default=1, help="micro-batches per optimiser step")
    g.add_argument("--lr", type=number_at_least(0.0), default=1e-3, help="peak learning rate (AdamW)")
    g.add_argument("--weight-decay", type=number_at_least(0.0), default=0.01, help="AdamW's")
    g.add_argument("--warmup", type=count, default=0, help="steps of linear warm-up")
    g.add_argument("--schedule", choices=["cosine", "linear", "constant", "inverse_sqrt"], default="cosine",
                   help="the learning rate after the warm-up (seqbook.train.warmup_factor)")
    g.add_argument("--min-lr-factor", type=float, default=0.1, help="cosine/linear: final lr / peak lr")
    g.add_argument("--clip", type=number_at_least(0.0), default=1.0, help="global gradient norm (0: none)")
    g.add_argument("--seed", type=int, default=0, help="initial weights and the order of the data")
    g.add_argument("--dtype", choices=["float32", "float64"], default="float32", help="of the parameters")
    g.add_argument("--bf16", action="store_true", help="bfloat16 autocast (GPUs only)")
    g = p.add_argument_group("processes")
    g.add_argument("--parallel", choices=PARALLEL, default="ddp",
                   help="under torchrun: DDP (full copies) or FSDP2 (sharded per block)")
    g.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                   help="auto: a GPU per process when there are GPUs, else the CPU")
    g.add_argument("--threads", type=count, default=0, help="CPU threads per process (0: PyTorch's)")
    g = p.add_argument_group("checkpoints and logs")
    g.add_argument("--checkpoint-dir", default=None, metavar="DIR",
                   help="write checkpoints here (DIR/step_00000042/)")
    g.add_argument("--checkpoint-every", type=count, default=0,
                   help="steps between checkpoints (0: at the end only)")
    g.add_argument("--keep", type=count, default=0, help="keep the newest N checkpoints (0: all)")
    g.add_argument("--resume", nargs="?", const="latest", default=None, metavar="PATH",
                   help="continue from the newest checkpoint in --checkpoint-dir, or from PATH; "
                        "'--resume auto': from the newest if there is one, else from step 0")
    g.add_argument("--stop-after", type=positive, default=None, metavar="S",
                   help="end this invocation after step S (a checkpoint is written)")
    g.add_argument("--eval-every", type=count, default=0, help="steps between evaluations (0: last only)")
    g.add_argument("--eval-windows", type=positive, default=64, help="held-out windows per evaluation")
    g.add_argument("--json-log", default=None, metavar="FILE",
                   help="write the JSON log here (rewritten after every checkpoint and at the end)")
    g.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def load_ids(data: str | None, tokenizer: str, vocab_size: int, valid_frac: float
             ) -> tuple[torch.Tensor, torch.Tensor, int, dict]:
    """The training and held-out token ids, the vocabulary size and a description of the data."""
    if data is None and tokenizer == "char":
        vocab, train, valid = time_machine_ids(valid_frac)
        V, source = len(vocab), "The Time Machine (27-symbol alphabet)"
    else:
        if data is None:
            text, source = load_time_machine(), "The Time Machine"
        else:
            text, source = Path(data).read_text(encoding="utf-8"), str(data)
        train_text, valid_text = split_text(text, valid_frac)
        if tokenizer == "char":
            vocab = Vocab(list(train_text))
            V = len(vocab)
            train = torch.tensor(vocab.encode(list(train_text)), dtype=torch.long)
            valid = torch.tensor(vocab.encode(list(valid_text)), dtype=torch.long)
        else:
            bpe = train_bpe(train_text, vocab_size)
            V = bpe.vocab_size
            train = torch.tensor(bpe.encode(train_text), dtype=torch.long)
            valid = torch.tensor(bpe.encode(valid_text), dtype=torch.long)
    info = {"source": source, "tokenizer": tokenizer, "vocab_size": V, "train_tokens": train.numel(),
            "valid_tokens": valid.numel(),
            "sha256": hashlib.sha256(train.numpy().tobytes()).hexdigest()}
    return train, valid, V, info


def _write_json(path: str, obj: dict) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> dict:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); returns the JSON log."""
    parser = build_parser()
    args = parser.parse_args(argv)
    world = launched_world_size()
    if args.batch_size % (world * args.accumulate):
        parser.error(f"--batch-size {args.batch_size} must be divisible by processes x --accumulate = "
                     f"{world} x {args.accumulate}")
    if args.data is not None and not Path(args.data).is_file():
        parser.error(f"--data {args.data}: no such file")
    if args.tokenizer == "bpe" and args.vocab_size < 257:
        parser.error(f"--vocab-size must be > 256 for --tokenizer bpe, got {args.vocab_size}")
    if not 0 < args.valid_frac < 1:
        parser.error(f"--valid-frac must be in (0, 1), got {args.valid_frac}")
    if not 0 <= args.dropout < 1:
        parser.error(f"--dropout must be in [0, 1), got {args.dropout}")
    if not 0 <= args.min_lr_factor <= 1:
        parser.error(f"--min-lr-factor must be in [0, 1], got {args.min_lr_factor}")
    if args.schedule in ("cosine", "linear") and args.warmup >= args.steps:
        parser.error(f"--warmup {args.warmup} must be < --steps {args.steps} for --schedule {args.schedule}")
    if args.n_embd % args.n_head:
        parser.error(f"--n-embd {args.n_embd} must be divisible by --n-head {args.n_head}")
    if args.bf16 and args.dtype == "float64":
        parser.error("--bf16 autocasts float32 parameters; it cannot be combined with --dtype float64")
    cuda = torch.cuda.is_available() if args.device == "auto" else args.device == "cuda"
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no GPU")
    if args.bf16 and not cuda:
        parser.error("--bf16 needs a GPU (bfloat16 autocast is refused on CPUs, where it is slow)")
    if (args.checkpoint_every or args.keep or args.stop_after or args.resume in ("latest", "auto")
            ) and args.checkpoint_dir is None:
        parser.error("--checkpoint-every, --keep, --stop-after and --resume without a PATH or "
                     "with auto need --checkpoint-dir")
    resume, fallback = None, []
    if args.resume is not None and os.environ.get("RANK", "0") != "0":
        resume = Path(args.resume)  # only rank 0 reads checkpoints (its machine has them)
    elif args.resume in ("latest", "auto"):
        found = checkpoint_folders(args.checkpoint_dir)
        resume, fallback = (found[-1], found[-2::-1]) if found else (None, [])
        if resume is None and args.resume == "latest":
            parser.error(f"--resume: no checkpoint in {args.checkpoint_dir}")
        if resume is None and not args.quiet:
            print(f"--resume auto: no checkpoint in {args.checkpoint_dir} yet; starting at step 0",
                  file=sys.stderr)
    elif args.resume is not None:
        resume = Path(args.resume)
        if not (resume / "state.json").is_file():
            parser.error(f"--resume {args.resume}: not a checkpoint folder (no state.json in it)")
    if args.threads:
        torch.set_num_threads(args.threads)

    train, valid, V, data_info = load_ids(args.data, args.tokenizer, args.vocab_size, args.valid_frac)
    if train.numel() <= args.block_size:
        parser.error(f"the training text has {train.numel()} tokens, too few for --block-size "
                     f"{args.block_size}")
    config = GPTConfig(vocab_size=V, block_size=args.block_size, n_layer=args.n_layer, n_head=args.n_head,
                       n_embd=args.n_embd, dropout=args.dropout, positional=args.positional)
    run = RunSettings(steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                      weight_decay=args.weight_decay, warmup=args.warmup, schedule=args.schedule,
                      min_lr_factor=args.min_lr_factor, clip=args.clip, seed=args.seed, dtype=args.dtype)
    d = init_distributed(args.device)
    try:
        if args.resume == "auto" and d.grouped:  # the others follow rank 0, which found one or not
            box = [None if resume is None else str(resume)]
            torch.distributed.broadcast_object_list(box, src=0)
            resume = box[0]
        device_name = (torch.cuda.get_device_name(d.device) if d.device.type == "cuda"
                       else f"{cpu_name()} ({os.cpu_count()} cores)")
        extra = {"command": ["python", "-m", "seqbook.gpt_train", *(sys.argv[1:] if argv is None else argv)],
                 "commit": code_commit(), "torch": torch.__version__, "device_name": device_name}

        def write(log: dict) -> None:  # rank 0, after every checkpoint and at the end
            log["peak_memory_mib"], log["peak_memory"] = peak_memory(d.device)
            if args.json_log:
                _write_json(args.json_log, log)

        try:
            log = train_distributed(
                config, train, valid, run, d, data_info, parallel=args.parallel,
                accumulate=args.accumulate, bf16=args.bf16, checkpoint_dir=args.checkpoint_dir,
                checkpoint_every=args.checkpoint_every, keep=args.keep, resume=resume,
                resume_fallback=fallback,
                stop_after=args.stop_after, eval_every=args.eval_every,
                eval_windows=args.eval_windows, progress=not args.quiet, log_extra=extra, on_log=write)
        except CheckpointError as exc:
            parser.exit(2, f"{parser.prog}: error: {exc}\n")
        if d.main:
            summary = {k: log[k] for k in ("world_size", "parallel", "steps", "final_loss",
                                            "final_eval_loss", "seconds", "tokens_per_second",
                                            "peak_memory_mib")}
            print(json.dumps(summary))
        return log
    finally:
        shutdown_distributed(d)


def peak_memory(device: torch.device) -> tuple[float | None, str]:
    """This process's peak memory in MiB, and what was measured: on a GPU the most that PyTorch's
    tensors took on ``device``, on a CPU the process's peak resident set (None on Windows, which
    has no ``resource`` module)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20, "torch.cuda.max_memory_allocated"
    try:
        import resource
    except ImportError:
        return None, "not measured (no resource module)"
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return peak / (2**20 if sys.platform == "darwin" else 2**10), "peak resident set of the process"


if __name__ == "__main__":
    main()
