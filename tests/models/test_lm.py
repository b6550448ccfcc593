"""seqbook.lm: the character language model, its training loop, perplexity and sampling."""

import math

import pytest
import torch
from tolerance import approx, assert_close, assert_same_math

from seqbook.batching import lm_chunks
from seqbook.decoding import generate, sample_sequence
from seqbook.lm import (
    CharLM,
    ConditionalCharLM,
    detach_state,
    evaluate_perplexity,
    unigram_perplexity,
)
from seqbook.train import train_lm
from seqbook.vocab import Vocab

TEXT = "the cat sat on the mat " * 40
VOCAB = Vocab(list(TEXT))
IDS = torch.tensor(VOCAB.encode(list(TEXT)))


@pytest.mark.parametrize("cell", ["rnn", "gru", "lstm"])
def test_charlm_shapes_and_state_carry(cell, device):
    torch.manual_seed(0)
    model = CharLM(len(VOCAB), hidden_size=8, cell=cell).to(device=device, dtype=torch.float64)
    ids = IDS[:12].view(2, 6).to(device)
    logits, state = model(ids)
    assert logits.shape == (2, 6, len(VOCAB))
    n = 6 * (8 + 8) + 8  # 6 steps of the recurrence (embedding and state, 8 each), then the head
    # reading the sequence in two halves, carrying the state, gives the same logits
    first, s1 = model(ids[:, :3])
    second, _ = model(ids[:, 3:], s1)
    assert_same_math(torch.cat([first, second], dim=1), logits, n=n)
    # the fast path computes the same function
    model.rnn.fast = True
    assert_same_math(model(ids)[0], logits, n=n)
    detached = detach_state(state)
    assert all(not s.requires_grad for s in (detached if cell == "lstm" else [detached]))


def test_uniform_model_has_vocab_size_perplexity():
    model = CharLM(len(VOCAB), hidden_size=4)
    with torch.no_grad():
        model.head.weight.zero_()
        model.head.bias.zero_()
    x, y = lm_chunks(IDS, 2, 10)
    # float32: a log-softmax over the vocabulary for each token
    assert evaluate_perplexity(model, x, y) == approx(len(VOCAB), torch.float32, n=len(VOCAB))


def test_unigram_perplexity_matches_formula():
    train = torch.tensor([4, 4, 4, 5])
    # add-one smoothing over 6 ids: p(4) = 4/10, p(5) = 2/10
    expected = math.exp(-(math.log(0.4) + math.log(0.2)) / 2)
    assert unigram_perplexity(train, torch.tensor([4, 5]), 6) == approx(expected, n=6)  # float64
    with pytest.raises(ValueError, match="must have shape"):
        unigram_perplexity(train[None], train, 6)


@pytest.fixture
def one_thread():
    """Tiny models: one CPU thread is fastest, and avoids thread contention on shared cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_train_lm_learns_and_beats_unigram(one_thread):
    x, y = lm_chunks(IDS, 4, 16)
    model = CharLM(len(VOCAB), hidden_size=32, cell="gru", fast=True)
    history = train_lm(model, x, y, steps=120, lr=1e-2, progress=False, device="cpu")
    assert history.final_loss < history.step_loss[0] / 3
    ppl = evaluate_perplexity(model, x, y)
    assert ppl < 0.5 * unigram_perplexity(IDS, IDS, len(VOCAB))
    text = generate(model, VOCAB, "the c", 20, temperature=0)
    assert text.startswith("the c") and len(text) == 25
    assert "at" in text  # greedy decoding continues the only pattern it saw


def test_generate_checks_and_temperature():
    model = CharLM(len(VOCAB), hidden_size=4)
    g = torch.Generator().manual_seed(0)
    out = generate(model, VOCAB, "the", 10, temperature=1.0, generator=g)
    assert len(out) == 13 and all(c in VOCAB.itos[4:] for c in out[3:])
    with pytest.raises(ValueError, match="prefix"):
        generate(model, VOCAB, "", 5)
    with pytest.raises(ValueError, match="temperature"):
        generate(model, VOCAB, "the", 5, temperature=-1.0)


def test_conditional_lm_starts_from_condition_and_stops():
    torch.manual_seed(0)
    model = ConditionalCharLM(len(VOCAB), num_conditions=3, hidden_size=8, cell="lstm")
    ids = IDS[:10].view(2, 5)
    logits_a, _ = model(ids, torch.tensor([0, 0]))
    logits_b, _ = model(ids, torch.tensor([0, 1]))
    assert_close(logits_a[0], logits_b[0], n=5 * (8 + 8) + 8)  # row 0 has the same condition
    assert not torch.allclose(logits_a[1], logits_b[1])
    name = sample_sequence(model, VOCAB, 1, max_len=7, generator=torch.Generator().manual_seed(0))
    assert len(name) <= 7 and "<" not in name
    with pytest.raises(ValueError, match=r"cond must have shape \(2,\)"):
        model(ids, torch.tensor([0]))
    with pytest.raises(ValueError, match="cell must be one of"):
        CharLM(10, cell="transformer")


def test_conditional_lm_starts_from_the_class_state():
    """Eq. (2.4) of the book: the condition enters once, through h_0 = tanh(W_c onehot(c) + b_c)."""
    from seqbook.lm import ConditionalCharLM

    torch.manual_seed(0)
    model = ConditionalCharLM(12, 3, hidden_size=5, embed_dim=4).double()
    cond = torch.tensor([2, 0])
    expected = torch.tanh(model.init.weight[cond])  # the embedding row is W_c onehot(c) + b_c
    assert torch.equal(model.initial_state(cond)[0], expected)
    ids = torch.randint(0, 12, (2, 6))
    logits, _ = model(ids, cond)
    ref, _ = CharLM.forward(model, ids, model.initial_state(cond))  # the plain LM from that state
    assert torch.equal(logits, ref)


def test_generate_refuses_a_gpt_and_names_gpt_generate():
    from seqbook.gpt import GPT, GPTConfig
    from seqbook.vocab import Vocab

    vocab = Vocab(list("abcdefgh"))
    model = GPT(GPTConfig(vocab_size=len(vocab), block_size=16, n_layer=1, n_head=1, n_embd=8))
    with pytest.raises(TypeError, match="GPT.generate"):
        generate(model, vocab, "abc", 5)
    assert model.training  # the mode is restored


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int32, torch.uint8, torch.int64])
def test_gpt_and_cross_entropy_take_targets_of_any_integer_dtype(dtype):
    from seqbook.gpt import GPT, GPTConfig
    from seqbook.losses import cross_entropy

    model = GPT(GPTConfig(vocab_size=20, block_size=8, n_layer=1, n_head=1, n_embd=8, dropout=0.0))
    idx = torch.randint(20, (2, 8))
    logits, loss = model(idx, idx.to(dtype))
    _, expected = model(idx, idx)
    assert loss.item() == expected.item()
    assert cross_entropy(logits, idx.to(dtype)).item() == pytest.approx(expected.item(), rel=1e-6)
