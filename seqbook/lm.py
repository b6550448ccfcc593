"""Character-level language models: a recurrent model, training with truncated BPTT, held-out
perplexity, a unigram baseline and sampling (the data, :func:`seqbook.data.time_machine_ids`, lives
with the other data sets).

Chapters 2, 3 and 6 share these so their perplexities are measured on the same split the same way:

    vocab, train_ids, valid_ids = time_machine_ids()          # 27 symbols: a-z and the space (data)
    x, y = lm_chunks(train_ids, batch_size=32, seq_len=64)     # (num_chunks, B, T) each (data)
    model = CharLM(len(vocab), hidden_size=128, cell="gru")
    history = train_lm(model, x, y, steps=500)
    ppl = evaluate_perplexity(model, *lm_chunks(valid_ids, 16, 64))
    print(generate(model, vocab, "the time traveller", 100, temperature=0.8))

Every sampler of the book draws its next token with :func:`sample_next`: one rule for the
temperature (``temperature=0`` takes the argmax), one for ``top_k`` and one for forbidden tokens
(:func:`forbid_tokens`: the ids a caller lists get the logit -inf, so they are never drawn). It is
used by :func:`generate`, :func:`sample_sequence` and :meth:`seqbook.gpt.GPT.generate`, and
:func:`forbid_tokens` also by the decoders of :mod:`seqbook.seq2seq`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .checks import (
    check_flag,
    check_float_tensor,
    check_generator,
    check_ids,
    check_int,
    check_like,
    check_lm_chunks,
    check_number,
    check_probability,
    check_tensor,
    has_values,
)
from .kv_cache import KVCache
from .rnn import GRU, LSTM, RNN
from .vocab import RESERVED, Vocab

__all__ = [
    "CharLM", "ConditionalCharLM", "sample_sequence", "detach_state", "unigram_perplexity",
    "evaluate_perplexity", "generate", "sample_next", "forbid_tokens", "check_sampling",
]

CELLS = {"rnn": RNN, "gru": GRU, "lstm": LSTM}


def unigram_perplexity(train_ids: torch.Tensor, eval_ids: torch.Tensor, vocab_size: int) -> float:
    r"""Perplexity on ``eval_ids`` of the model that ignores context: :math:`p(c)` = the frequency
    of ``c`` in ``train_ids`` (add-one smoothed). Any useful language model must beat it.
    Every id must lie in [0, vocab_size); the result is computed in float64."""
    vocab_size = check_int("vocab_size", vocab_size, 1)
    check_ids("train_ids", train_ids, vocab_size, shape=(None,), names="(N,)", nonempty=False)
    check_ids("eval_ids", eval_ids, vocab_size, shape=(None,), names="(N,)")
    counts = torch.bincount(train_ids, minlength=vocab_size).double() + 1.0
    log_p = (counts / counts.sum()).log()
    return math.exp(-log_p[eval_ids].mean().item())


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


def _check_vocab(vocab, model) -> None:
    """``vocab`` is a Vocab with a non-reserved token, of the model's size when the model says it."""
    if not isinstance(vocab, Vocab):
        raise TypeError(f"vocab must be a seqbook.data.Vocab, got {type(vocab).__name__}")
    if len(vocab) <= len(RESERVED):
        raise ValueError(f"vocab must hold a token besides the {len(RESERVED)} reserved ones, "
                         f"got {len(vocab)} tokens")
    size = getattr(model, "vocab_size", None)
    if isinstance(size, int) and size != len(vocab):
        raise ValueError(f"vocab must have the model's vocab_size {size} tokens, got {len(vocab)}")


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
        fast: run the recurrent layer through PyTorch's fused kernel (same function, much faster
            on a CPU; see :mod:`seqbook.rnn`). It can be switched later with ``model.rnn.fast``.

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

    def forward(self, ids: torch.Tensor, state=None):
        check_ids("ids", ids, self.vocab_size, shape=(None, None), names="(B, T)")
        self._check_state(state, ids.shape[0])
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

    def initial_state(self, cond: torch.Tensor):
        check_ids("cond", cond, self.num_conditions, shape=(None,), names="(B,)")
        L, H = self.rnn.num_layers, self.rnn.hidden_size
        h0 = torch.tanh(self.init(cond)).view(-1, L, H).transpose(0, 1).contiguous()  # (L, B, H)
        return (h0, torch.zeros_like(h0)) if self.cell == "lstm" else h0

    def forward(self, ids: torch.Tensor, cond: torch.Tensor | None = None, state=None):
        """Start from ``initial_state(cond)``, or continue from ``state`` when it is given (``cond``,
        if given too, is then checked but not used)."""
        if state is not None and cond is not None:
            check_ids("cond", cond, self.num_conditions, shape=(None,), names="(B,)")
        if state is None:
            if cond is None:
                raise ValueError("give cond (B,) to start a sequence, or the state to continue one")
            check_tensor("ids", ids, shape=(None, None), names="(B, T)")
            check_tensor("cond", cond, nonempty=False)
            if cond.shape != ids.shape[:1]:
                raise ValueError(f"cond must have shape ({ids.shape[0]},), got {tuple(cond.shape)}")
            state = self.initial_state(cond)
        return super().forward(ids, state)


# ---------------------------------------------------------------------------------------------
# Sampling: one rule for every sampler of the book.
# ---------------------------------------------------------------------------------------------


def _check_forbid(forbid, vocab_size: int) -> tuple[int, ...]:
    """``forbid`` is a sequence of ids in [0, vocab_size) that leaves at least one id; returned as a tuple."""
    if isinstance(forbid, str | bytes) or not isinstance(forbid, Sequence):
        raise TypeError(f"forbid must be a sequence (tuple or list) of int ids, got {type(forbid).__name__} "
                        f"{forbid!r}")
    ids = tuple(check_int(f"forbid[{i}]", x, minimum=0, maximum=vocab_size - 1) for i, x in enumerate(forbid))
    if len(set(ids)) >= vocab_size:
        raise ValueError(f"forbid must leave at least one id to emit, got all {vocab_size} ids")
    return ids


def check_sampling(vocab_size: int, temperature: float = 1.0, top_k: int | None = None,
                   forbid: Sequence[int] = (), generator: torch.Generator | None = None
                   ) -> tuple[float, int | None, tuple[int, ...]]:
    """Check the arguments of :func:`sample_next` for a vocabulary of ``vocab_size`` ids.

    The samplers call it before their first step, so that a bad argument is refused even when
    nothing is sampled. Returns ``(temperature, top_k, forbid)`` as a float, an int or None, and a
    tuple of ints. The errors are those listed in :func:`sample_next`.
    """
    vocab_size = check_int("vocab_size", vocab_size, minimum=1)
    temperature = check_number("temperature", temperature, low=0.0)
    if top_k is not None:
        top_k = check_int("top_k", top_k, minimum=1)
    check_generator("generator", generator)
    return temperature, top_k, _check_forbid(forbid, vocab_size)


def forbid_tokens(logits: torch.Tensor, forbid: Sequence[int] = ()) -> torch.Tensor:
    """The rule for tokens a model must never emit: their logits become -inf.

    ``forbid`` lists the ids to block, for instance the reserved ``<pad> <unk> <sos>`` (and ``<eos>``
    when a sample must not end); the caller decides which. A softmax then gives them probability 0,
    an argmax never picks them and a beam never extends a prefix by them. ``logits`` is not changed:
    the result is a new tensor (or ``logits`` itself when ``forbid`` is empty).

    Shape:
        logits: (B, V) float; forbid: ids in [0, V), at most V - 1 distinct -> (B, V)

    Raises:
        TypeError: ``forbid`` is not a sequence of ints (a single int, a string, a tensor).
        ValueError: an id lies outside [0, V), or ``forbid`` blocks all V ids.
    """
    check_float_tensor("logits", logits, ndim=2, names="(B, V)")
    forbid = _check_forbid(forbid, logits.shape[-1])
    if not forbid:
        return logits
    blocked = torch.tensor(forbid, device=logits.device)
    return logits.index_fill(-1, blocked, float("-inf"))                 # (B, V)


def _check_logit_values(logits: torch.Tensor, z: torch.Tensor) -> None:
    """No NaN or +inf in ``logits``, and a finite logit left in every row of ``z`` (after forbid)."""
    if not has_values(logits):
        return
    bad, dead = torch.stack([(torch.isnan(logits) | (logits == math.inf)).any(),
                             torch.isneginf(z).all(-1).any()]).tolist()
    if bad:
        raise ValueError("logits must not hold NaN or +inf (-inf is allowed: a token never drawn)")
    if dead:
        raise ValueError("logits must keep a finite entry in every row once forbid is applied, got a "
                         "row of -inf only (no token left to draw)")


def sample_next(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                forbid: Sequence[int] = (), generator: torch.Generator | None = None) -> torch.Tensor:
    r"""Draw the next token of each row from its logits: the one sampling rule of the book.

    In this order: the ids in ``forbid`` get the logit -inf (:func:`forbid_tokens`); then
    ``temperature=0`` takes the argmax (greedy, no randomness); otherwise the logits are divided by
    the temperature :math:`\tau`, all but the ``top_k`` largest are dropped (if ``top_k`` is given)
    and one id is drawn from :math:`\mathrm{softmax}(z / \tau)`. Small :math:`\tau` sharpens the
    distribution towards the argmax, large :math:`\tau` flattens it. The logits are used in float32,
    or in float64 when they are float64. ``generator`` makes the draws reproducible; the
    probabilities are moved to its device for the draw (a CPU generator for logits on a GPU).

    Shape:
        logits: (B, V) float -> ids (B,) int64 on the device of ``logits``

    Raises:
        TypeError: ``logits`` is not a float tensor, ``top_k`` is not an int, ``generator`` is not a
            ``torch.Generator``, ``forbid`` is not a sequence of ints.
        ValueError: ``logits`` is not (B, V) or holds a NaN or +inf (-inf is legal: a token that
            is never drawn), or a row has no finite logit left once ``forbid`` is applied;
            ``temperature`` is negative, NaN or infinite; ``top_k < 1``; a ``forbid`` id is
            outside [0, V) or ``forbid`` blocks every id. The logits' values are read (one GPU
            sync per call).
    """
    check_float_tensor("logits", logits, ndim=2, names="(B, V)")
    temperature, top_k, forbid = check_sampling(logits.shape[-1], temperature, top_k, forbid, generator)
    z = logits if logits.dtype == torch.float64 else logits.float()      # (B, V)
    z = forbid_tokens(z, forbid)
    _check_logit_values(logits, z)
    if temperature == 0:
        return z.argmax(-1)                                               # (B,)
    z = z / temperature
    if top_k is not None and top_k < z.shape[-1]:
        kth = torch.topk(z, top_k, dim=-1).values[:, -1:]                 # (B, 1): the k-th largest
        z = z.masked_fill(z < kth, float("-inf"))
    probs = torch.softmax(z, dim=-1)                                      # (B, V)
    draw_on = generator.device if generator is not None else probs.device
    ids = torch.multinomial(probs.to(draw_on), 1, generator=generator)    # (B, 1)
    return ids.squeeze(-1).to(logits.device)                              # (B,)


@torch.no_grad()
def sample_sequence(model: ConditionalCharLM, vocab: Vocab, cond: int, max_len: int = 20,
                    temperature: float = 1.0, generator: torch.Generator | None = None) -> str:
    """Sample one sequence for class ``cond``: feed ``<sos>``, then each sampled character, until
    the model emits ``<eos>`` (or ``max_len`` characters).

    Each character is drawn by :func:`sample_next` with ``<pad> <unk> <sos>`` forbidden (``<eos>``
    stays allowed: it ends the sequence). ``max_len = 0`` gives ''; ``temperature = 0`` takes the
    most likely character at every step (greedy)."""
    if not isinstance(model, ConditionalCharLM):
        raise TypeError(f"model must be a ConditionalCharLM, got {type(model).__name__}")
    _check_vocab(vocab, model)
    cond = check_int("cond", cond, 0, model.num_conditions - 1)
    max_len = check_int("max_len", max_len, 0)
    forbid = (vocab.pad_id, vocab.unk_id, vocab.sos_id)               # <eos> stays allowed: it ends
    temperature, _, forbid = check_sampling(len(vocab), temperature, forbid=forbid, generator=generator)
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    state = model.initial_state(torch.tensor([cond], device=device))
    token, out = vocab.sos_id, []
    for _ in range(max_len):
        logits, state = model(torch.tensor([[token]], device=device), state=state)
        token = int(sample_next(logits[:, -1], temperature, forbid=forbid, generator=generator)[0])
        if token == vocab.eos_id:
            break
        out.append(vocab.itos[token])
    model.train(was_training)
    return "".join(out)


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


@torch.no_grad()
def generate(model: nn.Module, vocab: Vocab, prefix: str, n: int, temperature: float = 1.0,
             generator: torch.Generator | None = None) -> str:
    r"""Continue ``prefix`` by ``n`` characters sampled from the model, one at a time.

    The prefix is read first (its state is the context); then each sampled character is fed back
    as the next input. The next-character distribution is :math:`\mathrm{softmax}(z / \tau)` for
    logits :math:`z` and temperature :math:`\tau`: small :math:`\tau` sharpens it towards the most
    likely character (``temperature=0`` takes the argmax), large :math:`\tau` flattens it. Each
    character is drawn by :func:`sample_next` with the reserved ``<pad> <unk> <sos> <eos>``
    forbidden: the continuation is plain text.

    Returns:
        ``prefix`` followed by the ``n`` generated characters.
    """
    if not isinstance(prefix, str):
        raise TypeError(f"prefix must be a str, got {type(prefix).__name__}")
    if not prefix:
        raise ValueError("prefix must hold at least one character, got ''")
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    _check_vocab(vocab, model)
    n = check_int("n", n, 0)
    reserved = tuple(range(len(RESERVED)))                          # <pad> <unk> <sos> <eos>
    temperature, _, reserved = check_sampling(len(vocab), temperature, forbid=reserved, generator=generator)
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    ids = torch.tensor([vocab.encode(list(prefix))], device=device)  # (1, T)
    logits, state = model(ids)
    if state is None:  # e.g. a GPT, whose forward returns (logits, loss): no state to carry
        model.train(was_training)
        raise TypeError(
            f"model must carry a state from step to step (model(ids, state) -> (logits, state)), "
            f"but {type(model).__name__} returned None for it; a model that reads its whole "
            "context at every step, such as seqbook.gpt.GPT, generates with its own "
            "GPT.generate"
        )
    if logits.shape[-1] != len(vocab):
        raise ValueError(f"vocab must have one token per logit of the model, {logits.shape[-1]}, "
                         f"got {len(vocab)}")
    out = []
    for _ in range(n):
        nxt = int(sample_next(logits[:, -1], temperature, forbid=reserved, generator=generator)[0])
        out.append(vocab.itos[nxt])
        logits, state = model(torch.tensor([[nxt]], device=device), state)
    model.train(was_training)
    return prefix + "".join(out)


@torch.no_grad()
def generate_tokens(model: nn.Module, idx: torch.Tensor, max_new_tokens: int, temperature: float,
                    top_k: int | None, forbid: tuple[int, ...], generator: torch.Generator | None,
                    use_cache: bool) -> torch.Tensor:
    """The generation loop of the transformer language models (``GPT``, ``Llama``), unchecked.

    Appends ``max_new_tokens`` ids drawn by :func:`sample_next` to ``idx``, running ``model`` in
    eval mode (its mode is restored afterwards). With ``use_cache`` the prompt runs once into one
    :class:`~seqbook.kv_cache.KVCache` per block and each step runs the one new token; once the
    sequence outgrows ``model.config.block_size`` the window slides and the steps run without the
    cache. The callers check the arguments (``GPT.generate``, ``Llama.generate``); the model's
    ``forward`` is called unchecked (``__wrapped__``) at every token.

    Shape:
        idx: (B, T) ids -> (B, T + max_new_tokens)
    """
    was_training = model.training
    model.eval()
    block_size, caches = model.config.block_size, None
    forward = type(model).forward.__wrapped__  # checked once by the caller, not at every token
    for _ in range(max_new_tokens):
        if not use_cache or idx.shape[1] > block_size:  # the whole window, every step
            logits, _ = forward(model, idx[:, -block_size:])  # (B, T, V)
        elif caches is None:  # the prompt fills the caches
            caches = [KVCache(block_size) for _ in model.blocks]
            logits, _ = forward(model, idx, caches=caches)  # (B, T, V)
        else:  # only the newest token runs; the earlier ones are in the caches
            logits, _ = forward(model, idx[:, -1:], caches=caches)  # (B, 1, V)
        next_id = sample_next(logits[:, -1], temperature, top_k, forbid, generator)  # (B,)
        idx = torch.cat([idx, next_id[:, None]], dim=1)
    model.train(was_training)
    return idx
