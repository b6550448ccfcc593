"""Checks of chapter 2's exercises (recurrent neural networks)."""

from __future__ import annotations

import ast
import inspect
import textwrap
from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..lm import CharLM, detach_state
from ..rnn import RNNCell
from .core import CallWatch, Wrong, as_tensor, call, close, exercise, expect, float32_work, returned_tensor

F64 = torch.float64


# ---------------------------------------------------------------------------------------------
# One more step of the worked example, eq. (2.3).
# ---------------------------------------------------------------------------------------------

W_IH = [[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]]
W_HH = [[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]
W_Y = [[1.0, 0.0, -1.0]]


def _worked_step(h, x, W_hh=None):
    """The worked example's ReLU cell and read-out, from the state h and the input x."""
    cell = RNNCell(2, 3, nonlinearity="relu").double()
    with torch.no_grad():
        cell.weight_ih.copy_(torch.tensor(W_IH))
        cell.weight_hh.copy_(torch.tensor(W_HH) if W_hh is None else W_hh)
        cell.bias_ih.zero_()
        cell.bias_hh.zero_()
        h_next = cell(torch.tensor([x], dtype=F64), torch.tensor([h], dtype=F64))[0]
    return h_next, torch.tensor(W_Y, dtype=F64) @ h_next


@exercise("ex-ch2-next-step", hints=[
    "Do what the chapter did for h_t: first the input's contribution W_ih x_(t+1), then the "
    "state's W_hh h_t, add them, apply ReLU, and read the output off the new state.",
    "W_ih x_(t+1) is 0.25 times the first column of W_ih minus half the second. W_hh is the "
    "cyclic shift of the worked example: it moves the entry of each slot to the slot above it, "
    "the first to the last.",
    "This time ReLU has work to do: it sets every negative entry of the sum to 0.",
])
def check_next_step(answer):
    expect(isinstance(answer, (tuple, list)) and len(answer) == 2,
           "answer must be a pair (h_next, y_next): the state as a list of 3 numbers, then y")
    h_in = as_tensor(answer[0], "the state h_(t+1)").flatten()
    y = as_tensor(answer[1], "y_(t+1)")
    expect(not (h_in.numel() == 1 and y.numel() == 3),
           "the pair is in the wrong order: give (h_next, y_next), the state first, then y")
    expect(h_in.numel() == 3 and not h_in.is_complex(),
           "the state h_(t+1) must be a list of 3 numbers (the state has 3 units)")
    expect(y.numel() == 1 and not y.is_complex(),
           f"y_(t+1) must be a number, got {tuple(y.shape)} values")
    # the sum is (0.25, -0.5, 0.75): ReLU cuts the -0.5. The input is chosen so that every slip
    # below gives other numbers: ReLU on W_ih x alone, W_hh transposed, either term left out
    h_t, x_next = [1.0, 0.0, 0.0], [0.25, -0.5]
    h_ref, _ = _worked_step(h_t, x_next)
    from_x = torch.tensor(W_IH, dtype=F64) @ torch.tensor(x_next, dtype=F64)
    from_h = torch.tensor(W_HH, dtype=F64) @ torch.tensor(h_t, dtype=F64)
    if not close(h_in, h_ref):
        if close(h_in, from_x + from_h):
            raise Wrong("the state is W_ih x_(t+1) + W_hh h_t without ReLU: the cell applies "
                        "ReLU to the sum")
        if close(h_in, _worked_step(h_t, x_next, torch.tensor(W_HH).T)[0]):
            raise Wrong("the state uses W_hh transposed: row i of W_hh h_t is the dot product of "
                        "row i of W_hh with h_t")
        if close(h_in, torch.relu(from_x) + from_h):
            raise Wrong("ReLU is applied to W_ih x_(t+1) alone, before W_hh h_t is added: the cell "
                        "applies ReLU to the sum of the two")
        if close(h_in, torch.relu(from_x)):
            raise Wrong("the state leaves out the recurrent term W_hh h_t: the old state must "
                        "enter the new one")
        if close(h_in, torch.relu(from_h)):
            raise Wrong("the state leaves out the input term W_ih x_(t+1)")
        raise Wrong("h_(t+1) is not right: add W_ih x_(t+1) and W_hh h_t, then apply ReLU")
    W_y = torch.tensor(W_Y, dtype=F64)
    if close(y.reshape(1), W_y @ torch.tensor(h_t, dtype=F64)):
        raise Wrong("y_(t+1) = 1 is what W_y gives on the old state h_t, and also what adding "
                    "the third entry of h_(t+1) gives: the output is read off the new state with "
                    "W_y = (1, 0, -1), which subtracts the third entry, y_(t+1) = W_y h_(t+1)")
    if close(y.reshape(1), -(W_y @ h_ref)):
        raise Wrong("the state is right but y_(t+1) has the wrong sign: W_y = (1, 0, -1) takes "
                    "the third entry of h_(t+1) from the first")
    expect(close(y.reshape(1), W_y @ h_ref),
           "the state is right but y_(t+1) is not: y_(t+1) = W_y h_(t+1)")


# ---------------------------------------------------------------------------------------------
# Gradient clipping by the global norm, chapter 2's eq. (clip).
# ---------------------------------------------------------------------------------------------


def _model_with_gradients(seed: int, scale: float) -> nn.Module:
    """A small network whose gradients have a known size (scaled by ``scale``), and one frozen
    parameter, whose .grad is None."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3)).double()
    model.register_parameter("frozen", nn.Parameter(torch.ones(2, dtype=F64)))
    x = torch.randn(16, 4, dtype=torch.float64)
    (model(x).square().sum() * scale).backward()
    return model


def _grads(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


#: what ex-ch2-clip's answer may not call: PyTorch's own clipping and its global norm
_CLIPPERS = {f"nn.utils.{name}": getattr(nn.utils, name) for name in (
    "clip_grad_norm_", "clip_grad_norm", "clip_grads_with_norm_", "get_total_norm")
    if hasattr(nn.utils, name)}


def _runs_without_frozen(clip_, seed: int, scale: float, max_norm: float) -> bool:
    """Whether ``clip_`` runs when given only the parameters that have a gradient."""
    model = _model_with_gradients(seed, scale)
    try:
        clip_([p for p in model.parameters() if p.grad is not None], max_norm)
    except Exception:  # noqa: BLE001 - any failure: the frozen parameter was not the cause
        return False
    return True


@exercise("ex-ch2-clip", hints=[
    "The global norm is the length of one long vector made of every gradient: the square root of "
    "the sum of all squared entries, over all parameters together, not per parameter.",
    "If that norm exceeds max_norm, every gradient is multiplied by the same factor "
    "max_norm / norm; otherwise nothing changes. Scale each p.grad itself (p.grad.mul_(c), or "
    "p.grad = p.grad * c), not a copy such as one made by torch.cat, so that the optimiser sees "
    "the clipped gradients.",
    "Skip parameters whose .grad is None, and return the norm measured before clipping. params "
    "may be a generator such as model.parameters(), which can be looped over only once: make it "
    "a list first.",
])
def check_clip(clip_):
    # norms of about 2,700, 0.017 and 640; then 7.4 against 5 and 0.61 against 0.5, just above
    # the threshold (a trigger such as norm > 10 max_norm, or norm^2 > max_norm, fails there)
    cases = [(0, 100.0, 1.0), (1, 1e-3, 1.0), (2, 50.0, 5.0), (3, 0.25, 5.0), (4, 0.025, 0.5)]
    for seed, scale, max_norm in cases:
        model, ref = _model_with_gradients(seed, scale), _model_with_gradients(seed, scale)
        before = _grads(model).clone()
        with CallWatch(_CLIPPERS) as watch:
            try:
                norm = call(clip_, model.parameters(), max_norm, what="clip_")
            except Wrong as error:  # the check's model has a frozen parameter: .grad is None
                if "NoneType" in str(error) and _runs_without_frozen(clip_, seed, scale, max_norm):
                    raise Wrong("clip_ fails on a parameter whose .grad is None (a frozen one, "
                                "as the check's model has): skip such parameters") from None
                raise
        if watch.used:
            raise Wrong(f"clip_ calls {watch.used[0]}: the exercise asks for the clipping by hand, "
                        "the global norm and the scaling")
        ref_norm = nn.utils.clip_grad_norm_(ref.parameters(), max_norm)
        after = _grads(model)
        large = before.norm() > max_norm
        expect(norm is not None, "clip_ returns nothing: it must return the norm before clipping")
        norm = as_tensor(norm, "the norm clip_ returns")
        expect(norm.numel() == 1, "clip_ must return the norm as a number or a 0-dim tensor, got "
               f"{tuple(norm.shape)} values")
        # a norm summed in float32 (a .float() copy of the gradients) is right too, to float32's
        # precision, whether it comes back as a tensor or as a Python float
        expect(close(norm.reshape(()), ref_norm, n=before.numel())
               or close(norm.reshape(()).float(), ref_norm.float(), n=before.numel()),
               "the returned norm is not the global norm of all gradients before clipping")
        if large:
            if torch.equal(after, before) and before.norm() < 2 * max_norm:  # far ones passed
                raise Wrong(f"the gradients are unchanged although their norm, "
                            f"{before.norm().item():.3g}, is above max_norm = {max_norm:g}: "
                            "clip whenever the global norm itself exceeds max_norm (not its "
                            "square, nor a multiple of max_norm)")
            if torch.equal(after, before):
                raise Wrong("the gradients are unchanged although their norm exceeds max_norm: "
                            "scale each p.grad itself (in place, or assigned back), not a copy of "
                            "it (such as one made by torch.cat); and params may be a generator such as "
                            "model.parameters(), which a second loop finds empty")
            alone = _model_with_gradients(seed, scale)  # each parameter clipped on its own
            for param in alone.parameters():
                nn.utils.clip_grad_norm_([param], max_norm)
            if torch.allclose(after, _grads(alone), rtol=1e-5, atol=1e-12):
                raise Wrong("each parameter's gradient is clipped on its own: clipping by the "
                            "global norm measures all of them together and scales them all by "
                            "one factor")
            if torch.equal(after, before.clamp(-max_norm, max_norm)):
                raise Wrong("each entry of the gradients is clamped to [-max_norm, max_norm] on "
                            "its own (element-wise clipping), which changes the gradient's "
                            "direction: scale all the gradients by one factor, max_norm / norm")
            expect(after.norm() <= max_norm * (1 + 1e-6),
                   "the norm is not capped at max_norm: after clipping, the gradients are still "
                   "longer")
            cosine = torch.dot(after, before) / (after.norm() * before.norm())
            expect(cosine > 1 - 1e-9, "clipping changed the direction of the gradient: every "
                   "gradient must be scaled by the same factor")
        else:
            expect(torch.equal(after, before), "gradients shorter than max_norm must stay "
                   "unchanged")
        # PyTorch divides by norm + 1e-6; an answer without that epsilon is right too
        expect(torch.allclose(after, _grads(ref), rtol=1e-5, atol=1e-12),
               "the clipped gradients differ from what clipping by the global norm gives")


# ---------------------------------------------------------------------------------------------
# The entropy of the next-character distribution at temperature tau.
# ---------------------------------------------------------------------------------------------


def _entropy(logits: torch.Tensor, tau: float) -> torch.Tensor:
    log_p = F.log_softmax(logits / tau, dim=-1)
    return -(log_p.exp() * log_p).sum(-1)


def _near(out: torch.Tensor, ref: torch.Tensor) -> bool:
    """Equal at the answer's precision (each entropy sums a handful of terms)."""
    return close(out, ref, n=16)


def _like(out: torch.Tensor, slip: torch.Tensor) -> bool:
    """Equal to a slip's value at float32's precision (a slip computed a little differently,
    such as a log 2 in float32, is still that slip)."""
    return close(out.to(torch.float32), slip, n=16)


@exercise("ex-ch2-temperature", hints=[
    "Divide the logits by tau, turn them into probabilities with a softmax over the last "
    "dimension, then take minus the sum of p log p over that dimension.",
    "Entropy in nats uses the natural logarithm. Take log p from F.log_softmax rather than "
    "from the log of the softmax: a probability that underflows to 0 then gives 0 * log 0 = NaN.",
])
def check_temperature(entropy):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 2, 10, generator=g, dtype=F64) * 2  # (..., V) with two batch dims
    for tau in (0.5, 1.0, 2.0):
        given = logits.clone()
        out = returned_tensor(call(entropy, given, tau, what="entropy"), "entropy")
        if not torch.equal(given, logits):
            scaled = torch.allclose(given, logits / tau) and tau != 1.0
            raise Wrong("entropy changed its argument logits in place"
                        + (" (it divided them by tau: logits /= tau)" if scaled else "")
                        + ": in a loop over tau the next call would get changed logits. "
                        "Compute on a new tensor (logits / tau makes one)")
        ref = _entropy(logits, tau)
        expect(out.shape == ref.shape, f"for logits of shape {tuple(logits.shape)} the entropy "
               f"must have shape {tuple(ref.shape)}: one number per distribution, summed over "
               f"the last dimension; got {tuple(out.shape)}")
        if _near(out, ref):
            continue
        if _like(out, ref / torch.log(torch.tensor(2.0, dtype=F64))):
            raise Wrong("the entropy is in bits: the book measures it in nats, with the natural "
                        "logarithm")
        if _like(out, -ref):
            raise Wrong("the sign is flipped: the entropy is minus the sum of p log p, a number "
                        ">= 0")
        if _like(out, _entropy(logits, 1.0)):
            raise Wrong(f"the temperature does not change your entropy (tau = {tau}): divide the "
                        "logits by tau before the softmax")
        if _like(out, _entropy(logits, 1 / tau)):
            raise Wrong("the logits are multiplied by tau; they must be divided by it")
        # an epsilon in the log, log(p + eps), before the float32 test: its error is of
        # float32's size for eps near 1e-9, and it is the more common slip
        if out.is_floating_point() and out.dtype == F64:
            p = torch.softmax(logits / tau, dim=-1)
            for eps in (1e-12, 1e-10, 1e-9, 1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 5e-4, 1e-3, 1e-2):
                if _near(out, -(p * torch.log(p + eps)).sum(-1)):
                    raise Wrong(f"the entropy at tau = {tau} is that of log(p + {eps:g}): a small "
                                "constant added to p inside the log. Take log p from "
                                "F.log_softmax, which needs none")
        float32_work(out, ref, f"the entropy at tau = {tau}", n=16)
        if out.is_floating_point() and bool(((out - ref).abs() <= 1e-6 * ref.abs()).all()):
            raise Wrong(f"the entropy at tau = {tau} is within a millionth of the right one but "
                        "not equal to it: is a small constant added to p inside the log, "
                        "log(p + 1e-12)? Take log p from F.log_softmax, which needs none")
        raise Wrong(f"the entropy at tau = {tau} is not that of softmax(logits / tau)")
    sharp = torch.tensor([[900.0, 0.0, -900.0]], dtype=F64)
    out = returned_tensor(call(entropy, sharp, 0.5, what="entropy"), "entropy")
    expect(not torch.isnan(out).any(), "your entropy is NaN when a probability underflows to 0 "
           "(logits far apart): compute log p with F.log_softmax")
    expect(_near(out, _entropy(sharp, 0.5)), "for a distribution with all its mass on one "
           "character the entropy must be 0")


# ---------------------------------------------------------------------------------------------
# Find the bug: truncated BPTT without detach.
# ---------------------------------------------------------------------------------------------

TBPTT = {"V": 7, "B": 3, "T": 5, "chunks": 4, "hidden": 8}


class _SGD:
    """Plain SGD with what a training loop calls (zero_grad, step). torch.optim's first step
    imports PyTorch's compiler stack, seconds that a check cannot spend."""

    def __init__(self, params, lr: float):
        self.params, self.lr = list(params), lr
        self.param_groups = [{"params": self.params, "lr": lr}]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:
        for p in self.params:
            if p.grad is not None:
                p.add_(p.grad, alpha=-self.lr)


def _tbptt_setup():
    torch.manual_seed(0)
    model = CharLM(TBPTT["V"], hidden_size=TBPTT["hidden"], cell="rnn", embed_dim=4).double()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(4, TBPTT["V"], (TBPTT["chunks"], TBPTT["B"], TBPTT["T"] + 1), generator=g)
    return model, ids[..., :-1], ids[..., 1:]


@lru_cache(maxsize=3)
def _tbptt_reference(carry: bool, zero: bool = True) -> tuple[torch.Tensor, ...]:
    """The parameters after one pass: state carried and detached (or reset to zeros), the
    gradients zeroed before every backward pass (or left to pile up)."""
    model, inputs, targets = _tbptt_setup()
    optimizer = _SGD(model.parameters(), lr=0.5)
    state = None
    for x, y in zip(inputs, targets, strict=True):
        logits, state = model(x, detach_state(state) if carry else None)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        if zero:
            optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return tuple(p.detach().clone() for p in model.parameters())


def _detach_discarded(fn) -> str:
    """The name of a variable that ``fn`` both assigns and passes to a call (the state it feeds
    back into the model), and whose ``.detach()`` it calls in a statement of its own, so that the
    result is lost; "" if there is none or the source cannot be read."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return ""
    nodes = list(ast.walk(tree))
    assigned = {n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    passed = {a.id for n in nodes if isinstance(n, ast.Call) for a in n.args
              if isinstance(a, ast.Name)}
    for node in nodes:
        if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Attribute)
                and node.value.func.attr == "detach"
                and isinstance(node.value.func.value, ast.Name)
                and node.value.func.value.id in assigned & passed):
            return node.value.func.value.id
    return ""


@exercise("ex-ch2-tbptt-bug", hints=[
    "The loss of the second chunk depends on the parameters through the second chunk's graph, "
    "and through one tensor also on the first chunk's graph, which the first backward pass has "
    "already used up. Which tensor is it?",
    "The state that chunk k hands to chunk k + 1 was computed by chunk k's graph. Cut it before "
    "the next chunk with state = state.detach(): detach returns a new tensor, it does not change "
    "state in place.",
])
def check_detach(tbptt_pass):
    model, inputs, targets = _tbptt_setup()
    optimizer = _SGD(model.parameters(), lr=0.5)
    try:
        losses = call(tbptt_pass, model, inputs, targets, optimizer, what="tbptt_pass")
    except Wrong as err:
        cause = str(err.__cause__)
        if "backward through the graph a second time" in cause:  # the starter: the symptom only
            thrown = _detach_discarded(tbptt_pass)
            if thrown:
                raise Wrong(f"{thrown}.detach() is called but its result is thrown away: "
                            f"detach returns a new tensor and leaves {thrown} as it was; assign "
                            f"it, {thrown} = {thrown}.detach()") from None
            raise Wrong("the backward pass of a later chunk fails with RuntimeError: Trying "
                        "to backward through the graph a second time") from None
        if "does not require grad" in cause:
            raise Wrong("loss.backward() finds no graph: the loss does not depend on the "
                        "parameters (are the logits detached, or computed under no_grad?)"
                        ) from None
        if "modified by an inplace operation" in cause:
            raise Wrong("the backward pass of a later chunk runs on into an earlier chunk's "
                        "graph (kept with retain_graph=True?), and there it meets weights that "
                        "the optimiser has changed since: cut the graph between the chunks "
                        "instead of keeping it") from None
        raise
    if isinstance(losses, torch.Tensor | np.ndarray) and losses.ndim == 1:
        losses = list(losses)  # the losses in one tensor or array: as good as a list
    expect(isinstance(losses, (list, tuple)) and len(losses) == TBPTT["chunks"],
           f"tbptt_pass must return the list of the {TBPTT['chunks']} chunks' losses")
    params = [p.detach() for p in model.parameters()]
    if all(close(p, q, n=64) for p, q in zip(params, _tbptt_reference(True), strict=True)):
        return
    if all(close(p, q, n=64) for p, q in zip(params, _tbptt_reference(False), strict=True)):
        raise Wrong("the state is reset at every chunk: row b of chunk k + 1 continues row b of "
                    "chunk k, so start each chunk from the (detached) final state of the last one")
    start = [p.detach() for p in _tbptt_setup()[0].parameters()]
    if all(torch.equal(p, q) for p, q in zip(params, start, strict=True)):
        raise Wrong("the parameters never moved: is optimizer.step() called after each backward "
                    "pass, and zero_grad before the backward pass rather than between it and "
                    "the step?")
    if all(close(p, q, n=64) for p, q in zip(params, _tbptt_reference(True, zero=False),
                                                 strict=True)):
        raise Wrong("the gradients of earlier chunks are still added in: zero them before each "
                    "backward pass (optimizer.zero_grad()), so that each step follows its own "
                    "chunk's loss")
    raise Wrong("the parameters after the pass differ from truncated BPTT's: visit the chunks in "
                "order, take one optimiser step per chunk, and carry the detached state from each "
                "chunk to the next")


# ---------------------------------------------------------------------------------------------
# The norm of W^k: between the spectral radius and the largest singular value.
# ---------------------------------------------------------------------------------------------


def _power_norms(W: torch.Tensor, K: int, ord=2, start: int = 1) -> torch.Tensor:
    return torch.stack([torch.linalg.matrix_norm(torch.linalg.matrix_power(W, k), ord=ord)
                        for k in range(start, K + start)])


@exercise("ex-ch2-bound", hints=[
    "For (a): apply ||AB|| <= ||A|| ||B|| to each factor diag(sigma_h'(a_j)) W_hh of the product, "
    "then to the product of its T - t factors; the norm of a diagonal matrix is its largest "
    "entry in absolute value.",
    "For each k, raise W to the power k and take the norm that the bound is about: the spectral "
    "norm, the largest singular value of the matrix.",
    "torch.linalg.matrix_power(W, k) gives W^k and torch.linalg.matrix_norm(A, ord=2) its "
    "spectral norm; the default ord of matrix_norm is the Frobenius norm, which is not it.",
])
def check_bound(power_norms):
    g = torch.Generator().manual_seed(0)
    cases = [torch.tensor([[0.5, 3.0], [0.0, 0.5]], dtype=F64),
             torch.randn(4, 4, generator=g, dtype=F64) / 2]
    for W in cases:
        K = 12
        out = as_tensor(call(power_norms, W.clone(), K, what="power_norms"),
                        "what power_norms returns")
        ref = _power_norms(W, K)
        expect(out.shape == ref.shape, f"for K = {K} power_norms must return {K} numbers, "
               f"||W^1||, ..., ||W^K||; got shape {tuple(out.shape)}")
        if close(out, ref, n=16):
            continue
        rho = torch.linalg.eigvals(W).abs().max()
        sigma = torch.linalg.matrix_norm(W, ord=2)
        ks = torch.arange(1, K + 1, dtype=F64)
        if close(out, rho**ks, n=16):
            raise Wrong("these are powers of the spectral radius, rho^k: they give the long-run "
                        "rate, but the gradient sees the norm of the matrix W^k itself")
        if close(out, sigma**ks, n=16):
            raise Wrong("these are powers of the largest singular value, the bound "
                        "sigma_max^k: compute the norm of the matrix power W^k")
        if close(out, _power_norms(W, K, ord="fro"), n=16):
            raise Wrong("this is the Frobenius norm of W^k; the bound is about the spectral norm "
                        "(ord=2), the largest singular value")
        if close(out, _power_norms(W, K, start=0), n=16):
            raise Wrong("off by one: the first entry must be ||W^1||, not ||W^0|| = 1")
        entrywise = torch.stack([torch.linalg.matrix_norm(W**k, ord=2) for k in range(1, K + 1)])
        if close(out, entrywise, n=16):
            raise Wrong("W ** k raises every entry of W to the power k; the matrix power, W "
                        "multiplied by itself k times, is torch.linalg.matrix_power(W, k)")
        raise Wrong("the norms of W^k are not right: raise W to the power k, then take the "
                    "spectral norm")


# ---------------------------------------------------------------------------------------------
# Backpropagation through time in reverse mode, by hand.
# ---------------------------------------------------------------------------------------------


def _bptt_problem(seed: int, m: int = 4, d: int = 3, n: int = 2, T: int = 6):
    g = torch.Generator().manual_seed(seed)
    W_ih = torch.randn(m, d, generator=g, dtype=F64)
    W_hh = 0.6 * torch.randn(m, m, generator=g, dtype=F64)
    W_y = torch.randn(n, m, generator=g, dtype=F64)
    xs, ys = torch.randn(T, d, generator=g, dtype=F64), torch.randn(T, n, generator=g, dtype=F64)
    return W_ih, W_hh, W_y, xs, ys


def _bptt_variant(W_ih, W_hh, W_y, xs, ys, derivative="state", carry=True, average=True,
                  previous=True, transpose=True, slope_on_carry=True, carry_da=True):
    """Reverse-mode BPTT with one of the typical mistakes switched on."""
    T, m = xs.shape[0], W_hh.shape[0]
    hs, pre = [torch.zeros(m, dtype=F64)], []
    for t in range(T):
        pre.append(W_ih @ xs[t] + W_hh @ hs[-1])
        hs.append(torch.tanh(pre[-1]))
    scale = 1 / T if average else 1.0
    dW_ih, dW_hh, dW_y = torch.zeros_like(W_ih), torch.zeros_like(W_hh), torch.zeros_like(W_y)
    delta_next = torch.zeros(m, dtype=F64)   # dL/dh_t from the steps after t
    for t in range(T, 0, -1):
        err = scale * (W_y @ hs[t] - ys[t - 1])
        dW_y += torch.outer(err, hs[t])
        dh = W_y.T @ err + (delta_next if carry else 0)
        slope = {"state": 1 - hs[t] ** 2, "pre": 1 - pre[t - 1] ** 2,
                 "none": torch.ones(m, dtype=F64)}[derivative]
        da = slope * dh if slope_on_carry else slope * (W_y.T @ err) + delta_next
        dW_ih += torch.outer(da, xs[t - 1])
        dW_hh += torch.outer(da, hs[t - 1] if previous else hs[t])
        delta_next = (W_hh.T if transpose else W_hh) @ (da if carry_da else dh)
    return dW_ih, dW_hh, dW_y


_BPTT_MISTAKES = [
    ({"derivative": "pre"}, "the derivative of tanh is taken at the wrong place: tanh'(a_t) = "
     "1 - tanh(a_t)^2 = 1 - h_t^2, written with the state h_t, not 1 - a_t^2 with the "
     "pre-activation"),
    ({"derivative": "none"}, "the derivative of tanh is missing: every step back multiplies by "
     "diag(1 - h_t^2) before W_hh^T"),
    ({"carry": False}, "only the direct terms are there: the gradient at h_t must also carry what "
     "step t + 1 sends back through W_hh^T"),
    ({"average": False}, "off by a factor T: the loss is averaged over the T steps"),
    ({"previous": False}, "dW_hh pairs the error at step t with h_t; W_hh multiplies h_(t-1)"),
    ({"transpose": False}, "what step t sends back to h_(t-1) is multiplied by W_hh: the chain "
     "rule multiplies by its transpose, W_hh^T (dL/dh_(t-1) = W_hh^T dL/da_t)"),
    ({"slope_on_carry": False}, "tanh' multiplies only the output's term: dL/da_t = "
     "diag(1 - h_t^2) (W_y^T e_t + what step t + 1 sends back), both terms"),
    ({"carry_da": False}, "what step t sends back is W_hh^T dL/dh_t: it must be W_hh^T dL/da_t, "
     "after the multiplication by tanh'(a_t) = 1 - h_t^2"),
]


def _diagnose_bptt(out, problem) -> None:
    """Name the typical mistake that ``out`` makes, or say which gradients are wrong."""
    for variant, message in _BPTT_MISTAKES:
        alt = _bptt_variant(*problem, **variant)
        if all(close(o, a, n=64) for o, a in zip(out, alt, strict=True)):
            raise Wrong(message)
    ref = _bptt_variant(*problem)
    n_out = problem[2].shape[0]  # W_y: (n, m)
    for factor, message in (
        (2.0, "every gradient is twice the right one: the chapter's loss is half the squared "
              "error, 1/2 |W_y h_t - y_t|^2, averaged over the T steps"),
        (2.0 / n_out, f"every gradient is 2/n = 2/{n_out} times the right one: that is the loss "
                      "of F.mse_loss, which also averages over the n outputs; the chapter's loss "
                      "is half the squared error summed over the outputs, 1/2 |W_y h_t - y_t|^2, "
                      "averaged over the T steps"),
        (1.0 / n_out, f"every gradient is 1/n = 1/{n_out} of the right one: the chapter's loss "
                      "sums the squared error over the n outputs (1/2 |W_y h_t - y_t|^2) and "
                      "averages only over the T steps"),
        (0.5, "every gradient is half the right one: the derivative of 1/2 e^2 is e (the 1/2 "
              "cancels the square's 2), so the error enters the sweep as e_t = W_y h_t - y_t"),
    ):
        if all(close(o, factor * r, n=64) for o, r in zip(out, ref, strict=True)):
            raise Wrong(message)
    if all(close(o, -r, n=64) for o, r in zip(out, ref, strict=True)):
        raise Wrong("every gradient has the wrong sign: the error is the prediction minus the "
                    "target, e_t = W_y h_t - y_t")
    wrong = [name for o, r, name in zip(out, ref, ("dW_ih", "dW_hh", "dW_y"), strict=True)
             if not close(o, r, n=64)]
    transposed = [name for o, r, name in zip(out, ref, ("dW_ih", "dW_hh", "dW_y"), strict=True)
                  if name in wrong and o.shape == r.T.shape and close(o, r.T, n=64)]
    if transposed and len(transposed) == len(wrong):  # a_t h_(t-1)^T written the other way round
        raise Wrong(f"{' and '.join(transposed)} {'is' if len(transposed) == 1 else 'are'} the "
                    "transpose of the gradient: the gradient of W in W h is the outer product "
                    "(error at the output) times h^T, in that order")
    right = [name for name in ("dW_ih", "dW_hh", "dW_y") if name not in wrong]
    for o, r, name in zip(out, ref, ("dW_ih", "dW_hh", "dW_y"), strict=True):
        if name in wrong and o.shape == r.shape:  # the sweep, run in float32 in part
            float32_work(o, r, name, n=64)
    near = all(torch.allclose(o.to(F64), r, rtol=1e-4, atol=1e-7)
               for o, r in zip(out, ref, strict=True))
    if near:  # an estimate, such as finite differences: right to a few digits, not to rounding
        raise Wrong(f"{' and '.join(wrong)} {'differs' if len(wrong) == 1 else 'differ'} from "
                    "the gradient of the loss by more than float64 rounding, although by "
                    "little: the exercise asks for the exact gradients of the backward sweep, "
                    "not an estimate")
    raise Wrong(f"{' and '.join(wrong)} {'is' if len(wrong) == 1 else 'are'} not the gradient of "
                "the loss" + (f" ({' and '.join(right)} {'is' if len(right) == 1 else 'are'} "
                              "right)" if right else ""))


def _without_autograd(bptt, *args):
    """``bptt(*args)``, and a :class:`Wrong` if it builds an autograd graph on the way: the inputs
    do not require grad, and any operation that saves a tensor for a backward pass (which every
    use of autograd on this loss does) is seen by a saved-tensors hook."""
    saved = []

    def pack(t):
        saved.append(t.shape)
        return t

    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = call(bptt, *args, what="bptt")
    except Wrong as err:
        if "saved tensor hooks" in str(err):  # torch.func's transforms refuse the hook
            raise Wrong("bptt computes the gradients with torch.func, which is autograd: the "
                        "exercise asks for the backward sweep written out by hand") from None
        raise
    graph = saved or (isinstance(out, (tuple, list))
                      and any(isinstance(o, torch.Tensor) and o.requires_grad for o in out))
    expect(not graph, "bptt builds an autograd graph (a tensor that requires grad goes "
           "through tanh or a product): the exercise asks for the backward sweep written out "
           "by hand, without autograd")
    return out


@exercise("ex-ch2-bptt", hints=[
    "Run the forward pass and keep every state. Then walk back from t = T to 1 carrying one "
    "vector, the gradient of L with respect to h_t, made of two parts: what the output at step t "
    "sends back, and what step t + 1 sent back to h_t.",
    "The output at step t sends back W_y^T times its error (divided by T, as the loss is an "
    "average). Step t + 1 sends back through W_hh^T what reached its pre-activation a_(t+1). "
    "Between h_t and a_t stands tanh, whose derivative you can write with h_t alone.",
    "Each matrix collects one outer product per step: the gradient at what it produces (a_t for "
    "W_ih and W_hh, the output for W_y) times the vector it multiplies (x_t, h_(t-1), h_t).",
])
def check_bptt(bptt):
    for seed, n in ((2, 3), (0, 2), (1, 2)):  # n = 3 first: 1/n, 2/n and 1/2 differ there
        W_ih, W_hh, W_y, xs, ys = _bptt_problem(seed, n=n)
        out = _without_autograd(bptt, W_ih.clone(), W_hh.clone(), W_y.clone(), xs.clone(),
                                ys.clone())
        expect(isinstance(out, (tuple, list)) and len(out) == 3,
               "bptt must return three tensors: (dW_ih, dW_hh, dW_y)")
        out = [as_tensor(o, "each gradient bptt returns") for o in out]
        params = [p.clone().requires_grad_() for p in (W_ih, W_hh, W_y)]
        h, loss = torch.zeros(W_hh.shape[0], dtype=F64), 0.0
        for t in range(xs.shape[0]):
            h = torch.tanh(params[0] @ xs[t] + params[1] @ h)
            loss = loss + 0.5 * ((params[2] @ h - ys[t]) ** 2).sum()
        ref = torch.autograd.grad(loss / xs.shape[0], params)
        for o, r, name in zip(out, ref, ("dW_ih", "dW_hh", "dW_y"), strict=True):
            expect(o.shape == r.shape, f"{name} must have the shape of its matrix, "
                   f"{tuple(r.shape)}; got {tuple(o.shape)}")
        if all(close(o, r, n=64) for o, r in zip(out, ref, strict=True)):
            continue
        _diagnose_bptt(out, (W_ih, W_hh, W_y, xs, ys))
