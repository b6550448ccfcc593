"""Tensor parallelism (``seqbook.tensor_parallel``): the shares of a block, summed over the ranks,
are the block.

In one process (no process group) every layer equals the layer it was cut from. In 2 and 4
processes of the gloo backend (forked, on the CPU), in float64:

* the logits and the loss of a GPT whose blocks are split equal the whole GPT's;
* every rank's gradient of every tensor is its share of the whole gradient;
* the block issues two all-reduces forward and two backward (``CommDebugMode`` counts them);
* three AdamW steps on the shares give the shares of three AdamW steps on the whole model;
* PyTorch's own tensor parallelism (``parallelize_module`` with ``ColwiseParallel`` and
  ``RowwiseParallel``, DTensors) gives the same outputs and gradients.
"""

from __future__ import annotations

import copy
import pickle
import socket
import traceback

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from seqbook.gpt import GPT, GPTBlock, GPTConfig
from seqbook.rope import rope_angles
from seqbook.tensor_parallel import (
    CopyToRanks,
    SumOverRanks,
    TensorParallelAttention,
    TensorParallelFeedForward,
    TensorParallelGPTBlock,
    add_bias,
    all_reduce,
    column_shard,
    parallelize_gpt,
    row_shard,
)

CONFIG = GPTConfig(vocab_size=23, block_size=12, n_layer=2, n_head=4, n_embd=32, dropout=0.0)


def whole_gpt(**changes) -> GPT:
    torch.manual_seed(0)
    config = GPTConfig(**{**CONFIG.__dict__, **changes})
    return GPT(config).double()


def batch(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(0, CONFIG.vocab_size, (3, CONFIG.block_size), generator=g),
            torch.randint(0, CONFIG.vocab_size, (3, CONFIG.block_size), generator=g))


# ---------------------------------------------------------------------------------------------
# One process: the shares are the whole layers.
# ---------------------------------------------------------------------------------------------


def test_column_and_row_shards_are_the_blocks_of_the_weight():
    torch.manual_seed(0)
    linear = nn.Linear(6, 8).double()
    cols = [column_shard(linear, r, 4) for r in range(4)]
    rows = [row_shard(linear, r, 2) for r in range(2)]
    assert torch.equal(torch.cat([c.weight for c in cols]), linear.weight)
    assert torch.equal(torch.cat([c.bias for c in cols]), linear.bias)
    assert torch.equal(torch.cat([r.weight for r in rows], dim=1), linear.weight)
    assert all(torch.equal(r.bias, linear.bias) for r in rows)  # whole, added once
    x = torch.randn(5, 6, dtype=torch.double)
    # a column shard gives its outputs; the row shards' partial sums add up to the layer
    assert torch.allclose(torch.cat([c(x) for c in cols], -1), linear(x), atol=1e-14)
    parts = sum(torch.nn.functional.linear(xr, r.weight) for xr, r in zip(x.chunk(2, -1), rows, strict=True))
    assert torch.allclose(add_bias(parts, rows[0]), linear(x), atol=1e-14)
    assert column_shard(linear, 0, 1).weight.data_ptr() != linear.weight.data_ptr()  # a copy


def test_the_operators_are_the_identity_in_one_process():
    x = torch.randn(2, 3, requires_grad=True)
    y = SumOverRanks.apply(CopyToRanks.apply(x, None), None)
    (y * 2).sum().backward()
    assert torch.equal(y, x) and torch.equal(x.grad, torch.full_like(x, 2.0))
    z = all_reduce(x)
    assert torch.equal(z, x) and z.data_ptr() != x.data_ptr()


@pytest.mark.parametrize("rope", [False, True])
def test_one_process_equals_the_whole_gpt(rope):
    gpt = whole_gpt(positional="rope" if rope else "learned")
    split = parallelize_gpt(gpt)
    idx, targets = batch()
    logits, loss = gpt(idx, targets)
    logits_tp, loss_tp = split(idx, targets)
    assert torch.allclose(logits_tp, logits, atol=1e-13) and torch.allclose(loss_tp, loss, atol=1e-13)
    loss.backward()
    loss_tp.backward()
    whole = dict(gpt.named_parameters())
    for name, p in split.named_parameters():  # the same names, the same tensors in one process
        assert torch.allclose(p.grad, whole[name].grad, atol=1e-13), name
    assert isinstance(split.blocks[0], TensorParallelGPTBlock) and isinstance(gpt.blocks[0], GPTBlock)


def test_one_process_layers_equal_their_wholes_with_rope_and_without_bias():
    torch.manual_seed(0)
    block = GPTBlock(16, 4, dropout=0.0, bias=False).double()
    x = torch.randn(2, 5, 16, dtype=torch.double)
    rotary = tuple(t.double() for t in rope_angles(torch.arange(5), 4))
    attn = TensorParallelAttention(block.self_attn)
    assert torch.allclose(attn(x, rotary), block.self_attn(x, rotary)[0], atol=1e-13)
    ff = TensorParallelFeedForward(block.ff)
    assert torch.allclose(ff(x), block.ff(x), atol=1e-13)
    assert torch.allclose(TensorParallelGPTBlock(block)(x, rotary), block(x, rotary), atol=1e-13)


def test_one_process_attention_in_bfloat16_equals_the_whole_layer():
    # bf16 heads go through the package's fused call, which on a CPU with AMX under a lowered
    # ATEN_CPU_CAPABILITY takes the math kernel where PyTorch's fused bf16 kernel raises
    torch.manual_seed(0)
    layer = GPTBlock(32, 4, dropout=0.0).self_attn.to(torch.bfloat16)
    x = torch.randn(2, 64, 32, dtype=torch.bfloat16)
    with torch.no_grad():
        split, whole = TensorParallelAttention(layer)(x), layer(x)[0]
    assert split.dtype == torch.bfloat16 and torch.isfinite(split).all()
    assert torch.allclose(split.float(), whole.float(), atol=3e-2)


def test_the_split_model_is_a_copy():
    gpt = whole_gpt()
    before = {n: p.clone() for n, p in gpt.named_parameters()}
    split = parallelize_gpt(gpt)
    with torch.no_grad():
        for p in split.parameters():
            p.add_(1.0)
    assert all(torch.equal(p, before[n]) for n, p in gpt.named_parameters())


def test_refused_clearly():
    gpt = whole_gpt()
    with pytest.raises(ValueError, match="dropout"):
        parallelize_gpt(whole_gpt(dropout=0.1))
    with pytest.raises(TypeError, match="model must be a seqbook GPT"):
        parallelize_gpt(nn.Linear(2, 2))
    with pytest.raises(TypeError, match="layer must be a FeedForward"):
        TensorParallelFeedForward(gpt.blocks[0].self_attn)
    with pytest.raises(TypeError, match="group must be"):
        TensorParallelGPTBlock(gpt.blocks[0], group="world")
    with pytest.raises(ValueError, match="not initialised"):
        TensorParallelGPTBlock(gpt.blocks[0], group=dist.ProcessGroup(dist.HashStore(), 0, 1))
    with pytest.raises(ValueError, match="divide by world_size=3"):
        column_shard(nn.Linear(4, 8), 0, 3)
    with pytest.raises(ValueError, match="rank"):
        row_shard(nn.Linear(4, 8), 2, 2)
    split = parallelize_gpt(gpt)
    with pytest.raises(NotImplementedError, match="KV cache"):
        split.generate(batch()[0][:, :3], 2, use_cache=True)
    block = TensorParallelGPTBlock(gpt.blocks[0])
    with pytest.raises(ValueError, match=r"x must have shape \(B, T, 32\)"):
        block(torch.randn(2, 3, 16, dtype=torch.double))
    with pytest.raises(TypeError, match="x must have the dtype of the module's weights, torch.float64"):
        block(torch.randn(2, 3, 32))


# ---------------------------------------------------------------------------------------------
# Several processes: gloo on the CPU.
# ---------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_main(fn, rank, world_size, port, results):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    try:
        out = fn(rank, world_size)
    except Exception:
        out = RuntimeError(f"rank {rank}:\n{traceback.format_exc()}")
    finally:
        dist.destroy_process_group()
    try:
        data = pickle.dumps(out)
    except Exception:  # what a rank returns must reach the test, or the test waits in vain
        data = pickle.dumps(RuntimeError(f"rank {rank}:\n{traceback.format_exc()}"))
    results.put((rank, data))


def run_ranks(fn, world_size: int, timeout: float = 180.0) -> list:
    ctx = mp.get_context("fork")
    results, port = ctx.Queue(), free_port()
    procs = [ctx.Process(target=rank_main, args=(fn, r, world_size, port, results))
             for r in range(world_size)]
    for p in procs:
        p.start()
    try:
        outs = dict(results.get(timeout=timeout) for _ in procs)
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    outs = [pickle.loads(outs[r]) for r in range(world_size)]
    for out in outs:
        if isinstance(out, Exception):
            raise out
    return outs


def share(whole: torch.Tensor, like: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """The share of ``whole`` that a tensor shaped ``like`` holds on ``rank``."""
    if like.shape == whole.shape:
        return whole
    dim = 0 if like.shape[0] != whole.shape[0] else 1
    return whole.chunk(world_size, dim)[rank]


def three_adamw_steps(model) -> dict[str, torch.Tensor]:
    """The weights after three AdamW steps on the batches of seeds 0, 1, 2."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for step in range(3):
        _, loss = model(*batch(step))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def one_step_and_three(rank, world_size):
    """On every rank: logits, loss and gradients of one step; the weights after three AdamW steps;
    the collectives of one block's forward and backward pass."""
    from torch.distributed.tensor.debug import CommDebugMode

    out = {}
    for rope in (False, True):
        split = parallelize_gpt(whole_gpt(positional="rope" if rope else "learned"))
        idx, targets = batch()
        logits, loss = split(idx, targets)
        loss.backward()
        out[rope] = (logits.detach(), loss.detach(), {n: p.grad for n, p in split.named_parameters()})
    out["trained"] = three_adamw_steps(parallelize_gpt(whole_gpt()))
    block = TensorParallelGPTBlock(whole_gpt().blocks[0])  # untrained, as the test's
    x = torch.randn(3, 5, CONFIG.n_embd, dtype=torch.double, generator=torch.Generator().manual_seed(2),
                    requires_grad=True)
    with CommDebugMode() as forward_comms:
        y = block(x)
    with CommDebugMode() as backward_comms:
        y.square().sum().backward()
    out["comms"] = tuple({str(op): n for op, n in c.get_comm_counts().items()}
                         for c in (forward_comms, backward_comms))
    out["x_grad"] = x.grad
    return out


@pytest.fixture(scope="module", params=[2, 4])
def ranks(request):
    return request.param, run_ranks(one_step_and_three, request.param)


@pytest.mark.parametrize("rope", [False, True])
def test_logits_loss_and_gradients_equal_the_whole_models(ranks, rope):
    world_size, outs = ranks
    gpt = whole_gpt(positional="rope" if rope else "learned")
    idx, targets = batch()
    logits, loss = gpt(idx, targets)
    loss.backward()
    whole = dict(gpt.named_parameters())
    for rank, out in enumerate(outs):
        logits_tp, loss_tp, grads = out[rope]
        assert torch.allclose(logits_tp, logits, atol=1e-13) and torch.allclose(loss_tp, loss, atol=1e-13)
        assert set(grads) == set(whole)
        split = [n for n, g in grads.items() if g.shape != whole[n].shape]
        # per block: q, k, v and linear1 (weight and bias), out_proj and linear2 (weight)
        assert len(split) == CONFIG.n_layer * 10
        for name, grad in grads.items():
            want = share(whole[name].grad, grad, rank, world_size)
            assert torch.allclose(grad, want, atol=1e-13), (rank, name)


def test_three_adamw_steps_on_the_shares_are_the_shares_of_three_steps(ranks):
    world_size, outs = ranks
    whole = three_adamw_steps(whole_gpt())
    for rank, out in enumerate(outs):
        for name, p in out["trained"].items():
            assert torch.allclose(p, share(whole[name], p, rank, world_size), atol=1e-12), name


def test_a_block_issues_two_all_reduces_forward_and_two_backward(ranks):
    world_size, outs = ranks
    for out in outs:
        forward, backward = out["comms"]
        assert forward == {"c10d.allreduce_": 2} and backward == {"c10d.allreduce_": 2}
    block = whole_gpt().blocks[0]
    x = torch.randn(3, 5, CONFIG.n_embd, dtype=torch.double, generator=torch.Generator().manual_seed(2),
                    requires_grad=True)
    block(x).square().sum().backward()
    for out in outs:  # the input's gradient: f's all-reduce adds the shares' parts
        assert torch.allclose(out["x_grad"], x.grad, atol=1e-12)


class PeerBlock(nn.Module):
    """A GPT block written as PyTorch's tensor-parallel tutorial writes attention: the number of
    heads is read off the projections' outputs (``-1``), so that the same code runs on whole
    layers and on a rank's columns. The weights are copies of ``block``'s."""

    def __init__(self, block: GPTBlock):
        super().__init__()
        self.norm1, self.norm2 = copy.deepcopy(block.norm1), copy.deepcopy(block.norm2)
        attn = block.self_attn
        self.head_dim = attn.head_dim
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (
            copy.deepcopy(m) for m in (attn.q_proj, attn.k_proj, attn.v_proj, attn.out_proj))
        self.ff = copy.deepcopy(block.ff)

    def attend(self, x):
        B, T, _ = x.shape
        q, k, v = (p(x).view(B, T, -1, self.head_dim).transpose(1, 2)
                   for p in (self.q_proj, self.k_proj, self.v_proj))
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out_proj(out.transpose(1, 2).reshape(B, T, -1))

    def forward(self, x):
        x = x + self.attend(self.norm1(x))
        return x + self.ff(self.norm2(x))


def test_the_peer_block_is_the_gpt_block():
    block = whole_gpt().blocks[0]
    x = torch.randn(3, 5, CONFIG.n_embd, dtype=torch.double)
    assert torch.allclose(PeerBlock(block)(x), block(x), atol=1e-13)


def pytorch_tensor_parallel(rank, world_size):
    """PyTorch's own tensor parallelism (DTensors) on the peer block, beside ours."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    block = whole_gpt().blocks[0]
    ours, peer = TensorParallelGPTBlock(block), PeerBlock(block)
    mesh = init_device_mesh("cpu", (world_size,))
    plan = {name: ColwiseParallel() for name in ("q_proj", "k_proj", "v_proj", "ff.linear1")}
    plan |= {name: RowwiseParallel() for name in ("out_proj", "ff.linear2")}
    parallelize_module(peer, mesh, plan)
    x = torch.randn(3, 5, CONFIG.n_embd, dtype=torch.double, generator=torch.Generator().manual_seed(3))
    out = {}
    for name, layer in (("ours", ours), ("pytorch", peer)):
        x_in = x.clone().requires_grad_()
        y = layer(x_in)
        y.square().sum().backward()
        grads = {n.removeprefix("self_attn."): (p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad)
                 for n, p in layer.named_parameters()}
        out[name] = (torch.as_tensor(y.detach()).clone(), x_in.grad, grads)
    return out


def test_equals_pytorch_tensor_parallelism():
    for out in run_ranks(pytorch_tensor_parallel, 2):
        (y, x_grad, grads), (y_pt, x_grad_pt, grads_pt) = out["ours"], out["pytorch"]
        assert torch.allclose(y, y_pt, atol=1e-13) and torch.allclose(x_grad, x_grad_pt, atol=1e-13)
        assert set(grads) == set(grads_pt)
        for name in grads:
            assert grads[name].shape == grads_pt[name].shape, name
            assert torch.allclose(grads[name], grads_pt[name], atol=1e-13), name
