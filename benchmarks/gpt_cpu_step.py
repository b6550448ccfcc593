"""One training step of the GPT on the CPU: seqbook's fused path beside PyTorch's native layers and
Hugging Face's GPT-2, the same sizes, the same weights, timed interleaved.

Three models compute one function, GPT-2 with learned positions, biases, the tanh GELU, no dropout
and tied embeddings, in float32:

* ``seqbook``: :class:`seqbook.gpt.GPT` on its fused path (``GPTConfig(..., fast=True)``);
* ``native``: :class:`benchmarks.native_gpt.NativeGPT`, the same model from PyTorch's native layers
  only (``nn.LayerNorm``, ``nn.Linear``, SDPA, ``nn.Embedding``, ``F.gelu``): the floor of what
  PyTorch's kernels allow;
* ``hf``: Hugging Face's ``GPT2LMHeadModel`` built from a ``GPT2Config`` (SDPA attention).

One set of weights serves all three: Hugging Face's model is built first and copied into the other
two (:meth:`seqbook.gpt.GPT.from_hf`, :func:`benchmarks.native_gpt.copy_from_hf`; the copy names
GPT-2's parts, not seqbook's, so a change inside seqbook's modules does not break it), and the
script refuses to time anything unless the three losses on one batch agree (float32 tolerance).

One step is what training costs: forward to the mean cross-entropy, backward, an AdamW step,
``zero_grad``. The steps are timed with :func:`benchmarks.timing.measure`: warm-up steps of each
model, one calibration step, then rounds that take one step of every model, in an order that
alternates from round to round (seqbook, native, hf, then hf, native, seqbook), so that a machine
that gets busier slows all three alike. A timing is the median over the rounds; the ratios are
ours / native and ours / hf.

Run it from the root of the repository::

    python -m benchmarks.gpt_cpu_step --json perf/gpt_cpu.json   # 6 x 384, batch 8 x 256: minutes
    python -m benchmarks.gpt_cpu_step --size tiny                 # a toy model: seconds
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import sys
import time
from pathlib import Path

import torch
from torch import nn

from benchmarks.gpu.gpt_throughput import readable_attention_calls, returned_loss
from benchmarks.native_gpt import NativeGPT, copy_from_hf
from benchmarks.report import machine_info, write_json
from benchmarks.timing import measure
from seqbook.gpt import GPT

# Model and batch sizes. "default": the issue's measurement (GPT-2's vocabulary padded to 50304).
SIZES = {
    "default": dict(n_layer=6, n_embd=384, n_head=6, block_size=256, vocab_size=50304, batch=8),
    "tiny": dict(n_layer=2, n_embd=32, n_head=2, block_size=16, vocab_size=128, batch=2),
}
MODELS = ("seqbook", "native", "hf")
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


# seqbook's GPT as issue 35 asks for it: the fused path, GPT-2's pieces, no dropout
SEQBOOK_CONFIG = dict(dropout=0.0, bias=True, tie_weights=True, positional="learned",
                      activation="gelu_tanh", fast=True)


def seqbook_gpt(hf: nn.Module) -> tuple[nn.Module, dict]:
    """seqbook's GPT on the fused path with the weights of ``hf``, checked to run no readable part."""
    model = GPT.from_hf(hf, fast=True)
    c = model.config
    wrong = {k: getattr(c, k) for k, v in SEQBOOK_CONFIG.items() if getattr(c, k) != v}
    if wrong:
        raise RuntimeError(f"the measured GPT must have GPTConfig({SEQBOOK_CONFIG}), got {wrong}")
    return model, {"name": "seqbook.gpt.GPT", "config": "GPTConfig(..., fast=True)",
                   "fast_switches": check_fused(model)}


def check_fused(model: nn.Module) -> int:
    """Refuse a GPT with any part on the readable path; the number of its ``fast`` switches."""
    calls = readable_attention_calls(model, torch.zeros(1, 4, dtype=torch.long))
    switches = [m.fast for m in model.modules() if isinstance(getattr(m, "fast", None), bool)]
    if calls or not switches or not all(switches):
        raise RuntimeError(f"the measured GPT must run its fused path: {calls} calls of the readable "
                           f"attention, {switches.count(False)} of {len(switches)} fast switches off")
    return len(switches)


def hf_gpt2(size: dict) -> tuple[nn.Module, dict]:
    """Hugging Face's GPT2LMHeadModel of the same sizes, built offline from its config."""
    import transformers
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=size["vocab_size"], n_positions=size["block_size"],
                        n_embd=size["n_embd"], n_layer=size["n_layer"], n_head=size["n_head"],
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=1e-5,
                        activation_function="gelu_new", tie_word_embeddings=True,
                        bos_token_id=0, eos_token_id=0)
    try:
        model = GPT2LMHeadModel._from_config(config, attn_implementation="sdpa")
    except (TypeError, ValueError, ImportError):  # an older transformers: its default attention
        model = GPT2LMHeadModel(config)
    attention = getattr(model.config, "_attn_implementation", "eager")
    return model, {"name": "transformers.GPT2LMHeadModel", "attention": attention,
                   "transformers": transformers.__version__}


def hf_loss(model, x, y):
    # the loss computed here, as for the other two (Hugging Face's labels= would shift and drop one)
    logits = model(input_ids=x).logits  # (B, T, V)
    return nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())


LOSSES = {"seqbook": returned_loss, "native": returned_loss, "hf": hf_loss}


def build(size: dict) -> tuple[dict, dict]:
    """The three models with one set of weights (Hugging Face's initial ones, copied)."""
    torch.manual_seed(0)
    hf, hf_info = hf_gpt2(size)
    ours, ours_info = seqbook_gpt(hf)
    native = NativeGPT(size["vocab_size"], size["block_size"], size["n_layer"], size["n_head"],
                       size["n_embd"])
    copy_from_hf(native, hf)
    models = {"seqbook": ours, "native": native, "hf": hf}
    infos = {"seqbook": ours_info,
             "native": {"name": "benchmarks.native_gpt.NativeGPT",
                        "layers": "nn.Embedding, nn.LayerNorm, nn.Linear (packed q, k, v), "
                                  "F.scaled_dot_product_attention(is_causal=True), "
                                  "F.gelu(approximate='tanh')"},
             "hf": hf_info}
    for name, m in models.items():
        m.train()
        infos[name]["parameters"] = sum(p.numel() for p in m.parameters())
    return models, infos


def check_equal_losses(models: dict, x: torch.Tensor, y: torch.Tensor) -> dict:
    """The three losses on one batch, asserted equal to float32 precision (the same function)."""
    with torch.no_grad():
        losses = {name: float(LOSSES[name](m, x, y)) for name, m in models.items()}
    spread = max(losses.values()) - min(losses.values())
    if not all(math.isfinite(v) for v in losses.values()) or spread > 1e-4 * max(1.0, losses["seqbook"]):
        raise AssertionError(f"the three models must compute one function, got losses {losses}")
    return {**losses, "max_difference": spread}


def step_of(model: nn.Module, loss_of, x: torch.Tensor, y: torch.Tensor):
    """One training step: forward to the loss, backward, AdamW, gradients cleared."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1)

    def step():
        loss = loss_of(model, x, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("--size", choices=sorted(SIZES), default="default")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    p.add_argument("--steps", type=int, default=None,
                   help="timed steps of each model (default 10; 3 with --size tiny)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps of each model first")
    p.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                   help="wall time (default) or this process's CPU time, steadier on a shared "
                        "machine and meaningful with --threads 1")
    p.add_argument("--json", type=Path, default=None, help="write the result here")
    p.add_argument("--quiet", action="store_true", help="print only the summary line")
    args = p.parse_args(argv)
    size = SIZES[args.size]
    steps = args.steps or (3 if args.size == "tiny" else 10)
    threads_before = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        meta = machine_info("cpu")
        meta["clock"] = args.clock
        meta["command"] = "python -m benchmarks.gpt_cpu_step " + " ".join(
            sys.argv[1:] if argv is None else argv)
        models, infos = build(size)
        gen = torch.Generator().manual_seed(0)
        data = torch.randint(size["vocab_size"], (size["batch"], size["block_size"] + 1), generator=gen)
        x, y = data[:, :-1], data[:, 1:]
        losses = check_equal_losses(models, x, y)
        steps_fns = [step_of(models[n], LOSSES[n], x, y) for n in MODELS]
        timed = measure(steps_fns, repeats=steps, warmup=args.warmup, min_sample_s=0.0,
                        budget_s=1e9, clock=CLOCKS[args.clock])
        meta["load_average_end"] = [round(v, 2) for v in os.getloadavg()]
    finally:
        torch.set_num_threads(threads_before)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    result = {
        "what": "one training step (forward, backward, AdamW) in float32 on the CPU",
        "size": args.size,
        "model": {k: v for k, v in size.items() if k != "batch"},
        "batch": [size["batch"], size["block_size"]],
        "threads": args.threads,
        "optimizer": "torch.optim.AdamW(lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1), "
                     "PyTorch's default implementation",
        "steps": timed[0]["samples"], "warmup_steps": args.warmup,
        "initial_loss": losses,
        "models": {n: {**infos[n], "ms_per_step": round(t["ms"], 2), "min_ms": round(t["min_ms"], 2)}
                   for n, t in zip(MODELS, timed, strict=True)},
        "process_peak_rss_mib": round(rss / 1024) if sys.platform.startswith("linux") else None,
        "meta": meta,
    }
    ms = {n: result["models"][n]["ms_per_step"] for n in MODELS}
    mins = {n: result["models"][n]["min_ms"] for n in MODELS}
    result["ratio"] = {"seqbook/native": round(ms["seqbook"] / ms["native"], 3),
                       "seqbook/hf": round(ms["seqbook"] / ms["hf"], 3)}
    result["ratio_of_minima"] = {"seqbook/native": round(mins["seqbook"] / mins["native"], 3),
                                 "seqbook/hf": round(mins["seqbook"] / mins["hf"], 3)}
    if not args.quiet:
        print(json.dumps(result, indent=1))
    print(f"ms per step (median of {result['steps']}): "
          + ", ".join(f"{n} {ms[n]:.1f}" for n in MODELS)
          + f"; seqbook/native {result['ratio']['seqbook/native']:.3f}, "
          f"seqbook/hf {result['ratio']['seqbook/hf']:.3f}; load average {meta['load_average']}"
          f" -> {meta['load_average_end']}", flush=True)
    if args.json:
        write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
