"""Chapter 2's exercise checks (seqbook.exercises.ch02): each passes a right answer, calls the
untouched starter "not attempted" (the find-the-bug starter gets its bug named), and names what is
wrong in each typical wrong answer."""

import numpy as np
import torch
import torch.nn.functional as F
from test_exercise_cells import FIX_WORDS
from torch import nn

from seqbook.exercises import check
from seqbook.lm import CharLM


def starter(*args):
    raise NotImplementedError  # your code here


# --- one more step of the worked example ---------------------------------------------------------


def test_next_step():
    name = "ex-ch2-next-step"
    # x_(t+1) = (0.25, -0.5): the sum (0.25, -0.5, 0.75), which ReLU makes (0.25, 0, 0.75);
    # y = 0.25 - 0.75
    assert check(name, ([0.25, 0.0, 0.75], -0.5))
    assert check(name, (torch.tensor([0.25, 0.0, 0.75]), torch.tensor(-0.5)))
    assert check(name, (torch.tensor([[0.25, 0.0, 0.75]]), torch.tensor([-0.5])))  # (1, 3), (1,)
    assert check(name, ((1 / 4, 0, 3 / 4), -1 / 2))
    assert check(name, (np.array([0.25, 0.0, 0.75], dtype=np.float32), np.float64(-0.5)))
    assert check(name, ...).status == "not attempted"
    no_relu = check(name, ([0.25, -0.5, 0.75], -0.5))  # ReLU forgotten
    assert no_relu.status == "fail" and "without ReLU" in no_relu.message, no_relu
    assert "ReLU is applied to W_ih x_(t+1) alone" in check(name, ([0.25, 0.0, 1.0], -0.75)).message
    assert "transposed" in check(name, ([0.25, 0.5, 0.0], 0.25)).message
    assert "leaves out the recurrent term" in check(name, ([0.25, 0.0, 0.0], 0.25)).message
    assert "leaves out the input term" in check(name, ([0.0, 0.0, 1.0], -1.0)).message
    assert "wrong sign" in check(name, ([0.25, 0.0, 0.75], 0.5)).message
    assert "y_(t+1) = W_y h_(t+1)" in check(name, ([0.25, 0.0, 0.75], 3.0)).message
    old_state = check(name, ([0.25, 0.0, 0.75], 1.0)).message  # or the third entry added
    assert "old state h_t" in old_state and "subtracts the third entry" in old_state
    assert "list of 3 numbers" in check(name, ([0.0, 1.0], 1.0)).message
    assert "must be a pair" in check(name, 3).message
    assert "wrong order" in check(name, (-0.5, [0.25, 0.0, 0.75])).message  # (y, h)
    # the worked example's own step repeated, or the old exercise's input (-1, 1), is not it
    assert not check(name, ([1.0, 0.0, 0.0], 1.0))
    assert not check(name, ([0.0, 1.0, 2.0], -2.0))


# --- gradient clipping ---------------------------------------------------------------------------


def test_clip_refuses_pytorch_s_own_clipping():
    for name in ("clip_grad_norm_", "get_total_norm"):
        if not hasattr(nn.utils, name):
            continue
        if name == "clip_grad_norm_":
            def answer(params, max_norm):
                return nn.utils.clip_grad_norm_(params, max_norm)
        else:
            def answer(params, max_norm):  # the norm from PyTorch, the scaling by hand
                params = [p for p in params if p.grad is not None]
                norm = nn.utils.get_total_norm([p.grad for p in params])
                for p in params:
                    p.grad.mul_(min(1.0, max_norm / (norm.item() + 1e-6)))
                return norm
        result = check("ex-ch2-clip", answer)
        assert result.status == "fail" and f"calls nn.utils.{name}" in result.message, result


def test_clip():
    def right(params, max_norm):
        params = [p for p in params if p.grad is not None]
        norm = torch.sqrt(sum((p.grad**2).sum() for p in params))
        for p in params:
            p.grad.mul_(min(1.0, max_norm / (norm.item() + 1e-6)))
        return norm

    def per_parameter(params, max_norm):  # a classic mistake: each gradient clipped alone
        norms = []
        for p in (p for p in params if p.grad is not None):
            n = p.grad.norm()
            p.grad.mul_(min(1.0, max_norm / (n.item() + 1e-6)))
            norms.append(n)
        return torch.sqrt(sum(n**2 for n in norms))

    def always(params, max_norm):  # scales even short gradients up to max_norm
        params = [p for p in params if p.grad is not None]
        norm = torch.sqrt(sum((p.grad**2).sum() for p in params))
        for p in params:
            p.grad.mul_(max_norm / norm)
        return norm

    def exact(params, max_norm):  # eq. (clip) without PyTorch's 1e-6: right too
        grads = [p.grad for p in params if p.grad is not None]
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
        if norm > max_norm:
            for g in grads:
                g.mul_(max_norm / norm)
        return norm.item()

    def float32_norm_as_float64(params, max_norm):  # summed in float32, returned as float64
        params = [p for p in params if p.grad is not None]
        norm = torch.sqrt(sum((p.grad.float() ** 2).sum() for p in params)).double()
        for p in params:
            p.grad.mul_(min(1.0, max_norm / (norm.item() + 1e-6)))
        return norm

    assert check("ex-ch2-clip", float32_norm_as_float64)  # right, as the Python-float form below

    def clamped(params, max_norm):  # a reader's slip: Mikolov's element-wise clipping
        params = [p for p in params if p.grad is not None]
        norm = torch.sqrt(sum((p.grad**2).sum() for p in params))
        for p in params:
            p.grad.clamp_(-max_norm, max_norm)
        return norm

    assert "(element-wise clipping)" in check("ex-ch2-clip", clamped).message

    def two_passes(params, max_norm):  # the review's case: the second loop finds nothing
        norm = torch.sqrt(sum((p.grad**2).sum() for p in params if p.grad is not None))
        for p in params:
            if p.grad is not None:
                p.grad.mul_(min(1.0, max_norm / norm.item()))
        return norm

    def grad_none_kept(params, max_norm):  # a frozen parameter's .grad is None
        params = list(params)
        norm = torch.sqrt(sum((p.grad**2).sum() for p in params))
        for p in params:
            p.grad.mul_(min(1.0, max_norm / norm.item()))
        return norm

    def after(params, max_norm):  # returns the norm after clipping
        params = [p for p in params if p.grad is not None]
        right(params, max_norm)
        return torch.sqrt(sum((p.grad**2).sum() for p in params))

    def float32_norm(params, max_norm):  # the norm taken in float32, returned as a Python float
        grads = [p.grad for p in params if p.grad is not None]
        norm = torch.sqrt(sum((g.float() ** 2).sum() for g in grads)).item()
        if norm > max_norm:
            for g in grads:
                g.mul_(max_norm / norm)
        return norm

    def scales_a_copy(params, max_norm):  # clips one long copy, never written back
        grads = torch.cat([p.grad.flatten() for p in params if p.grad is not None])
        norm = grads.norm()
        grads.mul_(min(1.0, max_norm / norm.item()))
        return norm

    assert check("ex-ch2-clip", right)
    assert check("ex-ch2-clip", exact)
    assert check("ex-ch2-clip", float32_norm)
    assert "not a copy of it" in check("ex-ch2-clip", scales_a_copy).message
    # PyTorch's own clipping is what the exercise asks to write: refused, by name
    assert "calls nn.utils.clip_grad_norm_" in check(
        "ex-ch2-clip", lambda params, m: torch.nn.utils.clip_grad_norm_(list(params), m)).message
    assert check("ex-ch2-clip", starter).status == "not attempted"
    assert "generator" in check("ex-ch2-clip", two_passes).message
    assert ".grad is None" in check("ex-ch2-clip", grad_none_kept).message
    assert "before clipping" in check("ex-ch2-clip", after).message
    assert "clipped on its own" in check("ex-ch2-clip", per_parameter).message
    assert "must stay unchanged" in check("ex-ch2-clip", always).message
    assert "returns nothing" in check("ex-ch2-clip", lambda p, m: None).message

    def trigger(compare):  # right but for when it clips: only a wrong trigger tells them apart
        def clip_(params, max_norm):
            params = [p for p in params if p.grad is not None]
            norm = torch.sqrt(sum((p.grad**2).sum() for p in params))
            if compare(norm, max_norm):
                for p in params:
                    p.grad.mul_(max_norm / (norm + 1e-6))
            return norm
        return clip_

    for compare in (lambda n, m: n > 10 * m, lambda n, m: n**2 > m):
        assert "is above max_norm" in check("ex-ch2-clip", trigger(compare)).message
    assert check("ex-ch2-clip", trigger(lambda n, m: n > m))


# --- entropy at a temperature --------------------------------------------------------------------


def test_temperature():
    name = "ex-ch2-temperature"

    def right(logits, tau):
        log_p = F.log_softmax(logits / tau, dim=-1)
        return -(log_p.exp() * log_p).sum(-1)

    def naive(logits, tau):  # right, but NaN once a probability underflows
        p = F.softmax(logits / tau, dim=-1)
        return -(p * p.log()).sum(-1)

    def last_dim_1(logits, tau):  # dim=1 is the last dimension of a 2-D batch only
        log_p = F.log_softmax(logits / tau, dim=1)
        return -(log_p.exp() * log_p).sum(1)

    def via_logsumexp(logits, tau):  # H = logsumexp(s) - E_p[s], with s = logits / tau
        s = logits / tau
        return torch.logsumexp(s, -1) - (F.softmax(s, -1) * s).sum(-1)

    assert check(name, right)
    assert check(name, via_logsumexp)

    def divides_in_place(logits, tau):  # right once, but the caller's logits are changed
        logits /= tau
        return right(logits, 1.0)

    assert "logits /= tau" in check(name, divides_in_place).message

    def shifts_in_place(logits, tau):  # the max subtracted in place: right, but changed
        logits -= logits.amax(-1, keepdim=True)
        return right(logits, tau)

    message = check(name, shifts_in_place).message
    assert "in place" in message and "/= tau" not in message
    assert check(name, lambda z, t: torch.distributions.Categorical(logits=z / t).entropy())
    assert check(name, lambda z, t: right(z.float(), t))  # float32
    assert check(name, lambda z, t: right(z, t).numpy())
    assert check(name, starter).status == "not attempted"
    assert "shape (3, 2)" in check(name, last_dim_1).message
    assert "NaN" in check(name, naive).message
    assert "in bits" in check(name, lambda z, t: right(z, t) / torch.log(torch.tensor(2.0))).message
    assert "sign is flipped" in check(name, lambda z, t: -right(z, t)).message
    assert "does not change" in check(name, lambda z, t: right(z, 1.0)).message
    assert "multiplied by tau" in check(name, lambda z, t: right(z * t, 1.0)).message
    assert "one number per distribution" in check(name, lambda z, t: F.softmax(z, -1)).message

    def eps_in_log(logits, tau):  # a guard inside the log: off by about 1e-11 nats
        p = F.softmax(logits / tau, dim=-1)
        return -(p * torch.log(p + 1e-12)).sum(-1)

    assert "log(p + 1e-12)" in check(name, eps_in_log).message
    for eps in (1e-9, 1e-6):  # larger constants: named too, not taken for float32 work
        def eps_larger(logits, tau, eps=eps):
            p = F.softmax(logits / tau, dim=-1)
            return -(p * torch.log(p + eps)).sum(-1)

        assert f"log(p + {eps:g})" in check(name, eps_larger).message
    assert check(name, lambda z, t: eps_in_log(z.float(), t))  # below float32's rounding
    float32_cast_back = check(name, lambda z, t: right(z.float(), t).double()).message
    assert "right to float32's precision only" in float32_cast_back


# --- find the bug: truncated BPTT ----------------------------------------------------------------


def make_pass(carry=True, detach=True, assign=True, retain=False, zero_late=False, zero=True,
              detach_logits=False):
    def tbptt_pass(model, inputs, targets, optimizer):
        state, losses = None, []
        for x, y in zip(inputs, targets, strict=True):
            logits, state = model(x, state)
            if detach_logits:
                logits = logits.detach()
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
            if zero and not zero_late:
                optimizer.zero_grad()
            loss.backward(retain_graph=retain)
            if zero_late:  # the slip: the step then finds no gradient
                optimizer.zero_grad()
            optimizer.step()
            losses.append(loss.item())
            if not carry:
                state = None
            elif detach and assign:
                state = state.detach()
            elif detach:
                state.detach()  # a no-op: the result is thrown away
        return losses

    return tbptt_pass


def test_detach():
    name = "ex-ch2-tbptt-bug"
    assert check(name, make_pass())
    assert check(name, starter).status == "not attempted"
    def no_detach(model, inputs, targets, optimizer):  # the starter's bug
        state, losses = None, []
        for x, y in zip(inputs, targets, strict=True):
            logits, state = model(x, state)
            loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            loss.detach()  # a bare detach, of the loss: not taken for the state's
            losses.append(loss.item())
        return losses

    bug = check(name, no_detach)  # the starter: the symptom, not the fix
    assert bug.status == "fail" and "backward through the graph a second time" in bug.message
    assert not FIX_WORDS.search(bug.message), bug
    # the state's detach() with its result thrown away: named
    assert "its result is thrown away" in check(name, make_pass(assign=False)).message
    assert "retain_graph=True" in check(name, make_pass(detach=False, retain=True)).message
    assert "reset at every chunk" in check(name, make_pass(carry=False)).message
    assert "never moved" in check(name, make_pass(zero_late=True)).message
    assert "still added in" in check(name, make_pass(zero=False)).message
    assert "logits detached" in check(name, make_pass(detach_logits=True)).message
    assert "list of the 4 chunks' losses" in check(name, lambda *a: make_pass()(*a)[:1]).message

    def shuffled(model, inputs, targets, optimizer):
        order = [1, 0, 3, 2]
        return make_pass()(model, inputs[order], targets[order], optimizer)

    assert "visit the chunks in order" in check(name, shuffled).message

    def detach_in_place(model, inputs, targets, optimizer):  # right too
        state, losses = None, []
        for x, y in zip(inputs, targets, strict=True):
            if state is not None:
                state.detach_()
            logits, state = model(x, state)
            loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss)
        return losses

    assert check(name, detach_in_place)


def test_detach_takes_a_real_optimizer_too():
    """The check hands the learner its own small SGD; a pass written for torch.optim runs on
    it the same way."""
    torch.manual_seed(0)
    model = CharLM(9, hidden_size=8, cell="rnn", embed_dim=4).double()
    ids = torch.randint(4, 9, (3, 2, 6))
    from seqbook.exercises.ch02 import _SGD

    twin = CharLM(9, hidden_size=8, cell="rnn", embed_dim=4).double()
    twin.load_state_dict(model.state_dict())
    make_pass()(model, ids[..., :-1], ids[..., 1:], torch.optim.SGD(model.parameters(), 0.5))
    make_pass()(twin, ids[..., :-1], ids[..., 1:], _SGD(twin.parameters(), 0.5))
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(p, q)


# --- the norms of W^k ----------------------------------------------------------------------------


def test_bound():
    name = "ex-ch2-bound"

    def right(W, K):
        return torch.stack([torch.linalg.matrix_norm(torch.linalg.matrix_power(W, k), ord=2)
                            for k in range(1, K + 1)])

    def radius(W, K):
        return torch.linalg.eigvals(W).abs().max() ** torch.arange(1, K + 1, dtype=W.dtype)

    def float32_list(W, K):  # right, in float32, returned as Python floats (.item())
        return [torch.linalg.matrix_norm(torch.linalg.matrix_power(W.float(), k), ord=2).item()
                for k in range(1, K + 1)]

    assert check(name, float32_list)

    def singular(W, K):
        return torch.linalg.matrix_norm(W, ord=2) ** torch.arange(1, K + 1, dtype=W.dtype)

    def frobenius(W, K):
        return torch.stack([torch.linalg.matrix_norm(torch.linalg.matrix_power(W, k))
                            for k in range(1, K + 1)])

    def from_zero(W, K):
        return torch.stack([torch.linalg.matrix_norm(torch.linalg.matrix_power(W, k), ord=2)
                            for k in range(K)])

    def running(W, K):  # a running product and the largest singular value, as a list
        out, P = [], torch.eye(W.shape[0], dtype=W.dtype)
        for _ in range(K):
            P = P @ W
            out.append(torch.linalg.svdvals(P)[0].item())
        return out

    assert check(name, right)
    assert check(name, running)
    assert check(name, lambda W, K: right(W.float(), K))
    assert check(name, lambda W, K: np.array(running(W, K)))
    assert check(name, starter).status == "not attempted"
    assert "spectral radius" in check(name, radius).message
    assert "largest singular value" in check(name, singular).message
    assert "Frobenius" in check(name, frobenius).message
    assert "off by one" in check(name, from_zero).message
    assert "12 numbers" in check(name, lambda W, K: right(W, K)[:-1]).message


# --- reverse-mode BPTT ---------------------------------------------------------------------------


def bptt(W_ih, W_hh, W_y, xs, ys, slope="state", carry=True, average=True, previous=True,
         transpose=True, slope_on_carry=True, carry_da=True):
    T, m = xs.shape[0], W_hh.shape[0]
    hs, pre = [torch.zeros(m, dtype=xs.dtype)], []
    for t in range(T):
        pre.append(W_ih @ xs[t] + W_hh @ hs[-1])
        hs.append(torch.tanh(pre[-1]))
    dW_ih, dW_hh, dW_y = torch.zeros_like(W_ih), torch.zeros_like(W_hh), torch.zeros_like(W_y)
    delta = torch.zeros(m, dtype=xs.dtype)
    for t in range(T, 0, -1):
        e = (W_y @ hs[t] - ys[t - 1]) / (T if average else 1)
        dW_y += torch.outer(e, hs[t])
        dh = W_y.T @ e + (delta if carry else 0)
        d = {"state": 1 - hs[t] ** 2, "pre": 1 - pre[t - 1] ** 2, "none": 1.0}[slope]
        da = d * dh if slope_on_carry else d * (W_y.T @ e) + delta
        dW_ih += torch.outer(da, xs[t - 1])
        dW_hh += torch.outer(da, hs[t - 1] if previous else hs[t])
        delta = (W_hh.T if transpose else W_hh) @ (da if carry_da else dh)
    return dW_ih, dW_hh, dW_y


def float32_buffers(W_ih, W_hh, W_y, xs, ys):  # right: float64 updates into torch.zeros buffers
    T = xs.shape[0]
    hs = [torch.zeros(W_hh.shape[0], dtype=xs.dtype)]
    for t in range(T):
        hs.append(torch.tanh(W_ih @ xs[t] + W_hh @ hs[-1]))
    dW_ih, dW_hh, dW_y = torch.zeros(W_ih.shape), torch.zeros(W_hh.shape), torch.zeros(W_y.shape)
    delta = 0
    for t in range(T, 0, -1):
        e = (W_y @ hs[t] - ys[t - 1]) / T
        da = (1 - hs[t] ** 2) * (W_y.T @ e + delta)
        dW_y += torch.outer(e, hs[t])
        dW_ih += torch.outer(da, xs[t - 1])
        dW_hh += torch.outer(da, hs[t - 1])
        delta = W_hh.T @ da
    return dW_ih, dW_hh, dW_y


def rows(W_ih, W_hh, W_y, xs, ys):  # right: the row-vector form, a whole matrix at a time
    T = xs.shape[0]
    H = [torch.zeros(W_hh.shape[0], dtype=xs.dtype)]
    for t in range(T):
        H.append(torch.tanh(xs[t] @ W_ih.T + H[-1] @ W_hh.T))
    H = torch.stack(H)  # (T + 1, m)
    E = (H[1:] @ W_y.T - ys) / T  # (T, n)
    A = torch.zeros(T, W_hh.shape[0], dtype=xs.dtype)
    carry = torch.zeros(W_hh.shape[0], dtype=xs.dtype)
    for t in reversed(range(T)):
        A[t] = (1 - H[t + 1] ** 2) * (E[t] @ W_y + carry)
        carry = A[t] @ W_hh
    return (A.T @ xs).numpy(), A.T @ H[:-1], E.T @ H[1:]


def with_autograd(W_ih, W_hh, W_y, xs, ys):  # the review's case: the exercise forbids it
    params = [W.clone().requires_grad_() for W in (W_ih, W_hh, W_y)]
    h, loss = torch.zeros(W_hh.shape[0], dtype=xs.dtype), 0
    for t in range(xs.shape[0]):
        h = torch.tanh(params[0] @ xs[t] + params[1] @ h)
        loss = loss + 0.5 * ((params[2] @ h - ys[t]) ** 2).sum()
    return torch.autograd.grad(loss / xs.shape[0], params)


def with_backward(W_ih, W_hh, W_y, xs, ys):
    params = [W.clone().requires_grad_() for W in (W_ih, W_hh, W_y)]
    h, loss = torch.zeros(W_hh.shape[0], dtype=xs.dtype), 0
    for t in range(xs.shape[0]):
        h = torch.tanh(params[0] @ xs[t] + params[1] @ h)
        loss = loss + 0.5 * ((params[2] @ h - ys[t]) ** 2).sum()
    (loss / xs.shape[0]).backward()
    return tuple(p.grad for p in params)


def with_func(W_ih, W_hh, W_y, xs, ys):
    def loss(W_ih, W_hh, W_y):
        h, total = torch.zeros(W_hh.shape[0], dtype=xs.dtype), 0
        for t in range(xs.shape[0]):
            h = torch.tanh(W_ih @ xs[t] + W_hh @ h)
            total = total + 0.5 * ((W_y @ h - ys[t]) ** 2).sum()
        return total / xs.shape[0]

    return torch.func.grad(loss, argnums=(0, 1, 2))(W_ih, W_hh, W_y)


def test_bptt():
    name = "ex-ch2-bptt"
    assert check(name, bptt)
    assert check(name, float32_buffers)
    assert check(name, rows)
    assert check(name, starter).status == "not attempted"
    for autograd in (with_autograd, with_backward, with_func):
        result = check(name, autograd)
        assert result.status == "fail" and "without autograd" in result.message or \
            "torch.func" in result.message, (autograd.__name__, result)
    assert "wrong place" in check(name, lambda *a: bptt(*a, slope="pre")).message
    assert "derivative of tanh is missing" in check(name, lambda *a: bptt(*a, slope="none")).message
    assert "direct terms" in check(name, lambda *a: bptt(*a, carry=False)).message
    assert "factor T" in check(name, lambda *a: bptt(*a, average=False)).message
    assert "h_(t-1)" in check(name, lambda *a: bptt(*a, previous=False)).message
    assert "W_hh^T" in check(name, lambda *a: bptt(*a, transpose=False)).message
    only_output = check(name, lambda *a: bptt(*a, slope_on_carry=False))
    assert "only the output's term" in only_output.message
    assert "W_hh^T dL/dh_t" in check(name, lambda *a: bptt(*a, carry_da=False)).message
    assert "three tensors" in check(name, lambda *a: bptt(*a)[:2]).message

    def wrong_y(*a):
        dW_ih, dW_hh, dW_y = bptt(*a)
        return dW_ih, dW_hh, 2 * dW_y

    message = check(name, wrong_y).message
    assert message == "dW_y is not the gradient of the loss (dW_ih and dW_hh are right)", message

    def transposed(*a):  # h_(t-1) a_t^T for a_t h_(t-1)^T
        dW_ih, dW_hh, dW_y = bptt(*a)
        return dW_ih, dW_hh.T, dW_y

    assert "dW_hh is the transpose" in check(name, transposed).message

    def finite_differences(W_ih, W_hh, W_y, xs, ys, eps=1e-5):  # right to ~1e-9, not exact
        def loss(Ws):
            h, total = torch.zeros(Ws[1].shape[0], dtype=xs.dtype), 0.0
            for t in range(xs.shape[0]):
                h = torch.tanh(Ws[0] @ xs[t] + Ws[1] @ h)
                total = total + 0.5 * ((Ws[2] @ h - ys[t]) ** 2).sum()
            return total / xs.shape[0]

        Ws, grads = [W_ih, W_hh, W_y], []
        for k, W in enumerate(Ws):
            g = torch.zeros_like(W)
            for idx in np.ndindex(*W.shape):
                up, down = [w.clone() for w in Ws], [w.clone() for w in Ws]
                up[k][idx] += eps
                down[k][idx] -= eps
                g[idx] = (loss(up) - loss(down)) / (2 * eps)
            grads.append(g)
        return tuple(grads)

    message = check(name, finite_differences).message
    assert "by more than float64 rounding" in message and "not the gradient" not in message, \
        message

    def full_squared_error(*a):  # without the 1/2 of the chapter's loss
        return tuple(2 * g for g in bptt(*a))

    def mse_loss(*a):  # F.mse_loss: the squared error averaged over the n outputs too
        n_out = a[2].shape[0]
        return tuple(2 / n_out * g for g in bptt(*a))

    assert "twice the right one" in check(name, full_squared_error).message
    assert "F.mse_loss" in check(name, mse_loss).message
    halved = check(name, lambda *a: tuple(g / 2 for g in bptt(*a)))  # the 1/2 kept in e_t
    assert "half the right one" in halved.message and "outputs" not in halved.message
    summed_over_outputs = check(name, lambda *a: tuple(g / a[2].shape[0] for g in bptt(*a)))
    assert "1/n = 1/3" in summed_over_outputs.message


def test_detach_accepts_the_losses_in_one_tensor():
    right = make_pass()
    assert check("ex-ch2-tbptt-bug", lambda *a: torch.tensor(right(*a)))
