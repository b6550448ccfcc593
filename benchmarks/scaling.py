"""Time against sequence length (forward + backward): the readable code, the fast paths and the
built-ins, for the attention and recurrent layers, at lengths from 16 to 1024 (the log-log figure of
the Performance appendix)."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from seqbook.attention import MultiHeadAttention, scaled_dot_product_attention
from seqbook.rnn import GRU, LSTM, RNN

from .layers import random_input
from .timing import measure, runner, set_mode, sync_for

SCALING_LENGTHS = (16, 32, 64, 128, 256, 512, 1024)
SCALING_SIZES = {"attention": dict(B=4, E=128, H=4), "recurrent": dict(B=4, D=32, H=128)}


def _scaling_series(group: str, T: int, device) -> dict[str, tuple[Callable[[], object], list, list]]:
    """name -> (forward closure, leaves, modules) for one sequence length."""
    torch.manual_seed(0)
    if group == "attention":
        s = SCALING_SIZES["attention"]
        B, E, H = s["B"], s["E"], s["H"]
        q, k, v = (random_input(B, H, T, E // H, device=device) for _ in range(3))
        x = random_input(B, T, E, device=device)
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
    s = SCALING_SIZES["recurrent"]
    B, D, H = s["B"], s["D"], s["H"]
    x = random_input(B, T, D, device=device)
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
    sync = sync_for(device)
    out = {}
    for group in ("attention", "recurrent"):
        res = {"lengths": list(lengths), "sizes": SCALING_SIZES[group], "pass": "forward+backward",
               "series": {}}
        for T in lengths:
            series = _scaling_series(group, T, device)
            for _, _, modules in series.values():
                set_mode(modules, True)
            fns = [runner(fn, leaves, True) for fn, leaves, _ in series.values()]
            times = measure(fns, sync, repeats, warmup, budget_s=budget_s, clock=clock)
            for name, t in zip(series, times, strict=True):
                res["series"].setdefault(name, []).append(t["ms"])
            if log:
                log(f"  scaling {group:<9} T={T:<5} " + "  ".join(f"{t['ms']:.3g}" for t in times) + " ms")
        out[group] = res
    return out

