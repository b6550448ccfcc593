"""Chapter 2's exercise checks (seqbook.exercises.ch02): each passes a right answer, calls the
untouched starter "not attempted" (the find-the-bug starter gets its bug named), and names what is
wrong in each typical wrong answer."""

import torch
import torch.nn.functional as F

from seqbook.exercises import check
from seqbook.lm import CharLM


def starter(*args):
    raise NotImplementedError  # your code here


# --- one more step of the worked example ---------------------------------------------------------


def test_next_step():
    name = "ex-ch2-next-step"
    assert check(name, ([0.0, 1.0, 1.0], -1.0))
    assert check(name, (torch.tensor([0.0, 1.0, 1.0]), torch.tensor(-1.0)))
    assert check(name, ...).status == "not attempted"
    assert "transposed" in check(name, ([0.0, 2.0, 0.0], 0.0)).message
    assert "leaves out the recurrent term" in check(name, ([0.0, 1.0, 0.0], 0.0)).message
    assert "leaves out the input term" in check(name, ([0.0, 0.0, 1.0], -1.0)).message
    assert "y_(t+1) = W_y h_(t+1)" in check(name, ([0.0, 1.0, 1.0], 1.0)).message
    assert "list of 3 numbers" in check(name, ([0.0, 1.0], 1.0)).message
    assert "must be a pair" in check(name, 3).message


# --- gradient clipping ---------------------------------------------------------------------------


def test_clip():
    def right(params, max_norm):
        params = [p for p in params if p.grad is not None]
        norm = torch.sqrt(sum((p.grad**2).sum() for p in params))
        for p in params:
            p.grad.mul_(min(1.0, max_norm / (norm.item() + 1e-6)))
        return norm

    def per_parameter(params, max_norm):  # a classic mistake: each gradient clipped alone
        norms = []
        for p in params:
            n = p.grad.norm()
            p.grad.mul_(min(1.0, max_norm / (n.item() + 1e-6)))
            norms.append(n)
        return torch.sqrt(sum(n**2 for n in norms))

    def always(params, max_norm):  # scales even short gradients up to max_norm
        params = list(params)
        norm = torch.sqrt(sum((p.grad**2).sum() for p in params))
        for p in params:
            p.grad.mul_(max_norm / norm)
        return norm

    assert check("ex-ch2-clip", right)
    assert check("ex-ch2-clip", starter).status == "not attempted"
    assert "not capped" in check("ex-ch2-clip", per_parameter).message
    assert "must stay unchanged" in check("ex-ch2-clip", always).message
    assert "returns nothing" in check("ex-ch2-clip", lambda p, m: None).message


# --- entropy at a temperature --------------------------------------------------------------------


def test_temperature():
    name = "ex-ch2-temperature"

    def right(logits, tau):
        log_p = F.log_softmax(logits / tau, dim=-1)
        return -(log_p.exp() * log_p).sum(-1)

    def naive(logits, tau):  # right, but NaN once a probability underflows
        p = F.softmax(logits / tau, dim=-1)
        return -(p * p.log()).sum(-1)

    assert check(name, right)
    assert check(name, starter).status == "not attempted"
    assert "NaN" in check(name, naive).message
    assert "in bits" in check(name, lambda z, t: right(z, t) / torch.log(torch.tensor(2.0))).message
    assert "sign is flipped" in check(name, lambda z, t: -right(z, t)).message
    assert "does not change" in check(name, lambda z, t: right(z, 1.0)).message
    assert "multiplied by tau" in check(name, lambda z, t: right(z * t, 1.0)).message
    assert "one number per distribution" in check(name, lambda z, t: F.softmax(z, -1)).message


# --- find the bug: truncated BPTT ----------------------------------------------------------------


def make_pass(carry=True, detach=True, assign=True):
    def tbptt_pass(model, inputs, targets, optimizer):
        state, losses = None, []
        for x, y in zip(inputs, targets, strict=True):
            logits, state = model(x, state)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
            optimizer.zero_grad()
            loss.backward()
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
    name = "ex-ch2-detach"
    assert check(name, make_pass())
    assert check(name, starter).status == "not attempted"
    bug = check(name, make_pass(detach=False))
    assert bug.status == "fail" and "still attached" in bug.message
    assert "still attached" in check(name, make_pass(assign=False)).message
    assert "reset at every chunk" in check(name, make_pass(carry=False)).message
    assert "list of the 4 chunks' losses" in check(name, lambda *a: make_pass()(*a)[:1]).message

    def shuffled(model, inputs, targets, optimizer):
        order = [1, 0, 3, 2]
        return make_pass()(model, inputs[order], targets[order], optimizer)

    assert "visit the chunks in order" in check(name, shuffled).message


def test_detach_pass_trains_a_charlm():
    torch.manual_seed(0)
    model = CharLM(9, hidden_size=8, cell="rnn", embed_dim=4)
    ids = torch.randint(4, 9, (3, 2, 6))
    losses = make_pass()(model, ids[..., :-1], ids[..., 1:], torch.optim.SGD(model.parameters(), 0.1))
    assert len(losses) == 3


# --- the norms of W^k ----------------------------------------------------------------------------


def test_bound():
    name = "ex-ch2-bound"

    def right(W, K):
        return torch.stack([torch.linalg.matrix_norm(torch.linalg.matrix_power(W, k), ord=2)
                            for k in range(1, K + 1)])

    def radius(W, K):
        return torch.linalg.eigvals(W).abs().max() ** torch.arange(1, K + 1, dtype=W.dtype)

    def singular(W, K):
        return torch.linalg.matrix_norm(W, ord=2) ** torch.arange(1, K + 1, dtype=W.dtype)

    def frobenius(W, K):
        return torch.stack([torch.linalg.matrix_norm(torch.linalg.matrix_power(W, k))
                            for k in range(1, K + 1)])

    def from_zero(W, K):
        return torch.stack([torch.linalg.matrix_norm(torch.linalg.matrix_power(W, k), ord=2)
                            for k in range(K)])

    assert check(name, right)
    assert check(name, starter).status == "not attempted"
    assert "spectral radius" in check(name, radius).message
    assert "largest singular value" in check(name, singular).message
    assert "Frobenius" in check(name, frobenius).message
    assert "off by one" in check(name, from_zero).message
    assert "12 numbers" in check(name, lambda W, K: right(W, K)[:-1]).message


# --- reverse-mode BPTT ---------------------------------------------------------------------------


def bptt(W_ih, W_hh, W_y, xs, ys, slope="state", carry=True, average=True, previous=True):
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
        da = {"state": 1 - hs[t] ** 2, "pre": 1 - pre[t - 1] ** 2, "none": 1.0}[slope] * dh
        dW_ih += torch.outer(da, xs[t - 1])
        dW_hh += torch.outer(da, hs[t - 1] if previous else hs[t])
        delta = W_hh.T @ da
    return dW_ih, dW_hh, dW_y


def test_bptt():
    name = "ex-ch2-bptt"
    assert check(name, bptt)
    assert check(name, starter).status == "not attempted"
    assert "wrong place" in check(name, lambda *a: bptt(*a, slope="pre")).message
    assert "derivative of tanh is missing" in check(name, lambda *a: bptt(*a, slope="none")).message
    assert "direct terms" in check(name, lambda *a: bptt(*a, carry=False)).message
    assert "factor T" in check(name, lambda *a: bptt(*a, average=False)).message
    assert "h_(t-1)" in check(name, lambda *a: bptt(*a, previous=False)).message
    assert "three tensors" in check(name, lambda *a: bptt(*a)[:2]).message

    def wrong_y(*a):
        dW_ih, dW_hh, dW_y = bptt(*a)
        return dW_ih, dW_hh, 2 * dW_y

    assert "dW_y is not the gradient" in check(name, wrong_y).message
