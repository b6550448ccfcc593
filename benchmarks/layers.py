"""The pairs: each of seqbook's layers and the reference it is meant to equal, built at a set of sizes
and timed side by side.

Every *pair* times one of our implementations ("ours") and the reference it is meant to equal, in the
same process, at the same sizes, interleaved sample by sample (ours, ref, ref, ours, ...), so a machine
that gets busier or quieter during the run shifts both alike and their ratio stays meaningful. A pair
is timed for the forward pass (``torch.no_grad()``, modules in eval mode, which lets PyTorch's modules
take their inference fast paths) and for forward + backward (training mode, inputs and parameters
requiring gradients, ``out.sum().backward()``). A timing is the median over samples taken after a
warm-up; one sample runs the function ``number`` times, enough to last a couple of milliseconds
(:func:`benchmarks.timing.measure`).

Sizes: ``book`` are the sizes the chapters train with (per call of the layer); ``4x`` runs sequences
four times longer at the same number of tokens per batch (batch / 4) for the sequence models, four
times the symbol dimension for FHRR, and four times the memory and the queries for Hopfield retrieval.

Targets (CPU, ours / reference, forward + backward, book and 4x): a fast path (``fast=True``) at most
1.1x its built-in; ``MultiHeadAttention`` and the transformer layers at most 1.2x; the FHRR operations
no slower than torch-hd (1.0x), like for like: our phasor fast path (``seqbook.vsa.bind_phasor``, ...)
against torch-hd's operations, both on stored complex phasors. Rows without a target are there to be
read, not judged: the readable step-by-step code against the fused kernels (or torch-hd), or Hopfield's
batched retrieval against a loop over queries.

The torch-hd rows need the optional benchmark extra (``pip install -e ".[bench]"``, which adds
``torch-hd``); without it they are reported as skipped.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from seqbook import vsa
from seqbook.attention import MultiHeadAttention, scaled_dot_product_attention
from seqbook.hopfield import retrieve
from seqbook.rnn import GRU, LSTM, RNN
from seqbook.transformer import DecoderLayer, EncoderLayer

from .report import format_row
from .timing import measure, runner, set_mode, sync_for

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


# ---------------------------------------------------------------------------------------------
# The pairs.
# ---------------------------------------------------------------------------------------------


def random_input(*shape, device, grad=True) -> torch.Tensor:
    """A standard normal tensor on ``device`` that requires gradients (an input, or a leaf to time)."""
    return torch.randn(*shape, device=device).requires_grad_(grad)


def _attention_pairs(s: dict, device) -> Iterator[Pair]:
    B, T, E, H = s["B"], s["T"], s["E"], s["H"]
    Dh = E // H
    q, k, v = (random_input(B, H, T, Dh, device=device) for _ in range(3))
    shape = f"B={B} H={H} T={T} d={Dh}"
    for causal in (False, True):
        label = " causal" if causal else ""
        yield Pair("attention", f"scaled_dot_product_attention{label}",
                   f"F.scaled_dot_product_attention{label}", shape, None,
                   ours=lambda c=causal: scaled_dot_product_attention(q, k, v, is_causal=c),
                   ref=lambda c=causal: F.scaled_dot_product_attention(q, k, v, is_causal=c),
                   leaves=[q, k, v])

    x = random_input(B, T, E, device=device)
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
    B, T, E, H = s["B"], s["T"], s["E"], s["H"]
    x, memory = random_input(B, T, E, device=device), random_input(B, T, E, device=device)
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
    B, T, D, H = s["B"], s["T"], s["D"], s["H"]
    x = random_input(B, T, D, device=device)
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
    patterns = random_input(P, d, device=device)
    queries = random_input(Q, d, device=device)
    beta = 1.0 / math.sqrt(d)
    yield Pair("hopfield", f"retrieve, {Q} queries at once", "retrieve, one query at a time",
               f"P={P} Q={Q} d={d}", None,
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


def run_pairs(sizes=("book", "4x"), device="cpu", groups=GROUPS, repeats: int = 11, warmup: int = 2,
              budget_s: float = 1.0, log: Callable[[str], None] | None = None,
              clock: Callable[[], float] = time.perf_counter) -> list[dict]:
    """Time every pair at every size, forward and forward+backward; one dict per row (see the module doc)."""
    device = torch.device(device)
    sync = sync_for(device)
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
                        set_mode(pair.modules, backward)
                        fns = [runner(f, pair.leaves, backward) for f in (pair.ours, pair.ref)]
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
                    log(format_row(row))
    return rows

