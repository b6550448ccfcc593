"""Training throughput and MFU of the chapter-6 GPT scaled to GPT-2-small, on one GPU, beside a peer.

The model is :class:`seqbook.gpt.GPT` at GPT-2-small size (12 layers, width 768, 12 heads,
context 1024, GPT-2's vocabulary padded to 50304), trained on random tokens (throughput does not
depend on the data) with AdamW, bf16 autocast, ``torch.compile`` and the fused attention kernels:
the script switches the model to its fast path (``seqbook.utils.set_fast``) and, before it times
anything, runs one forward pass that fails if any attention of the model runs the readable path
(the package's default since the chapters print it). ``--peer hf`` trains Hugging Face's
``GPT2LMHeadModel`` of the same size (SDPA attention) in the same harness and reports both.

MFU (model FLOPs utilisation, Chowdhery et al., 2022) counts the FLOPs the model needs per token,
as nanoGPT does: 6 N for the matrix products of the forward and backward passes (N: parameters
without the position table) plus 12 L T D for attention (L layers, context T, width D), times the
tokens per second, divided by the GPU's dense bf16 peak (989.4 TFLOP/s for an H100 SXM or H200).
Every result records the commit of the code it measured (``meta.commit``).

``--variants`` measures, in the same run and harness, what could move the MFU (issue: reach 45 %),
each beside the result above: ``native`` (the same function from PyTorch's native layers, the query,
key and value projections packed in one matrix product as in nanoGPT:
``benchmarks.native_gpt.NativeGPT``), ``flash`` (our model with SDPA restricted to the FlashAttention
backend instead of PyTorch's choice, cuDNN's on Hopper), ``autotune`` (our model compiled with
``max-autotune-no-cudagraphs``: Inductor times its own matrix-product kernels against cuBLAS),
``no-clip`` (without the gradient-norm clipping, a reduction over every gradient each step),
``chunked-ce`` (the output layer and the cross-entropy in one pass over slices of the rows, never
writing the whole logits: ``benchmarks.chunked_loss``) and ``cudagraphs`` (compiled with
``reduce-overhead``, which replays the passes as CUDA graphs, without the gaps between kernels).

Run it from the root of the repository::

    python -m benchmarks.gpu.gpt_throughput --device cuda --peer hf --json perf/gpt.json \
        --merge-into perf/cuda.json
    python -m benchmarks.gpu.gpt_throughput --dry        # a toy model on the CPU: checks the script
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import time
from pathlib import Path

import torch
from torch import nn

import seqbook.attention
from benchmarks.report import machine_info, write_json
from seqbook.attention import MultiHeadAttention
from seqbook.gpt import GPT, GPTConfig
from seqbook.utils import set_fast

# Dense (no sparsity) bf16 tensor-core peaks in TFLOP/s, from NVIDIA's data sheets.
# The first key contained in the device's name wins, so the NVL parts come before plain "H200".
PEAK_BF16_TFLOPS = {"H100 80GB HBM3": 989.4, "H100 SXM": 989.4, "H100 PCIe": 756.0, "H100 NVL": 835.0,
                    "H200 NVL": 835.0, "H200": 989.4, "A100": 312.0}


def peak_tflops(name: str) -> float | None:
    for key, value in PEAK_BF16_TFLOPS.items():
        if key in name:
            return value
    return None


def flops_per_token(model: nn.Module, n_layer: int, block_size: int, n_embd: int) -> float:
    n = sum(p.numel() for p in model.parameters())  # tied weights count once
    for name, m in model.named_modules():  # a position table is a lookup, no matrix product
        if name.split(".")[-1] in ("pos_emb", "wpe"):
            n -= m.weight.numel()
    return 6 * n + 12 * n_layer * block_size * n_embd


def gpt_config(dry: bool) -> GPTConfig:
    if dry:
        return GPTConfig(vocab_size=256, block_size=64, n_layer=2, n_head=2, n_embd=64, dropout=0.0)
    # GPT-2's tanh GELU, as the native model and Hugging Face's compute it (runs up to commit
    # a65c586 computed the exact GELU here)
    return GPTConfig(vocab_size=50304, block_size=1024, n_layer=12, n_head=12, n_embd=768,
                     dropout=0.0, bias=True, tie_weights=True, activation="gelu_tanh")


def readable_attention_calls(model: nn.Module, idx: torch.Tensor) -> int:
    """How many times one forward pass of ``model`` runs the readable attention of the chapters.

    Counts the calls of :func:`seqbook.attention.scaled_dot_product_attention` (the readable path of
    every :class:`~seqbook.attention.MultiHeadAttention`) during ``model(idx)``, uncompiled.
    """
    readable = seqbook.attention.scaled_dot_product_attention
    calls = 0

    def counted(*args, **kwargs):
        nonlocal calls
        calls += 1
        return readable(*args, **kwargs)

    seqbook.attention.scaled_dot_product_attention = counted
    try:
        with torch.no_grad():
            model(idx)
    finally:
        seqbook.attention.scaled_dot_product_attention = readable
    return calls


def seqbook_gpt(config: GPTConfig, device: torch.device) -> tuple[nn.Module, dict]:
    """The chapter-6 GPT on its fused path, checked to run no readable attention."""
    model = set_fast(GPT(config), True).to(device)
    layers = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    calls = readable_attention_calls(model, torch.zeros(1, config.block_size, dtype=torch.long,
                                                        device=device))
    if not layers or calls or not all(m.fast for m in layers):
        raise RuntimeError(f"the measured GPT must attend on the fused path only: {len(layers)} "
                           f"attention layers, {calls} calls of the readable attention")
    info = {"name": "seqbook.gpt.GPT", "attention": "F.scaled_dot_product_attention (fast=True)",
            "attention_layers": len(layers), "readable_attention_calls": calls}
    return model, info


def hf_gpt2(config: GPTConfig, device: torch.device) -> tuple[nn.Module, dict]:
    """Hugging Face's GPT2LMHeadModel of the same size, with PyTorch's SDPA attention."""
    from transformers import GPT2Config, GPT2LMHeadModel

    hf = GPT2Config(vocab_size=config.vocab_size, n_positions=config.block_size, n_embd=config.n_embd,
                    n_layer=config.n_layer, n_head=config.n_head, resid_pdrop=0.0, embd_pdrop=0.0,
                    attn_pdrop=0.0, bos_token_id=0, eos_token_id=0, attn_implementation="sdpa")
    model = GPT2LMHeadModel(hf).to(device)
    if model.config._attn_implementation != "sdpa":
        raise RuntimeError(f"the peer must attend with SDPA, got {model.config._attn_implementation}")
    import transformers
    info = {"name": "transformers.GPT2LMHeadModel", "attention": "sdpa",
            "transformers": transformers.__version__}
    return model, info


def measure(model: nn.Module, loss_of, config: GPTConfig, device: torch.device, args,
            context=contextlib.nullcontext, compile_mode: str | None = None, clip: bool = True,
            profile: bool = False) -> dict:
    """Time ``args.steps`` training steps of ``model`` after ``args.warmup`` untimed ones.

    Each step runs inside ``context()``; ``compile_mode`` replaces ``args.compile_mode``; ``clip``
    clips the gradients' norm to 1 as nanoGPT does; ``profile`` prints the kernels that take the
    time of 5 more steps."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1,
                                  fused=device.type == "cuda")
    compiled = not args.no_compile
    compile_mode = compile_mode or args.compile_mode
    step_model = torch.compile(model, mode=compile_mode) if compiled else model
    amp = torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")
    gen = torch.Generator(device=device).manual_seed(0)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    def step():
        x = torch.randint(config.vocab_size, (args.batch, config.block_size + 1), device=device,
                          generator=gen)
        with amp, context():  # the backward pass runs the backend its forward pass chose
            loss = loss_of(step_model, x[:, :-1], x[:, 1:])
        loss.backward()
        if clip:
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
        if not compiled:
            raise
        print(f"torch.compile failed ({type(exc).__name__}: {exc}); measuring without it", flush=True)
        compiled, step_model = False, model
        for _ in range(args.warmup):
            loss = step()
    sync()
    warmup_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    sync()
    seconds = time.perf_counter() - t0

    if profile:  # the kernels that take the time, over 5 steps
        from torch.profiler import ProfilerActivity, profile
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        with profile(activities=activities) as prof:
            for _ in range(5):
                step()
            sync()
        key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
        print(prof.key_averages().table(sort_by=key, row_limit=25, max_name_column_width=60), flush=True)

    attention = attention_kernels(step, sync) if device.type == "cuda" else None
    tokens_per_s = args.steps * args.batch * config.block_size / seconds
    fpt = flops_per_token(model, config.n_layer, config.block_size, config.n_embd)
    achieved = fpt * tokens_per_s / 1e12
    peak = peak_tflops(torch.cuda.get_device_name(device)) if device.type == "cuda" else None
    return {
        "parameters": sum(p.numel() for p in model.parameters()),
        "compiled": compiled, "compile_mode": compile_mode if compiled else None,
        "clip_grad_norm": clip,
        "warmup_s": round(warmup_s, 1),
        "ms_per_step": round(1000 * seconds / args.steps, 2),
        "tokens_per_s": round(tokens_per_s),
        "flops_per_token": fpt,
        "achieved_tflops": round(achieved, 1),
        "peak_bf16_tflops": peak,
        "mfu": round(achieved / peak, 4) if peak else None,
        "final_loss": round(float(loss.detach()), 3),
        "max_memory_gib": (round(torch.cuda.max_memory_allocated(device) / 2**30, 1)
                           if device.type == "cuda" else None),
        "attention_kernels": attention,
    }


def attention_kernels(step, sync) -> list[str]:
    """The names of the attention kernels (and operators) that one more ``step()`` runs: which
    SDPA backend a compiled model really uses, whatever it was asked for."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()
        sync()
    words = ("flash", "fmha", "cudnn", "attention", "sdpa", "efficient")
    return sorted({e.key[:80] for e in prof.key_averages() if any(w in e.key.lower() for w in words)})


def returned_loss(model, x, y):
    """The loss of a model that returns (logits, loss), as seqbook's GPT and NativeGPT do."""
    return model(x, y)[1]


def flash_only():
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel(SDPBackend.FLASH_ATTENTION)


def native_gpt(config: GPTConfig, device: torch.device) -> nn.Module:
    from benchmarks.native_gpt import NativeGPT
    return NativeGPT(config.vocab_size, config.block_size, config.n_layer, config.n_head,
                     config.n_embd).to(device)


def ours(config: GPTConfig, device: torch.device) -> nn.Module:
    return seqbook_gpt(config, device)[0]


def chunked_ce(config: GPTConfig, device: torch.device) -> nn.Module:
    from benchmarks.chunked_loss import ChunkedLossGPT
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    return ChunkedLossGPT(ours(config, device), chunk=8192, dtype=dtype)


def loss_only(config: GPTConfig, device: torch.device) -> nn.Module:
    from benchmarks.train_memory import LossOnly
    return LossOnly(ours(config, device))


VARIANTS = {  # name -> (what it changes, the model, what measure() is told besides)
    "native": ("the same network from PyTorch's native layers, Q, K, V packed (nanoGPT's layout)",
               native_gpt, {}),
    "flash": ("our model, SDPA restricted to the FlashAttention backend",
              ours, {"context": flash_only}),
    "autotune": ("our model compiled with mode='max-autotune-no-cudagraphs'",
                 ours, {"compile_mode": "max-autotune-no-cudagraphs"}),
    "no-clip": ("our model without clip_grad_norm_", ours, {"clip": False}),
    "chunked-ce": ("our model with its output layer and cross-entropy computed together, 8192 "
                   "rows at a time, never holding the whole logits (benchmarks.chunked_loss)",
                   chunked_ce, {}),
    "loss-only": ("our model compiled inside a module that returns only the loss: the compiled "
                  "backward pass no longer takes a zero-filled gradient of the returned logits "
                  "(benchmarks.train_memory)", loss_only, {}),
    "cudagraphs": ("our model compiled with mode='reduce-overhead' (its forward and backward "
                   "passes replayed as CUDA graphs)", ours, {"compile_mode": "reduce-overhead"}),
}


def hf_loss(model, x, y):
    # Hugging Face shifts the labels itself: labels = the inputs (T - 1 predicted positions of T).
    return model(input_ids=x, labels=x).loss


def free(device: torch.device) -> None:
    gc.collect()
    torch._dynamo.reset()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--batch", type=int, default=64, help="sequences per step")
    p.add_argument("--steps", type=int, default=100, help="timed steps")
    p.add_argument("--warmup", type=int, default=20, help="untimed steps first (compilation)")
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--compile-mode", default=None,
                   help="torch.compile mode, e.g. max-autotune-no-cudagraphs (default: PyTorch's default)")
    p.add_argument("--peer", choices=["hf"], default=None,
                   help="also train Hugging Face's GPT2LMHeadModel of the same size in the same harness")
    p.add_argument("--profile", action="store_true", help="print where the time of a few steps goes")
    p.add_argument("--variants", default="",
                   help=f"comma-separated, measured after the main run: {', '.join(VARIANTS)}")
    p.add_argument("--dry", action="store_true", help="toy size on the CPU, to test the script")
    p.add_argument("--json", type=Path, default=None, help="write the result here")
    p.add_argument("--merge-into", type=Path, default=None,
                   help="also add the result to this JSON file (e.g. perf/cuda.json) as 'gpt' and 'mfu'")
    args = p.parse_args(argv)
    variants = [v for v in args.variants.split(",") if v]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:  # before anything runs: a typo must not cost a GPU slot
        raise SystemExit(f"--variants: unknown {unknown}, expected some of {sorted(VARIANTS)}")
    if args.dry:
        args.device, args.batch, args.steps, args.warmup, args.no_compile = "cpu", 4, 3, 1, True
    config = gpt_config(args.dry)
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # only matters outside autocast
        torch.backends.cudnn.allow_tf32 = True

    torch.manual_seed(0)
    model, model_info = seqbook_gpt(config, device)
    ours = measure(model, returned_loss, config, device, args, profile=args.profile)
    del model
    free(device)
    result = {
        "model": {"n_layer": config.n_layer, "n_head": config.n_head, "n_embd": config.n_embd,
                  "block_size": config.block_size, "vocab_size": config.vocab_size,
                  "parameters": ours["parameters"]},
        "batch": args.batch, "steps": args.steps, "warmup_steps": args.warmup,
        "autocast": "bf16" if device.type == "cuda" else None,
        **model_info, **ours,
    }

    def save() -> None:  # after each model, so that a time limit costs only what was still running
        result["meta"] = machine_info(device)
        if args.json:
            write_json(args.json, result)
        if args.merge_into and args.merge_into.exists():
            merged = json.loads(args.merge_into.read_text())
            merged["gpt"] = {k: v for k, v in result.items() if k != "meta"}
            merged["gpt"]["commit"] = result["meta"]["commit"]
            merged["mfu"] = result["mfu"]
            args.merge_into.write_text(json.dumps(merged, indent=1) + "\n")

    if args.peer == "hf":
        torch.manual_seed(0)
        peer, peer_info = hf_gpt2(config, device)
        result["peer"] = {**peer_info, **measure(peer, hf_loss, config, device, args)}
        result["ratio_to_peer"] = round(ours["tokens_per_s"] / result["peer"]["tokens_per_s"], 3)
        del peer
        free(device)
    save()
    if variants:
        result["variants"] = {}
    for name in variants:
        what, build, options = VARIANTS[name]
        torch.manual_seed(0)
        try:  # compiled afresh: torch.compile's caches ignore the SDPA backend a context asks for
            with torch._inductor.config.patch(force_disable_caches=True):
                measured = measure(build(config, device), returned_loss, config, device, args,
                                   **options)
            result["variants"][name] = {"what": what, **measured}
        except Exception as exc:  # noqa: BLE001 - one variant failing must not cost the others
            result["variants"][name] = {"what": what, "error": f"{type(exc).__name__}: {exc}"[:300]}
        free(device)
        print(json.dumps({name: result["variants"][name]}), flush=True)
        save()
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
