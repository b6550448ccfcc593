"""Long sequences on one GPU: attention against its linear-time rivals, and generation with a KV cache.

Three measurements, written to one JSON file:

1. ``--layers``: forward and forward+backward time against sequence length T (up to 16k tokens) of
   PyTorch's fused ``F.scaled_dot_product_attention`` (causal), the readable softmax attention of
   chapter 5, the tiled online-softmax attention, causal linear attention (parallel and recurrent
   forms), the gated linear recurrence (sequential loop, doubling, work-efficient and log-space
   scans), Mamba's selective SSM block and the Mamba-2 block by chunks. One sequence of
   GPT-2-small's shape: 12 heads of 64 dims, width 768. A size that does not fit in memory (or
   takes too long) is recorded as skipped, with the reason.
2. ``--generation``: time per generated token against the context length, with and without the KV
   cache, for the GPT of chapter 6 at GPT-2-small size (rotary positions, so the context can be
   long), and the cache's memory against the formula 2 * n_layer * B * T * D numbers.
3. ``--gqa``: time per generated token against the context length for chapter 6's Llama-style model
   (``seqbook.llama``) at GPT-2-small size with 1, 2, 4 and 12 key/value heads for its 12 query
   heads, the caches filled with random keys and values, beside the bytes each token reads from the
   cache (2 * n_layer * T * n_kv_head * D_h numbers): grouped-query attention's bandwidth argument,
   as the chapter measures it on a CPU.

Every result records the commit of the code it measured (``meta.commit``). Run it from the root of
the repository::

    python -m benchmarks.gpu.long_context --device cuda --json perf/long_context.json
    python -m benchmarks.gpu.long_context --dry          # toy sizes on the CPU: checks the script
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.report import finish
from benchmarks.timing import measure, sync_for, time_row
from seqbook.attention import scaled_dot_product_attention
from seqbook.gpt import GPT, GPTConfig
from seqbook.kv_cache import KVCache
from seqbook.llama import Llama, LlamaConfig
from seqbook.utils import set_fast


def timed(fn, device: torch.device, repeats: int) -> float:
    """Median milliseconds per call of ``fn()``: the harness's own :func:`benchmarks.timing.measure`,
    which waits for the device around every sample."""
    return measure([fn], sync_for(device), repeats=repeats, warmup=1)[0]["ms"]


def layer_candidates(H: int, Dh: int, D: int, dry: bool):
    """(name, dtype, longest T worth timing, make inputs, function) for every computation timed."""
    long = 10**9
    slow = 64 if dry else 4096  # Python loops over time steps: the shape of the curve is enough
    rows = [
        ("F.scaled_dot_product_attention (causal)", torch.bfloat16, long, "qkv",
         lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)),
        ("readable softmax attention (ch. 5)", torch.bfloat16, long, "qkv",
         lambda q, k, v: scaled_dot_product_attention(q, k, v, is_causal=True)[0]),
    ]
    try:
        from seqbook import online_softmax
        rows.append(("tiled online-softmax attention", torch.bfloat16, long, "qkv",
                     lambda q, k, v: online_softmax.tiled_attention(q, k, v, tile_size=128,
                                                                    causal=True)))
    except (ImportError, AttributeError):
        pass
    try:
        from seqbook import linear_attention as la
        rows.append(("linear attention, parallel (causal)", torch.bfloat16, long, "qkv",
                     lambda q, k, v: la.linear_attention(q, k, v, causal=True)))
        rows.append(("linear attention, recurrent", torch.float32, slow, "qkv",
                     lambda q, k, v: la.linear_attention_recurrent(q, k, v)))
    except (ImportError, AttributeError):
        pass
    try:
        from seqbook import scan
        rows.append(("gated recurrence, sequential loop", torch.float32, slow, "ab",
                     lambda a, b: scan.linear_recurrence(a, b)))
        rows.append(("gated recurrence, parallel scan", torch.float32, long, "ab",
                     lambda a, b: scan.parallel_scan(a, b)))
        rows.append(("gated recurrence, log-space scan", torch.float32, long, "ab",
                     lambda a, b: scan.log_space_scan(a.log(), b)))
        rows.append(("gated recurrence, work-efficient scan", torch.float32, long, "ab",
                     lambda a, b: scan.blelloch_scan(a, b)))
    except (ImportError, AttributeError):
        pass
    try:
        from seqbook import ssm
        rows.append(("Mamba block, parallel scan", torch.float32, long, "x",
                     ssm.MambaBlock(D, d_state=16)))
        rows.append(("Mamba block, sequential scan", torch.float32, slow, "x",
                     ssm.MambaBlock(D, d_state=16, scan="loop")))
        rows.append(("Mamba-2 block, chunks of 64", torch.float32, long, "x",
                     ssm.Mamba2Block(D, d_state=64, head_dim=64 if D % 64 == 0 else D,
                                     chunk_size=64)))
    except (ImportError, AttributeError, TypeError):
        pass
    return rows


def make_inputs(kind: str, T: int, H: int, Dh: int, D: int, dtype, device) -> list[torch.Tensor]:
    g = torch.Generator(device=device).manual_seed(0)
    if kind == "qkv":
        shape = (1, H, T, Dh)
        return [torch.randn(shape, generator=g, device=device, dtype=dtype).requires_grad_()
                for _ in range(3)]
    if kind == "ab":  # gates in (0, 1) and inputs, width 2 D as in a gated recurrent layer
        a = torch.rand(1, T, 2 * D, generator=g, device=device, dtype=dtype) * 0.5 + 0.5
        b = torch.randn(1, T, 2 * D, generator=g, device=device, dtype=dtype)
        return [a.requires_grad_(), b.requires_grad_()]
    return [torch.randn(1, T, D, generator=g, device=device, dtype=dtype).requires_grad_()]


def run_layers(lengths, device, repeats: int, dry: bool) -> list[dict]:
    H, Dh = (2, 8) if dry else (12, 64)
    D = H * Dh
    rows = []
    for name, dtype, longest, kind, fn in layer_candidates(H, Dh, D, dry):
        if isinstance(fn, torch.nn.Module):
            fn = fn.to(device, dtype)
        for T in lengths:
            row = {"name": name, "T": T, "dtype": str(dtype).replace("torch.", ""),
                   "forward_ms": None, "forward_backward_ms": None, "status": "ok"}
            if T > longest:
                row["status"] = f"skipped: a Python loop over T, timed up to T = {longest}"
                rows.append(row)
                continue

            def build(fn=fn, kind=kind, T=T, dtype=dtype):
                inputs = make_inputs(kind, T, H, Dh, D, dtype, device)
                return (lambda: fn(*inputs)), inputs

            time_row(row, build, device, repeats)
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


@torch.no_grad()
def time_one_context(model: GPT, config: GPTConfig, T: int, B: int, device, repeats: int, dtype,
                     steps: int = 8) -> dict:
    """Milliseconds per generated token after a context of T tokens, without and with the cache."""
    idx = torch.randint(config.vocab_size, (B, T), device=device)
    next_token = idx[:, -1:]
    caches = [KVCache(config.block_size) for _ in model.blocks]
    model(idx, caches=caches)  # the prompt fills the caches once

    def with_cache():  # one new token against the kept keys and values, then forget it
        for _ in range(steps):
            model(next_token, caches=caches)
            for c in caches:
                c.length -= 1

    # without a cache, generate runs the whole context for every token
    ms_without = timed(lambda: model(idx), device, repeats)
    ms_with = timed(with_cache, device, repeats) / steps
    cache_bytes = sum(c.nbytes() for c in caches)
    formula = 2 * config.n_layer * B * config.block_size * config.n_embd * dtype.itemsize
    assert cache_bytes == formula, (cache_bytes, formula)
    return {"context": T, "ms_per_token_without_cache": round(ms_without, 3),
            "ms_per_token_with_cache": round(ms_with, 3), "speedup": round(ms_without / ms_with, 1),
            "cache_bytes_allocated": cache_bytes,
            "cache_bytes_used": cache_bytes * T // config.block_size}


def run_generation(contexts, device, repeats: int, dry: bool) -> dict:
    if dry:
        config = GPTConfig(vocab_size=64, block_size=max(contexts) + 8, n_layer=2, n_head=2, n_embd=16,
                           dropout=0.0, positional="rope")
    else:
        config = GPTConfig(vocab_size=50304, block_size=max(contexts) + 8, n_layer=12, n_head=12,
                           n_embd=768, dropout=0.0, positional="rope")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model = set_fast(GPT(config), True).to(device, dtype).eval()
    B = 1
    rows = []
    for T in contexts:
        row = time_one_context(model, config, T, B, device, repeats, dtype)
        rows.append(row)
        print(json.dumps(row), flush=True)
    return {"model": {"n_layer": config.n_layer, "n_head": config.n_head, "n_embd": config.n_embd,
                      "vocab_size": config.vocab_size, "block_size": config.block_size,
                      "positional": config.positional, "dtype": str(dtype).replace("torch.", ""),
                      "batch": B, "fast": True},
            "rows": rows}


@torch.no_grad()
def run_gqa(contexts, device, repeats: int, dry: bool, steps: int = 8) -> dict:
    """Milliseconds per generated token of a Llama with 1, 2, 4 and all key/value heads."""
    if dry:
        sizes = dict(vocab_size=64, n_layer=2, n_head=4, n_embd=32)
        kv_heads = (1, 2, 4)
    else:
        sizes = dict(vocab_size=50304, n_layer=12, n_head=12, n_embd=768)
        kv_heads = (1, 2, 4, 12)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    D_h = sizes["n_embd"] // sizes["n_head"]
    rows = []
    for n_kv in kv_heads:
        config = LlamaConfig(**sizes, n_kv_head=n_kv, block_size=max(contexts) + steps)
        model = Llama(config).to(device, dtype).eval()
        token = torch.randint(config.vocab_size, (1, 1), device=device)
        for T in contexts:
            caches = [KVCache(T + steps) for _ in model.blocks]
            for c in caches:  # a context of T tokens, already cached (the values do not matter)
                c.append(torch.randn(1, n_kv, T, D_h, device=device, dtype=dtype),
                         torch.randn(1, n_kv, T, D_h, device=device, dtype=dtype))

            def step(caches=caches, model=model, token=token):
                for _ in range(steps):
                    model(token, caches=caches)
                for c in caches:
                    c.length -= steps

            ms = timed(step, device, repeats) / steps
            cache_bytes = sum(c.nbytes() for c in caches)
            assert cache_bytes == 2 * config.n_layer * (T + steps) * n_kv * D_h * dtype.itemsize
            row = {"n_kv_head": n_kv, "context": T, "ms_per_token": round(ms, 4),
                   "cache_bytes_read": 2 * config.n_layer * T * n_kv * D_h * dtype.itemsize}
            rows.append(row)
            print(json.dumps(row), flush=True)
    return {"model": {**sizes, "dtype": str(dtype).replace("torch.", ""), "batch": 1,
                      "attention": "seqbook.llama readable (queries of a group stacked)"},
            "rows": rows}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--layers", action="store_true", help="time against sequence length")
    p.add_argument("--generation", action="store_true", help="time per token with and without cache")
    p.add_argument("--gqa", action="store_true", help="time per token against key/value heads")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--dry", action="store_true", help="toy sizes on the CPU, to test the script")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    if not (args.layers or args.generation or args.gqa):
        args.layers = args.generation = args.gqa = True
    if args.dry:
        args.device, args.repeats = "cpu", 1
        lengths, contexts = [16, 32, 128], [16, 64]
    else:
        lengths = [1024, 2048, 4096, 8192, 16384]
        contexts = [512, 1024, 2048, 4096, 8192, 16384]
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False  # float32 rows are float32
    torch.manual_seed(0)
    t0 = time.perf_counter()
    result = {}
    if args.layers:
        result["layers"] = run_layers(lengths, device, args.repeats, args.dry)
    if args.generation:
        result["generation"] = run_generation(contexts, device, args.repeats, args.dry)
    if args.gqa:
        result["gqa"] = run_gqa(contexts, device, args.repeats, args.dry)
    return finish(result, device, t0, "benchmarks.gpu.long_context", argv, args.json)


if __name__ == "__main__":
    main()
