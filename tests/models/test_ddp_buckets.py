"""DDP's buckets for GPT-2-small, measured with DDP itself (gloo, one process).

Chapter 12 applies DDP's bucketing rule to GPT-2-small's parameters in reverse order (a bucket
closes once it holds 25 MiB, the first once it holds 1 MiB) and finds the last bucket, which waits
for the tied embedding's gradient and so cannot overlap with the backward pass; the exercise
``ex-dist-bf16-hook`` takes its size as given. Here a communication hook writes down the buckets
that DDP really all-reduces in its second step (the first uses one bucket for everything), so
that the rule, the chapter's number and the exercise's cannot drift from PyTorch's behaviour.
"""

from __future__ import annotations

import json
import pickle
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

from seqbook.exercises.ch12 import HOOK
from seqbook.gpt import GPT, GPTConfig

ROOT = Path(__file__).resolve().parents[2]
GPT2_SMALL = dict(vocab_size=50_304, block_size=1024, n_layer=12, n_head=12, n_embd=768,
                  dropout=0.0)


def measured(results) -> None:
    """In a forked process: DDP over GPT-2-small, the bytes of each bucket of steps 1 and 2."""
    try:
        torch.set_num_threads(1)
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        torch.manual_seed(0)
        gpt = GPT(GPTConfig(**GPT2_SMALL))
        names = {id(p): name for name, p in gpt.named_parameters()}
        model = DistributedDataParallel(gpt)
        steps, order, first_names = [], [], []

        def record(state, bucket):  # one process: nothing to average, the bucket as it is
            steps[-1].append(bucket.buffer().numel() * bucket.buffer().element_size())
            order.append(bucket.index())
            if len(steps) == 2 and bucket.index() == 0:
                first_names.extend(names[id(p)] for p in bucket.parameters())
            done = torch.futures.Future()
            done.set_result(bucket.buffer())
            return done

        model.register_comm_hook(None, record)
        x = torch.randint(GPT2_SMALL["vocab_size"], (1, 8))
        for _ in range(2):
            steps.append([])
            model(x, x)[1].backward()
        out = steps, order[1:], first_names
    except Exception:
        out = RuntimeError(traceback.format_exc())
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    results.put(pickle.dumps(out))


def by_rule(model: GPT) -> tuple[list[int], list[float], float]:
    """DDP's rule, written independently of the chapter's cell: the buckets' float32 bytes, the
    share of the backward FLOPs done when each is complete (the output layer's first, then 4 a
    token for each weight-matrix entry and 8 T D for each block's attention), and the output
    layer's share."""
    T, D = model.config.block_size, model.config.n_embd
    buckets, done, size = [], [], 0
    work = head = 4 * model.config.vocab_size * D
    for name, p in list(model.named_parameters())[::-1]:
        work += 8 * T * D if name.endswith("v_proj.bias") else 0
        work += 4 * p.numel() if p.dim() == 2 and "emb" not in name else 0
        size += p.numel() * 4
        if size >= (1 << 20 if not buckets else 25 << 20):
            buckets.append(size)
            done.append(work)
            size = 0
    if size:
        buckets.append(size)
        done.append(work)
    return buckets, [w / work for w in done], head / work


def glued(notebook: Path, name: str) -> str:
    """The text a chapter glued under ``name``, from its committed outputs."""
    for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
        for out in cell.get("outputs", []):
            if out.get("metadata", {}).get("scrapbook", {}).get("name") == name:
                return out["data"]["application/papermill.record/text/plain"].strip("'")
    raise KeyError(name)


def test_ddp_buckets_of_gpt2_small():
    ctx = mp.get_context("fork")
    results = ctx.Queue()
    proc = ctx.Process(target=measured, args=(results,))
    proc.start()
    try:
        out = pickle.loads(results.get(timeout=300))
    finally:
        proc.join(timeout=30)
        if proc.is_alive():
            proc.kill()
    if isinstance(out, Exception):
        raise out
    (first, second), order, first_names = out
    total = 4 * 124_475_904
    assert first == [total]  # the first step: one bucket, the order not yet known
    with torch.device("meta"):
        rule, _, _ = by_rule(GPT(GPTConfig(**GPT2_SMALL)))
    assert second == rule and len(second) == 13 and sum(second) == total
    assert order == list(range(13))  # all-reduced in order, the first bucket first
    # the first bucket holds the final layer norm's gradients, ready only once the backward pass
    # has gone through the output layer: no bucket can start before that (eq. overlap's t_head)
    assert "ln_f.weight" in first_names and "ln_f.bias" in first_names
    assert second[-1] == 4 * HOOK["last"]  # the exercise's last bucket
    assert 0.35 < second[-1] / total < 0.36
    chapter = ROOT / "chapters" / "12_distributed.ipynb"
    assert glued(chapter, "ch12_last_params").replace(" ", "") == str(HOOK["last"])
    assert glued(chapter, "ch12_n_buckets") == str(len(second))


def test_bf16_hook_constants_are_the_chapters():
    """The chapter's h, first bucket and bucket-by-bucket e that ex-dist-bf16-hook's check
    names, recounted with the exercise's numbers (bfloat16 buckets, 500 000 tokens/s)."""
    with torch.device("meta"):
        model = GPT(GPTConfig(**GPT2_SMALL))
    buckets, ready, head = by_rule(model)
    sizes = [b // 2 for b in buckets]  # bfloat16
    t_c = 1024 / 500_000
    t_bwd, end = 2 * t_c / 3, 0.0

    def ring_s(nbytes):  # the ring's bandwidth term across servers, 512 GPUs
        return 2 * 511 / 512 * nbytes / 400e9

    for nbytes, share in zip(sizes[:-1], ready[:-1], strict=True):
        end = max(end, share * t_bwd) + ring_s(nbytes)
    rest, last = ring_s(sum(sizes[:-1])), ring_s(sizes[-1])
    e = t_c / (t_c / 3 + max(end, t_bwd) + last)
    bound = t_c / (t_c / 3 + max(t_bwd, 0.27 * t_bwd + rest) + last)
    assert len(sizes) == 13 and sizes[-1] == 2 * HOOK["last"]
    assert abs(HOOK["cell_head"] - head) < 1e-5
    assert abs(HOOK["first_ready"] - ready[0]) < 1e-5
    assert abs(HOOK["by_bucket_e"] - e) < 1e-5 and e < bound
