"""Training throughput and MFU of the chapter-6 GPT scaled to GPT-2-small, on one GPU.

The model is :class:`seqbook.transformer.GPT` at GPT-2-small size (12 layers, width 768, 12 heads,
context 1024, GPT-2's vocabulary padded to 50304), trained on random tokens (throughput does not
depend on the data) with AdamW, bf16 autocast, ``F.scaled_dot_product_attention`` (the model's
``fast=True`` path) and ``torch.compile``.

MFU (model FLOPs utilisation, Chowdhery et al., 2022) counts the FLOPs the model needs per token,
as nanoGPT does: 6 N for the matrix products of the forward and backward passes (N: parameters
without the position table) plus 12 L T D for attention (L layers, context T, width D), times the
tokens per second, divided by the GPU's dense bf16 peak (989.4 TFLOP/s for an H100 SXM).

Run it from the root of the repository::

    python -m benchmarks.gpu.gpt_throughput --device cuda --json perf/gpt.json --merge-into perf/cuda.json
    python -m benchmarks.gpu.gpt_throughput --dry        # a toy model on the CPU: checks the script
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from benchmarks.report import machine_info
from seqbook.transformer import GPT, GPTConfig

# Dense (no sparsity) bf16 tensor-core peaks in TFLOP/s, from NVIDIA's data sheets.
PEAK_BF16_TFLOPS = {"H100 80GB HBM3": 989.4, "H100 SXM": 989.4, "H100 PCIe": 756.0, "H100 NVL": 835.0,
                    "H200": 989.4, "A100": 312.0}


def peak_tflops(name: str) -> float | None:
    for key, value in PEAK_BF16_TFLOPS.items():
        if key in name:
            return value
    return None


def flops_per_token(model: GPT) -> float:
    c = model.config
    n = sum(p.numel() for p in model.parameters())
    if hasattr(model, "pos_emb"):  # a table lookup, no matrix product
        n -= model.pos_emb.weight.numel()
    return 6 * n + 12 * c.n_layer * c.block_size * c.n_embd


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--batch", type=int, default=16, help="sequences per step")
    p.add_argument("--steps", type=int, default=300, help="timed steps")
    p.add_argument("--warmup", type=int, default=20, help="untimed steps first (compilation)")
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--compile-mode", default=None,
                   help="torch.compile mode, e.g. max-autotune-no-cudagraphs (default: PyTorch's default)")
    p.add_argument("--profile", action="store_true", help="print where the time of a few steps goes")
    p.add_argument("--dry", action="store_true", help="toy size on the CPU, to test the script")
    p.add_argument("--json", type=Path, default=None, help="write the result here")
    p.add_argument("--merge-into", type=Path, default=None,
                   help="also add the result to this JSON file (e.g. perf/cuda.json) as 'gpt' and 'mfu'")
    args = p.parse_args(argv)

    if args.dry:
        config = GPTConfig(vocab_size=256, block_size=64, n_layer=2, n_head=2, n_embd=64, dropout=0.0)
        args.device, args.batch, args.steps, args.warmup, args.no_compile = "cpu", 4, 3, 1, True
    else:
        config = GPTConfig(vocab_size=50304, block_size=1024, n_layer=12, n_head=12, n_embd=768,
                           dropout=0.0, bias=True, tie_weights=True)
    device = torch.device(args.device)
    torch.manual_seed(0)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # only matters outside autocast
        torch.backends.cudnn.allow_tf32 = True
    model = GPT(config).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1,
                                  fused=device.type == "cuda")
    step_model = model if args.no_compile else torch.compile(model, mode=args.compile_mode)
    amp = torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")
    gen = torch.Generator(device=device).manual_seed(0)

    def batch():
        shape = (args.batch, config.block_size + 1)
        x = torch.randint(config.vocab_size, shape, device=device, generator=gen)
        return x[:, :-1], x[:, 1:]

    def step():
        x, y = batch()
        with amp:
            _, loss = step_model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    t0 = time.perf_counter()
    try:
        for _ in range(args.warmup):
            loss = step()
    except Exception as exc:  # noqa: BLE001 - a compiler that fails here should not cost the measurement
        if args.no_compile:
            raise
        print(f"torch.compile failed ({type(exc).__name__}: {exc}); measuring without it", flush=True)
        args.no_compile, step_model = True, model
        for _ in range(args.warmup):
            loss = step()
    sync()
    warmup_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    sync()
    seconds = time.perf_counter() - t0

    if args.profile:  # the kernels that take the time, over 5 steps
        from torch.profiler import ProfilerActivity, profile
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        with profile(activities=activities) as prof:
            for _ in range(5):
                step()
            sync()
        key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
        print(prof.key_averages().table(sort_by=key, row_limit=25, max_name_column_width=60), flush=True)

    tokens_per_s = args.steps * args.batch * config.block_size / seconds
    achieved = flops_per_token(model) * tokens_per_s / 1e12
    info = machine_info(device)
    peak = peak_tflops(info.get("gpu", "")) if device.type == "cuda" else None
    result = {
        "model": {"n_layer": config.n_layer, "n_head": config.n_head, "n_embd": config.n_embd,
                  "block_size": config.block_size, "vocab_size": config.vocab_size,
                  "parameters": sum(p.numel() for p in model.parameters())},
        "batch": args.batch, "steps": args.steps, "warmup_steps": args.warmup, "warmup_s": round(warmup_s, 1),
        "compiled": not args.no_compile,
        "compile_mode": None if args.no_compile else args.compile_mode,
        "autocast": "bf16" if device.type == "cuda" else None,
        "attention": "F.scaled_dot_product_attention",
        "ms_per_step": round(1000 * seconds / args.steps, 2),
        "tokens_per_s": round(tokens_per_s),
        "flops_per_token": flops_per_token(model),
        "achieved_tflops": round(achieved, 1),
        "peak_bf16_tflops": peak,
        "mfu": round(achieved / peak, 4) if peak else None,
        "final_loss": round(float(loss.detach()), 3),
        "max_memory_gib": (round(torch.cuda.max_memory_allocated() / 2**30, 1)
                           if device.type == "cuda" else None),
        "meta": info,
    }
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    if args.merge_into and args.merge_into.exists():
        merged = json.loads(args.merge_into.read_text())
        merged["gpt"] = {k: v for k, v in result.items() if k != "meta"}
        merged["mfu"] = result["mfu"]
        args.merge_into.write_text(json.dumps(merged, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
