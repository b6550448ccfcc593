"""Character-level language models: a recurrent model, a conditional one, held-out perplexity, a
unigram baseline and the model of pair counts (a draft for speculative decoding). The data
(:func:`seqbook.data.time_machine_ids`, :func:`seqbook.batching.lm_chunks`) and the training loop
(:func:`seqbook.train.train_lm`) live in their own modules, and so does sampling text from a model
(:func:`seqbook.decoding.generate`, :func:`seqbook.decoding.sample_sequence`):
a model here knows token ids, never a vocabulary.

Chapters 2, 3 and 6 share these so their perplexities are measured on the same split the same way:

    vocab, train_ids, valid_ids = time_machine_ids()          # 27 symbols: a-z and the space (data)
    x, y = lm_chunks(train_ids, batch_size=32, seq_len=64)     # (num_chunks, B, T) each (batching)
    model = CharLM(len(vocab), hidden_size=128, cell="gru")
    history = train_lm(model, x, y, steps=500)                 # (train)
    ppl = evaluate_perplexity(model, *lm_chunks(valid_ids, 16, 64))
    print(generate(model, vocab, "the time traveller", 100, temperature=0.8))  # (decoding)
"""

from __future__ import annotations

import math
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from .checks import (
    check_flag,
    check_ids,
    check_int,
    check_like,
    check_lm_chunks,
    check_number,
    check_positive_int,
    check_probability,
    check_tensor,
    check_token_ids,
    checked,
)
from .rnn import GRU, LSTM, RNN

__all__ = ["BigramLM", "CharLM", "ConditionalCharLM", "detach_state", "unigram_perplexity",
           "evaluate_perplexity"]

CELLS = {"rnn": RNN, "gru": GRU, "lstm": LSTM}


def unigram_perplexity(train_ids: torch.Tensor, eval_ids: torch.Tensor, vocab_size: int) -> float:
    r"""Perplexity on ``eval_ids`` of the model that ignores context: :math:`p(c)` = the frequency
    of ``c`` in ``train_ids`` (add-one smoothed). Any useful language model must beat it.
    Every id must lie in [0, vocab_size), and neither set may be empty (an empty training set,
    a slip such as a split of size 0, would give the uniform model); the result is computed in
    float64."""
    vocab_size = check_int("vocab_size", vocab_size, 1)
    check_ids("train_ids", train_ids, vocab_size, shape=(None,), names="(N,)")
    check_ids("eval_ids", eval_ids, vocab_size, shape=(None,), names="(N,)")
    counts = torch.bincount(train_ids, minlength=vocab_size).double() + 1.0
    log_p = (counts / counts.sum()).log()
    return math.exp(-log_p[eval_ids].mean().item())


def _check_bigram(ids, vocab_size) -> None:
    check_ids("ids", ids, vocab_size, shape=(None,), names="(N,)")
    if ids.numel() < 2:
        raise ValueError(f"ids must hold at least 2 tokens (one pair to count), got {ids.numel()}")


class BigramLM(nn.Module):
    r"""The language model of pair counts: :math:`p(b \mid a)` is the number of times ``b`` follows
    ``a`` in ``ids``, plus ``smoothing``, divided by the row's total. It reads one token of context
    and costs one table lookup per position, which makes it a draft for speculative decoding
    (:func:`seqbook.speculative.speculative_generate`). The table is a frozen parameter.

    Shape:
        ids: (N,) the training text; forward: idx (B, T) -> logits (B, T, V) (log-probabilities)
    """

    @checked(_check_bigram, vocab_size=check_positive_int, smoothing=partial(check_number, low=0.0,
                                                                             low_open=True))
    def __init__(self, ids: torch.Tensor, vocab_size: int, smoothing: float = 1.0):
        super().__init__()
        self.vocab_size = vocab_size
        counts = torch.full((vocab_size, vocab_size), float(smoothing), dtype=torch.float64)
        counts.index_put_((ids[:-1], ids[1:]), torch.ones(len(ids) - 1, dtype=torch.float64),
                          accumulate=True)  # (V, V): row a, column b counts "a then b"
        log_probs = (counts / counts.sum(1, keepdim=True)).log()
        self.log_probs = nn.Parameter(log_probs.float(), requires_grad=False)  # (V, V)

    def _check_forward(self, idx) -> None:
        check_token_ids("idx", idx, self.vocab_size)

    @checked(_check_forward)
    def forward(self, idx: torch.Tensor) -> tuple[torch.Tensor, None]:
        """The log-probabilities of the next token at every position, and no loss (as ``GPT``'s
        ``(logits, loss)``)."""
        return self.log_probs[idx], None  # (B, T, V)


def detach_state(state):
    """Cut the graph behind a recurrent state (a tensor, or the LSTM's pair ``(h, c)``)."""
    if state is None:
        return None
    if isinstance(state, (tuple, list)):
        for i, s in enumerate(state):
            if not isinstance(s, torch.Tensor):
                raise TypeError(f"state[{i}] must be a torch.Tensor, got {type(s).__name__}")
        return tuple(s.detach() for s in state)
    if not isinstance(state, torch.Tensor):
        raise TypeError(f"state must be a tensor, a pair of tensors or None, got {type(state).__name__}")
    return state.detach()


class CharLM(nn.Module):
    r"""Embedding -> recurrent layer -> linear read-out, one next-token distribution per step.

    .. math::
        e_t = E[x_t], \quad h_t = \mathrm{cell}(e_t, h_{t-1}), \quad
        p(x_{t+1} \mid x_{\le t}) = \mathrm{softmax}(W_{hy} h_t + b_y)

    Args:
        vocab_size: number of token ids.
        hidden_size: size of the recurrent state.
        cell: ``"rnn"`` (Elman, see ``nonlinearity``), ``"gru"`` or ``"lstm"`` (from :mod:`seqbook.rnn`).
        embed_dim: size of the token embeddings.
        num_layers, dropout: passed to the recurrent layer.
        fast: run the recurrent layer through PyTorch's kernel (same function, faster: the loop
            over time runs in C++, not Python; see :mod:`seqbook.rnn`). It can be switched later
            with ``model.rnn.fast``.

    Shape:
        ids: (B, T) int64; state: as the recurrent layer's ``h0`` or None
        -> logits: (B, T, vocab_size), state: the final state (carry it into the next chunk)
    """

    def __init__(self, vocab_size: int, hidden_size: int = 128, cell: str = "rnn", embed_dim: int = 32,
                 num_layers: int = 1, dropout: float = 0.0, nonlinearity: str = "tanh", fast: bool = False):
        super().__init__()
        if not isinstance(cell, str) or cell not in CELLS:
            raise ValueError(f"cell must be one of {sorted(CELLS)}, got {cell!r}")
        if not isinstance(nonlinearity, str) or nonlinearity not in ("tanh", "relu"):  # any cell
            raise ValueError(f"nonlinearity must be 'tanh' or 'relu' (used by cell='rnn'), "
                             f"got {nonlinearity!r}")
        vocab_size = check_int("vocab_size", vocab_size, 1)
        embed_dim = check_int("embed_dim", embed_dim, 1)
        hidden_size = check_int("hidden_size", hidden_size, 1)
        num_layers = check_int("num_layers", num_layers, 1)
        dropout = check_probability("dropout", dropout)
        self.vocab_size, self.cell = vocab_size, cell
        self.embed = nn.Embedding(vocab_size, embed_dim)
        kwargs = {"nonlinearity": nonlinearity} if cell == "rnn" else {}
        self.rnn = CELLS[cell](embed_dim, hidden_size, num_layers=num_layers, dropout=dropout,
                                 fast=fast, **kwargs)
        self.head = nn.Linear(hidden_size, vocab_size)

    def _check_state(self, state, batch: int) -> None:
        """``state`` is None, or the recurrent layer's state (L * D, B, H) (a pair for the LSTM)."""
        if state is None:
            return
        rnn = self.rnn
        expected = (rnn.num_layers * rnn.num_directions, batch, rnn.hidden_size)
        parts = state if self.cell == "lstm" else (state,)
        if self.cell == "lstm" and (not isinstance(state, (tuple, list)) or len(state) != 2):
            raise ValueError(f"state must be a pair (h, c) of tensors of shape {expected}, "
                             f"got {type(state).__name__}")
        for i, s in enumerate(parts):
            name = f"state[{i}]" if self.cell == "lstm" else "state"
            check_tensor(name, s, shape=expected, names=f"{expected} = (num_layers, B, hidden_size)")
            check_like(name, s, self.head.weight)

    def _check_forward(self, ids, state) -> None:
        check_ids("ids", ids, self.vocab_size, shape=(None, None), names="(B, T)")
        self._check_state(state, ids.shape[0])

    @checked(_check_forward)
    def forward(self, ids: torch.Tensor, state=None):
        output, state = self.rnn(self.embed(ids), state)  # (B, T, H)
        return self.head(output), state                   # (B, T, V)


class ConditionalCharLM(CharLM):
    r"""A :class:`CharLM` whose initial state is computed from a class (vec2seq generation).

    .. math::
        h_0 = \tanh(W_c\, \mathrm{onehot}(c) + b_c), \qquad
        p(y_{1:T} \mid c) = \prod_t p(y_t \mid h_t), \quad h_t = \mathrm{cell}(E[y_{t-1}], h_{t-1}),

    with :math:`y_0` = ``<sos>``; the sequence ends when the model emits ``<eos>``. Training reads
    ``<sos> y_1 ... y_T`` and predicts ``y_1 ... y_T <eos>``. (For the LSTM, :math:`c_0 = 0`.)

    Shape:
        ids: (B, T) int64, cond: (B,) int64 in [0, num_conditions) -> logits: (B, T, vocab_size), state
    """

    def __init__(self, vocab_size: int, num_conditions: int, hidden_size: int = 128, cell: str = "rnn",
                 embed_dim: int = 32, num_layers: int = 1, fast: bool = False):
        num_conditions = check_int("num_conditions", num_conditions, 1)
        super().__init__(vocab_size, hidden_size, cell, embed_dim, num_layers, fast=fast)
        self.num_conditions = num_conditions
        self.init = nn.Embedding(num_conditions, num_layers * hidden_size)  # = W_c onehot(c) + b_c

    def _check_initial_state(self, cond) -> None:
        check_ids("cond", cond, self.num_conditions, shape=(None,), names="(B,)")

    @checked(_check_initial_state)
    def initial_state(self, cond: torch.Tensor):
        L, H = self.rnn.num_layers, self.rnn.hidden_size
        h0 = torch.tanh(self.init(cond)).view(-1, L, H).transpose(0, 1).contiguous()  # (L, B, H)
        return (h0, torch.zeros_like(h0)) if self.cell == "lstm" else h0

    def _check_forward(self, ids, cond, state) -> None:
        if cond is None and state is None:
            raise ValueError("give cond (B,) to start a sequence, or the state to continue one")
        check_tensor("ids", ids, shape=(None, None), names="(B, T)")
        if cond is not None:
            check_tensor("cond", cond, nonempty=False)
            if state is None and cond.shape != ids.shape[:1]:
                raise ValueError(f"cond must have shape ({ids.shape[0]},), got {tuple(cond.shape)}")
            check_ids("cond", cond, self.num_conditions, shape=(None,), names="(B,)")
        CharLM._check_forward(self, ids, state)

    @checked(_check_forward)
    def forward(self, ids: torch.Tensor, cond: torch.Tensor | None = None, state=None):
        """Start from ``initial_state(cond)``, or continue from ``state`` when it is given (``cond``,
        if given too, is then checked but not used)."""
        if state is None:
            state = self.initial_state(cond)
        return super().forward(ids, state)


@torch.no_grad()
def evaluate_perplexity(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor,
                        carry_state: bool = True) -> float:
    r"""Perplexity :math:`\exp(-\frac1N \sum \log p(x_{t+1} \mid x_{\le t}))` over every target.

    ``inputs`` and ``targets`` come from :func:`seqbook.data.lm_chunks` (num_chunks, B, T). With
    ``carry_state`` the model is called as ``model(x, state) -> (logits, state)`` and the state
    flows from each chunk into the next (as in training); otherwise as ``model(x)``, which may
    return the logits or a tuple whose first item is the logits (e.g. a transformer). The sum is
    taken in float64 (a Python float).
    """
    check_lm_chunks(inputs, targets, model)
    carry_state = check_flag("carry_state", carry_state)
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    state, total, count = None, 0.0, 0
    for x, y in zip(inputs, targets, strict=True):
        x, y = x.to(device), y.to(device)
        if carry_state:
            logits, state = model(x, state)
        else:
            out = model(x)
            logits = out[0] if isinstance(out, tuple) else out
        if count == 0:  # the first chunk: check what the model returns, and the targets' range, once
            if not isinstance(logits, torch.Tensor) or logits.shape[:-1] != x.shape:
                got = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
                raise ValueError(f"model must return logits of shape ({x.shape[0]}, {x.shape[1]}, V), "
                                 f"got {got}")
            check_ids("targets", targets, logits.shape[-1])
        total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum").item()
        count += y.numel()
    model.train(was_training)
    return math.exp(total / count)
