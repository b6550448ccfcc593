"""Benchmarks: seqbook's modules timed against PyTorch's built-ins and torch-hd.

Run it as a program::

    python -m seqbook.bench                          # every pair, book sizes and 4x, table on stdout
    python -m seqbook.bench --scaling --out perf     # + time against sequence length; perf/cpu.{txt,json}
    python -m seqbook.bench --clock cpu              # CPU time instead of wall time: for a busy machine
    python -m seqbook.bench --smoke                  # tiny sizes, one repeat: the CI check that it runs
    python -m seqbook.bench --device cuda --out perf # the same on a GPU: perf/cuda.{txt,json}
    python -m seqbook.bench --notebooks --out perf   # time every chapter notebook: perf/notebooks.json

Every *pair* times one of our implementations ("ours") and the reference it is meant to equal, in the
same process, at the same sizes, interleaved sample by sample (ours, ref, ref, ours, ...), so a machine
that gets busier or quieter during the run shifts both alike and their ratio stays meaningful. A pair
is timed for the forward pass (``torch.no_grad()``, modules in eval mode, which lets PyTorch's modules
take their inference fast paths) and for forward + backward (training mode, inputs and parameters
requiring gradients, ``out.sum().backward()``). A timing is the median over samples taken after a
warm-up; one sample runs the function ``number`` times, enough to last a couple of milliseconds.

Sizes: ``book`` are the sizes the chapters train with (per call of the layer); ``4x`` runs sequences
four times longer at the same number of tokens per batch (batch / 4) for the sequence models, four
times the symbol dimension for FHRR, and four times the memory and the queries for Hopfield retrieval.

Targets (CPU, ours / reference, forward + backward, book and 4x): a fast path (``fast=True``) at most
1.1x its built-in; ``MultiHeadAttention`` and the transformer layers at most 1.2x; the FHRR operations
no slower than torch-hd (1.0x), like for like: our phasor fast path (``seqbook.vsa.bind_phasor``, ...)
against torch-hd's operations, both on stored complex phasors. Rows without a target are there to be
read, not judged: the readable step-by-step code against the fused kernels (or torch-hd), or Hopfield's
batched retrieval against a loop over queries.

Rows whose dependency is missing (``torch-hd``, the optional benchmark extra ``seqbook[bench]``, or
:mod:`seqbook.hopfield`) are reported as skipped.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import importlib
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from .utils import cpu_name

__all__ = [
    "SIZES",
    "TARGETS",
    "Pair",
    "machine_info",
    "measure",
    "pairs",
    "run_pairs",
    "run_scaling",
    "format_table",
    "time_notebooks",
    "main",
]

GROUPS = ("attention", "transformer", "recurrent", "vsa", "hopfield")

# Per-call sizes of the layers. rnn: batch B, length T, input D, hidden H (chapter 2's language model).
# attn: batch B, length T, width E, heads H (chapter 6's GPT, block_size 128). vsa: batch B, T symbols
# of dimension D (chapter 8's image rows on a CPU). hopfield: P stored patterns, Q queries, dimension d.
SIZES: dict[str, dict[str, dict[str, int]]] = {
    "book": {
        "rnn": dict(B=32, T=64, D=32, H=256),
        "attn": dict(B=32, T=128, E=128, H=4),
        "vsa": dict(B=128, T=28, D=64),
        "hopfield": dict(P=100, Q=100, d=64),
    },
    "4x": {
        "rnn": dict(B=8, T=256, D=32, H=256),
        "attn": dict(B=8, T=512, E=128, H=4),
        "vsa": dict(B=128, T=28, D=256),
        "hopfield": dict(P=400, Q=400, d=64),
    },
    "smoke": {
        "rnn": dict(B=2, T=5, D=3, H=4),
        "attn": dict(B=2, T=6, E=8, H=2),
        "vsa": dict(B=2, T=3, D=8),
        "hopfield": dict(P=5, Q=3, d=4),
    },
}

TARGETS = {"fast path": 1.1, "module": 1.2, "torch-hd": 1.0}


# ---------------------------------------------------------------------------------------------
# What is timed: a pair of closures.
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Pair:
    """One comparison: ``ours()`` against ``ref()``, each running a forward pass and returning its output.

    ``leaves`` are the tensors (inputs and parameters) whose gradients the forward+backward timing
    computes and clears; ``modules`` are switched to eval mode for the forward timing and to train mode
    for forward+backward. ``skip`` holds the reason when a dependency is missing (then nothing is run).
    """

    group: str
    name: str
    reference: str
    shape: str
    target: float | None = None
    ours: Callable[[], object] | None = None
    ref: Callable[[], object] | None = None
    leaves: list[torch.Tensor] = dataclasses.field(default_factory=list)
    modules: list[nn.Module] = dataclasses.field(default_factory=list)
    skip: str | None = None


def _scalar(out) -> torch.Tensor:
    """A scalar to differentiate: the sum of the (first) output; the real part of a complex one."""
    while isinstance(out, (tuple, list)):
        out = out[0]
    if out.is_complex():
        out = out.real
    return out.sum()


def _runner(fn: Callable[[], object], leaves: list[torch.Tensor], backward: bool) -> Callable[[], None]:
    if not backward:
        def forward():
            with torch.no_grad():
                fn()
        return forward

    def forward_backward():
        _scalar(fn()).backward()
        for t in leaves:
            t.grad = None  # like optimizer.zero_grad(set_to_none=True)
    return forward_backward


def _sync_for(device: torch.device) -> Callable[[], None]:
    if device.type == "cuda":
        return torch.cuda.synchronize
    return lambda: None


def measure(fns: list[Callable[[], None]], sync: Callable[[], None] = lambda: None, repeats: int = 11,
            warmup: int = 2, min_sample_s: float = 0.002, budget_s: float = 2.0,
            clock: Callable[[], float] = time.perf_counter) -> list[dict]:
    """Median time per call of each function in ``fns``, timed interleaved.

    After ``warmup`` calls of each, one call of each calibrates ``number``, the calls per sample (the
    same for all, so that one sample lasts at least ``min_sample_s``). Then up to ``repeats`` rounds
    take one sample of every function, in an order that alternates between rounds; fewer rounds (at
    least 3, or ``repeats`` if smaller) are taken when ``repeats`` rounds would exceed ``budget_s``.

    ``clock`` is wall time by default; ``time.process_time`` (CPU time of this process) is steadier
    on a machine shared with other jobs, and equals wall time when torch runs one thread on the CPU.

    Returns one dict per function: ``ms`` (median per call), ``min_ms``, ``samples``, ``number``.
    """
    for _ in range(warmup):
        for f in fns:
            f()
    sync()
    first = []
    for f in fns:
        t0 = clock()
        f()
        sync()
        first.append(clock() - t0)
    slowest = max(max(first), 1e-7)
    number = max(1, math.ceil(min_sample_s / slowest)) if repeats > 1 else 1
    per_round = number * sum(max(t, 1e-7) for t in first)
    rounds = repeats if repeats <= 3 else max(3, min(repeats, int(budget_s / per_round)))
    samples: list[list[float]] = [[] for _ in fns]
    for r in range(rounds):
        order = range(len(fns)) if r % 2 == 0 else reversed(range(len(fns)))
        for i in order:
            t0 = clock()
            for _ in range(number):
                fns[i]()
            sync()
            samples[i].append((clock() - t0) / number)
    return [{"ms": 1e3 * statistics.median(s), "min_ms": 1e3 * min(s), "samples": len(s), "number": number}
            for s in samples]


# ---------------------------------------------------------------------------------------------
# The pairs.
# ---------------------------------------------------------------------------------------------


def _randn(*shape, device, grad=True) -> torch.Tensor:
    return torch.randn(*shape, device=device).requires_grad_(grad)


def _attention_pairs(s: dict, device) -> Iterator[Pair]:
    from .attention import MultiHeadAttention, scaled_dot_product_attention

    B, T, E, H = s["B"], s["T"], s["E"], s["H"]
    Dh = E // H
    q, k, v = (_randn(B, H, T, Dh, device=device) for _ in range(3))
    shape = f"B={B} H={H} T={T} d={Dh}"
    for causal in (False, True):
        label = " causal" if causal else ""
        yield Pair("attention", f"scaled_dot_product_attention{label}",
                   f"F.scaled_dot_product_attention{label}", shape, None,
                   ours=lambda c=causal: scaled_dot_product_attention(q, k, v, is_causal=c),
                   ref=lambda c=causal: F.scaled_dot_product_attention(q, k, v, is_causal=c),
                   leaves=[q, k, v])

    x = _randn(B, T, E, device=device)
    shape = f"B={B} T={T} E={E} heads={H}"
    ref = nn.MultiheadAttention(E, H, batch_first=True).to(device)
    for fast in (True, False):
        ours = MultiHeadAttention.from_torch(ref, fast=fast)
        yield Pair("attention", f"MultiHeadAttention fast={fast}", "nn.MultiheadAttention", shape,
                   TARGETS["module"] if fast else None,
                   ours=lambda m=ours: m(x, x, x, need_weights=False),
                   ref=lambda: ref(x, x, x, need_weights=False),
                   leaves=[x, *ours.parameters(), *ref.parameters()], modules=[ours, ref])


def _transformer_pairs(s: dict, device) -> Iterator[Pair]:
    from .transformer import DecoderLayer, EncoderLayer

    B, T, E, H = s["B"], s["T"], s["E"], s["H"]
    x, memory = _randn(B, T, E, device=device), _randn(B, T, E, device=device)
    causal = nn.Transformer.generate_square_subsequent_mask(T, device=device)
    shape = f"B={B} T={T} E={E} heads={H} causal"
    kw = dict(dim_feedforward=4 * E, dropout=0.0, activation="gelu", norm_first=True, batch_first=True)

    enc_ref = nn.TransformerEncoderLayer(E, H, **kw).to(device)
    enc = EncoderLayer.from_torch(enc_ref, fast=True)
    yield Pair("transformer", "EncoderLayer fast=True", "nn.TransformerEncoderLayer", shape,
               TARGETS["module"],
               ours=lambda: enc(x, is_causal=True),
               ref=lambda: enc_ref(x, src_mask=causal, is_causal=True),
               leaves=[x, *enc.parameters(), *enc_ref.parameters()], modules=[enc, enc_ref])

    dec_ref = nn.TransformerDecoderLayer(E, H, **kw).to(device)
    dec = DecoderLayer.from_torch(dec_ref, fast=True)
    yield Pair("transformer", "DecoderLayer fast=True", "nn.TransformerDecoderLayer", shape + f" S={T}",
               TARGETS["module"],
               ours=lambda: dec(x, memory, tgt_is_causal=True),
               ref=lambda: dec_ref(x, memory, tgt_mask=causal, tgt_is_causal=True),
               leaves=[x, memory, *dec.parameters(), *dec_ref.parameters()], modules=[dec, dec_ref])


def _recurrent_pairs(s: dict, device) -> Iterator[Pair]:
    from .rnn import GRU, LSTM, RNN

    B, T, D, H = s["B"], s["T"], s["D"], s["H"]
    x = _randn(B, T, D, device=device)
    shape = f"B={B} T={T} in={D} hidden={H}"
    for ours_cls, torch_cls in ((RNN, nn.RNN), (GRU, nn.GRU), (LSTM, nn.LSTM)):
        ref = torch_cls(D, H, batch_first=True).to(device)
        for fast in (True, False):
            ours = ours_cls.from_torch(ref, fast=fast)
            yield Pair("recurrent", f"{ours_cls.__name__} fast={fast}", f"nn.{torch_cls.__name__}", shape,
                       TARGETS["fast path"] if fast else None,
                       ours=lambda m=ours: m(x), ref=lambda m=ref: m(x),
                       leaves=[x, *ours.parameters(), *ref.parameters()], modules=[ours, ref])


def _vsa_pairs(s: dict, device) -> Iterator[Pair]:
    """Three rows per FHRR operation. The target row times our phasor fast path (``bind_phasor``, ...)
    against torch-hd, both on stored complex phasors: the like-for-like comparison. Two rows to read:
    our readable functions (angles in, angles out) against torch-hd on phasors, and against torch-hd
    wrapped to take and return angles (the same function as ours); ``vsa_attention(fast=True)`` too."""
    from . import vsa

    B, T, D = s["B"], s["T"], s["D"]
    shape = f"B={B} T={T} D={D}"
    g = torch.Generator().manual_seed(0)
    a, b, c = (vsa.random_symbols(B * T, D, generator=g).view(B, T, D).to(device).requires_grad_()
               for _ in range(3))
    ours = {  # the readable functions: angles in, angles out
        "bind": lambda: vsa.bind(a, b),
        "bundle": lambda: vsa.bundle(a, dim=-2),
        "similarity pairwise": lambda: vsa.similarity(a, b, pairwise=True),
        "vsa_attention": lambda: vsa.vsa_attention(a, b, c),
    }
    fast_names = {"bind": "bind_phasor", "bundle": "bundle_phasor", "similarity pairwise":
                  "similarity_phasor pairwise", "vsa_attention": "vsa_attention_phasor"}
    shapes = {"bind": shape, "bundle": shape + " (bundle T)", "similarity pairwise": shape + " (T x T)",
              "vsa_attention": shape}
    try:
        import torchhd
    except ImportError:
        why = "torch-hd is not installed (pip install torch-hd, or seqbook[bench])"
        for op in ours:
            yield Pair("vsa", f"FHRR {fast_names[op]}", "torch-hd", shapes[op], TARGETS["torch-hd"], skip=why)
            for ref in ("torch-hd", "torch-hd, angles in/out"):
                yield Pair("vsa", f"FHRR {op}", ref, shapes[op], None, skip=why)
        yield Pair("vsa", "FHRR vsa_attention fast=True", "torch-hd, angles in/out", shape, None, skip=why)
        return

    def phasors(x):  # exp(i pi x): torch-hd's FHRR stores these complex numbers
        return torch.polar(torch.ones_like(x), math.pi * x).as_subclass(torchhd.FHRRTensor)

    A, Bh, C = (phasors(t.detach()).requires_grad_() for t in (a, b, c))
    Az, Bz, Cz = (vsa.to_phasor(t.detach()).requires_grad_() for t in (a, b, c))  # ours: plain complex

    def hd_attention(q, k, v):  # Eqn. 6 in torch-hd's operations: similarities weigh the values
        scores = torchhd.dot_similarity(q, k) / q.shape[-1]  # (B, T, T), real
        return torch.matmul(scores.to(v.dtype), v)  # (B, T, D), complex

    fast = {  # our fast path on stored phasors
        "bind": (lambda: vsa.bind_phasor(Az, Bz), [Az, Bz]),
        "bundle": (lambda: vsa.bundle_phasor(Az), [Az]),
        "similarity pairwise": (lambda: vsa.similarity_phasor(Az, Bz, pairwise=True), [Az, Bz]),
        "vsa_attention": (lambda: vsa.vsa_attention_phasor(Az, Bz, Cz), [Az, Bz, Cz]),
    }
    native = {  # torch-hd on stored phasors
        "bind": (lambda: torchhd.bind(A, Bh), [A, Bh]),
        "bundle": (lambda: torchhd.multibundle(A), [A]),
        "similarity pairwise": (lambda: torchhd.dot_similarity(A, Bh) / D, [A, Bh]),
        "vsa_attention": (lambda: hd_attention(A, Bh, C), [A, Bh, C]),
    }
    angle = {  # the same function as ours: angles in, angles out
        "bind": lambda: torch.angle(torchhd.bind(phasors(a), phasors(b))) / math.pi,
        "bundle": lambda: torch.angle(torchhd.multibundle(phasors(a))) / math.pi,
        "similarity pairwise": lambda: torchhd.dot_similarity(phasors(a), phasors(b)) / D,
        "vsa_attention": lambda: torch.angle(hd_attention(phasors(a), phasors(b), phasors(c))) / math.pi,
    }
    for op, fn in ours.items():
        ref_fn, ref_leaves = native[op]
        fast_fn, fast_leaves = fast[op]
        yield Pair("vsa", f"FHRR {fast_names[op]}", "torch-hd", shapes[op], TARGETS["torch-hd"], ours=fast_fn,
                   ref=ref_fn, leaves=[*fast_leaves, *ref_leaves])
        yield Pair("vsa", f"FHRR {op}", "torch-hd", shapes[op], None, ours=fn, ref=ref_fn,
                   leaves=[a, b, c, *ref_leaves])
        yield Pair("vsa", f"FHRR {op}", "torch-hd, angles in/out", shapes[op], None, ours=fn, ref=angle[op],
                   leaves=[a, b, c])
    yield Pair("vsa", "FHRR vsa_attention fast=True", "torch-hd, angles in/out", shape, None,
               ours=lambda: vsa.vsa_attention(a, b, c, fast=True), ref=angle["vsa_attention"],
               leaves=[a, b, c])


def _hopfield_pairs(s: dict, device) -> Iterator[Pair]:
    P, Q, d = s["P"], s["Q"], s["d"]
    shape = f"P={P} Q={Q} d={d}"
    name, ref_name = f"retrieve, {Q} queries at once", "retrieve, one query at a time"
    try:
        retrieve = importlib.import_module("seqbook.hopfield").retrieve
    except (ImportError, AttributeError) as err:
        yield Pair("hopfield", name, ref_name, shape, skip=f"seqbook.hopfield.retrieve is missing ({err})")
        return
    patterns = _randn(P, d, device=device)
    queries = _randn(Q, d, device=device)
    beta = 1.0 / math.sqrt(d)
    yield Pair("hopfield", name, ref_name, shape, None,
               ours=lambda: retrieve(patterns, queries, beta),
               ref=lambda: torch.stack([retrieve(patterns, q, beta) for q in queries]),
               leaves=[patterns, queries])


_BUILDERS = {"attention": ("attn", _attention_pairs), "transformer": ("attn", _transformer_pairs),
             "recurrent": ("rnn", _recurrent_pairs), "vsa": ("vsa", _vsa_pairs),
             "hopfield": ("hopfield", _hopfield_pairs)}


def pairs(size: str, device: torch.device | str = "cpu", groups=GROUPS) -> Iterator[Pair]:
    """Every pair of ``groups`` at ``size`` ("book", "4x" or "smoke"), built on ``device``."""
    device = torch.device(device)
    for group in groups:
        key, build = _BUILDERS[group]
        torch.manual_seed(0)
        yield from build(SIZES[size][key], device)


# ---------------------------------------------------------------------------------------------
# Running the pairs.
# ---------------------------------------------------------------------------------------------


def _set_mode(modules: list[nn.Module], train: bool) -> None:
    for m in modules:
        m.train(train)


def run_pairs(sizes=("book", "4x"), device="cpu", groups=GROUPS, repeats: int = 11, warmup: int = 2,
              budget_s: float = 1.0, log: Callable[[str], None] | None = None,
              clock: Callable[[], float] = time.perf_counter) -> list[dict]:
    """Time every pair at every size, forward and forward+backward; one dict per row (see the module doc)."""
    device = torch.device(device)
    sync = _sync_for(device)
    rows = []
    for size in sizes:
        for pair in pairs(size, device, groups):
            for backward in (False, True):
                row = {"group": pair.group, "name": pair.name, "reference": pair.reference, "size": size,
                       "shape": pair.shape, "pass": "forward+backward" if backward else "forward",
                       "target": pair.target if backward and size != "smoke" else None,
                       "ours_ms": None, "ref_ms": None, "ratio": None, "meets": None,
                       "status": "ok", "note": ""}
                if pair.skip:
                    row.update(status="skipped", note=pair.skip)
                else:
                    try:
                        _set_mode(pair.modules, backward)
                        fns = [_runner(f, pair.leaves, backward) for f in (pair.ours, pair.ref)]
                        ours, ref = measure(fns, sync, repeats, warmup, budget_s=budget_s, clock=clock)
                    except Exception as err:  # a broken pair is reported, and makes main() fail
                        row.update(status="error", note=f"{type(err).__name__}: {err}")
                    else:
                        ratio = ours["ms"] / ref["ms"]
                        row.update(ours_ms=ours["ms"], ref_ms=ref["ms"], ratio=ratio,
                                   ratio_of_minima=ours["min_ms"] / ref["min_ms"], samples=ours["samples"],
                                   number=ours["number"])
                        if row["target"] is not None:
                            row["meets"] = ratio <= row["target"]
                rows.append(row)
                if log:
                    log(_format_row(row))
    return rows


# Time against sequence length (forward+backward): the readable code, the fast paths and the built-ins.
SCALING_LENGTHS = (16, 32, 64, 128, 256, 512, 1024)
SCALING_SIZES = {"attention": dict(B=4, E=128, H=4), "recurrent": dict(B=4, D=32, H=128)}


def _scaling_series(group: str, T: int, device) -> dict[str, tuple[Callable[[], object], list, list]]:
    """name -> (forward closure, leaves, modules) for one sequence length."""
    torch.manual_seed(0)
    if group == "attention":
        from .attention import MultiHeadAttention, scaled_dot_product_attention

        s = SCALING_SIZES["attention"]
        B, E, H = s["B"], s["E"], s["H"]
        q, k, v = (_randn(B, H, T, E // H, device=device) for _ in range(3))
        x = _randn(B, T, E, device=device)
        ref = nn.MultiheadAttention(E, H, batch_first=True).to(device)
        ours = MultiHeadAttention.from_torch(ref, fast=True)
        mha_leaves = [x, *ours.parameters(), *ref.parameters()]
        return {
            "scaled_dot_product_attention (readable)": (lambda: scaled_dot_product_attention(q, k, v),
                                                        [q, k, v], []),
            "F.scaled_dot_product_attention": (lambda: F.scaled_dot_product_attention(q, k, v),
                                               [q, k, v], []),
            "MultiHeadAttention fast=True": (lambda: ours(x, x, x, need_weights=False), mha_leaves, [ours]),
            "nn.MultiheadAttention": (lambda: ref(x, x, x, need_weights=False), mha_leaves, [ref]),
        }
    from .rnn import GRU, LSTM, RNN

    s = SCALING_SIZES["recurrent"]
    B, D, H = s["B"], s["D"], s["H"]
    x = _randn(B, T, D, device=device)
    series = {}
    for ours_cls, torch_cls in ((RNN, nn.RNN), (GRU, nn.GRU), (LSTM, nn.LSTM)):
        ref = torch_cls(D, H, batch_first=True).to(device)
        fast, slow = ours_cls.from_torch(ref, fast=True), ours_cls.from_torch(ref, fast=False)
        name = ours_cls.__name__
        series[f"{name} (readable)"] = (lambda m=slow: m(x), [x, *slow.parameters()], [slow])
        series[f"{name} fast=True"] = (lambda m=fast: m(x), [x, *fast.parameters()], [fast])
        series[f"nn.{torch_cls.__name__}"] = (lambda m=ref: m(x), [x, *ref.parameters()], [ref])
    return series


def run_scaling(lengths=SCALING_LENGTHS, device="cpu", repeats: int = 5, warmup: int = 1,
                budget_s: float = 1.0, log: Callable[[str], None] | None = None,
                clock: Callable[[], float] = time.perf_counter) -> dict:
    """Forward+backward time (ms) of every series at every length, for the log-log figure."""
    device = torch.device(device)
    sync = _sync_for(device)
    out = {}
    for group in ("attention", "recurrent"):
        res = {"lengths": list(lengths), "sizes": SCALING_SIZES[group], "pass": "forward+backward",
               "series": {}}
        for T in lengths:
            series = _scaling_series(group, T, device)
            for _, _, modules in series.values():
                _set_mode(modules, True)
            fns = [_runner(fn, leaves, True) for fn, leaves, _ in series.values()]
            times = measure(fns, sync, repeats, warmup, budget_s=budget_s, clock=clock)
            for name, t in zip(series, times, strict=True):
                res["series"].setdefault(name, []).append(t["ms"])
            if log:
                log(f"  scaling {group:<9} T={T:<5} " + "  ".join(f"{t['ms']:.3g}" for t in times) + " ms")
        out[group] = res
    return out


# ---------------------------------------------------------------------------------------------
# Where the numbers come from, and how they are shown.
# ---------------------------------------------------------------------------------------------


def _nvidia_driver() -> str | None:
    """The NVIDIA driver's version, as nvidia-smi reports it (None without nvidia-smi)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def machine_info(device: torch.device | str = "cpu") -> dict:
    """The machine and software a result came from."""
    device = torch.device(device)
    info = {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "device": device.type,
        "cpu": cpu_name(),
        "logical_cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info["gpu"] = torch.cuda.get_device_name(device)
        info["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
        info["gpu_multiprocessors"] = props.multi_processor_count
        info["cuda"] = torch.version.cuda
        info["cudnn"] = torch.backends.cudnn.version()
        info["driver"] = _nvidia_driver()
    try:
        import torchhd
        info["torchhd"] = getattr(torchhd, "__version__", "installed")
    except ImportError:
        info["torchhd"] = None
    return info


def _fmt(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def _format_row(r: dict) -> str:
    verdict = "" if r["meets"] is None else ("ok" if r["meets"] else "MISS")
    if r["status"] != "ok":
        verdict = r["status"]
    return (f"{r['group']:<11} {r['name']:<38} {r['reference']:<34} {r['size']:<5} {r['pass']:<16} "
            f"{_fmt(r['ours_ms'], '9.3f')} {_fmt(r['ref_ms'], '9.3f')} {_fmt(r['ratio'], '6.2f')} "
            f"{_fmt(r['target'], '6.1f')} {verdict}")


def format_table(result: dict) -> str:
    """The text table of a result of :func:`main`: machine, then one line per row, then the shapes."""
    m = result["meta"]
    lines = [
        f"seqbook benchmark on {m['device']}: {m['cpu']}, {m['torch_threads']} torch thread(s) of "
        f"{m['logical_cpus']} logical CPUs, torch {m['torch']}, torch-hd {m['torchhd'] or 'not installed'}",
        f"{m['date']}; load average at start {m['load_average']}; command: {m['command']}",
        f"times are medians in ms per call ({m.get('clock', 'wall')} clock); ratio = ours / reference; "
        "the target applies to forward+backward",
        "",
        f"{'group':<11} {'ours':<38} {'reference':<34} {'size':<5} {'pass':<16} "
        f"{'ours ms':>9} {'ref ms':>9} {'ratio':>6} {'target':>6}",
    ]
    lines += [_format_row(r) for r in result["rows"]]
    shapes = {}
    for r in result["rows"]:
        shapes.setdefault((r["size"], r["group"], r["name"]), r["shape"])
    lines += ["", "shapes:"]
    lines += [f"  {size:<5} {name:<38} {shape}" for (size, _, name), shape in shapes.items()]
    notes = sorted({r["note"] for r in result["rows"] if r["note"]})
    if notes:
        lines += ["", "notes:"] + [f"  {n}" for n in notes]
    if "scaling" in result:
        for group, res in result["scaling"].items():
            lines += ["", f"scaling, {group}, {res['pass']} ms, sizes {res['sizes']}",
                      f"  {'T':<40}" + "".join(f"{T:>9}" for T in res["lengths"])]
            lines += [f"  {name:<40}" + "".join(f"{t:9.3g}" for t in ms)
                      for name, ms in res["series"].items()]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# The book, notebook by notebook.
# ---------------------------------------------------------------------------------------------


def time_notebooks(notebooks: list[Path], timeout: int = 3600, kernel_name: str = "python3",
                   log: Callable[[str], None] | None = None) -> list[dict]:
    """Execute each notebook top to bottom in a fresh kernel (nbconvert's ExecutePreprocessor) and
    record its wall time and the CPU time of its kernel. Nothing is written back to the notebooks.

    The kernels inherit this process's environment; ``SEQBOOK_DATA`` defaults to ``../shared/data``
    beside the project (as under pytest) and ``TQDM_DISABLE`` to 1.
    """
    import nbformat
    from nbconvert.preprocessors import CellExecutionError, ExecutePreprocessor

    shared = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
    if "SEQBOOK_DATA" not in os.environ and shared.is_dir():
        os.environ["SEQBOOK_DATA"] = str(shared)
    os.environ.setdefault("TQDM_DISABLE", "1")
    results = []
    for path in notebooks:
        path = Path(path)
        nb = nbformat.read(path, as_version=4)
        ep = ExecutePreprocessor(timeout=timeout, kernel_name=kernel_name)
        cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        status, note = "ok", ""
        try:
            ep.preprocess(nb, {"metadata": {"path": str(path.parent)}})
        except CellExecutionError as err:
            status, note = "error", str(err).strip().splitlines()[-1][:200]
        wall = time.perf_counter() - t0
        cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)  # the finished kernel
        cells = sum(c.cell_type == "code" for c in nb.cells)
        results.append({"notebook": path.name, "wall_s": round(wall, 1), "kernel_cpu_s": round(cpu, 1),
                        "cells": cells, "status": status, "note": note})
        if log:
            log(f"{path.name:<32} {wall:8.1f} s wall {cpu:8.1f} s kernel CPU  {status} {note}")
    return results


# ---------------------------------------------------------------------------------------------
# The command line.
# ---------------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m seqbook.bench", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    p.add_argument("--smoke", action="store_true",
                   help="tiny sizes, one repeat, no warm-up: checks that it runs")
    p.add_argument("--sizes", choices=("book", "4x", "all"), default="all", help="which sizes (default all)")
    p.add_argument("--groups", nargs="+", choices=GROUPS, default=list(GROUPS),
                   help="which pairs (default all)")
    p.add_argument("--scaling", action="store_true",
                   help="also time against sequence length (the log-log figure)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch.set_num_threads (default 1: steadier on a shared machine; 0 keeps torch's)")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="wall time (default), or this process's CPU time: steadier on a busy machine, "
                        "meaningful with --threads 1 on the CPU only")
    p.add_argument("--repeats", type=int, default=11, help="samples per timing, at most (default 11)")
    p.add_argument("--out", type=Path, default=None,
                   help="folder for <device>.txt and <device>.json (<device>-smoke.* with --smoke)")
    p.add_argument("--notebooks", nargs="*", type=Path, default=None, metavar="NOTEBOOK",
                   help="instead: execute these notebooks (default chapters/*.ipynb) and record their time")
    p.add_argument("--quiet", action="store_true", help="do not print rows as they are measured")
    return p


def main(argv: list[str] | None = None) -> dict:
    """Parse ``argv``, run, print the table, write ``--out``; returns the result dict."""
    args = _parser().parse_args(argv)
    threads = torch.get_num_threads()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    try:
        return _main(args, argv)
    finally:
        torch.set_num_threads(threads)  # leave the caller's setting as it was


def _main(args: argparse.Namespace, argv: list[str] | None) -> dict:
    log = None if args.quiet else (lambda s: print(s, flush=True))
    command = "python -m seqbook.bench " + " ".join(sys.argv[1:] if argv is None else argv)
    t0 = time.perf_counter()

    if args.notebooks is not None:
        root = Path(__file__).resolve().parent.parent
        notebooks = args.notebooks or sorted((root / "chapters").glob("[0-9]*.ipynb"))
        rows = time_notebooks(notebooks, log=log)
        meta = {**machine_info("cpu"), "command": command}
        meta["torch_threads"] = "PyTorch's default, in each notebook's own kernel"
        result = {"meta": meta, "notebooks": rows,
                  "total_wall_s": round(sum(r["wall_s"] for r in rows), 1)}
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "notebooks.json").write_text(json.dumps(result, indent=1) + "\n")
        if any(r["status"] != "ok" for r in rows):
            raise SystemExit(1)
        return result

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is available")
    if args.clock == "cpu" and (device.type != "cpu" or torch.get_num_threads() != 1):
        raise SystemExit("--clock cpu measures CPU time: use it with --device cpu --threads 1")
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    if args.smoke:
        sizes, repeats, warmup, budget = ("smoke",), 1, 0, 0.0
    else:
        sizes = ("book", "4x") if args.sizes == "all" else (args.sizes,)
        repeats, warmup, budget = args.repeats, 2, 1.0
    result = {"meta": {**machine_info(device), "command": command, "clock": args.clock, "sizes": list(sizes),
                       "sizes_detail": {s: SIZES[s] for s in sizes}, "targets": TARGETS}}
    result["rows"] = run_pairs(sizes, device, args.groups, repeats, warmup, budget, log, clock)
    if args.scaling:
        lengths = (4, 8) if args.smoke else SCALING_LENGTHS
        result["scaling"] = run_scaling(lengths, device, repeats=1 if args.smoke else 5,
                                        warmup=warmup and 1, budget_s=budget, log=log, clock=clock)
    result["meta"]["elapsed_s"] = round(time.perf_counter() - t0, 1)
    table = format_table(result)
    print(table)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        stem = device.type + ("-smoke" if args.smoke else "")
        (args.out / f"{stem}.txt").write_text(table)
        (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n")
    if any(r["status"] == "error" for r in result["rows"]):
        raise SystemExit(1)
    return result


if __name__ == "__main__":
    main()
