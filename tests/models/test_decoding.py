"""One decoding interface for both encoder-decoders, and one sampling rule for the language models.

``seqbook.decoding.greedy_decode``, ``beam_search`` and ``translate`` take the recurrent ``Seq2Seq``
(chapter 4) and the ``Seq2SeqTransformer`` (chapter 6) alike, through their ``encode`` and
``decode_step`` methods; every test of the decoders runs on both. ``seqbook.decoding.sample_next``
is the rule by which ``generate``, ``sample_sequence`` and ``GPT.generate`` draw a token.
"""

import itertools

import pytest
import torch
from tolerance import approx, assert_close, assert_same_math

from seqbook import decoding
from seqbook.data import date_dataset
from seqbook.decoding import (
    beam_search,
    forbid_tokens,
    generate,
    generate_tokens,
    greedy_decode,
    sample_next,
    translate,
)
from seqbook.gpt import GPT, GPTConfig
from seqbook.lm import CharLM
from seqbook.seq2seq import Seq2Seq
from seqbook.transformer import Seq2SeqTransformer
from seqbook.vocab import Vocab, decode_ids

PAD, SOS, EOS = Vocab.pad_id, Vocab.sos_id, Vocab.eos_id
F64 = torch.float64
V_SRC, V_TGT = 9, 8
KINDS = ["rnn", "transformer"]
# the longest sums behind one logit of the small models below, in float64: a rough count is enough
TERMS = 2_000


def make_model(kind, device="cpu", dtype=F64, dropout=0.0, V=V_TGT, V_src=V_SRC, seed=0):
    """A small model of either kind, in eval mode."""
    torch.manual_seed(seed)
    if kind == "rnn":
        model = Seq2Seq(V_src, V, embed_dim=6, hidden_size=7, attention_dim=5)
    else:
        model = Seq2SeqTransformer(V_src, V, embed_dim=8, num_heads=2, num_encoder_layers=1,
                                   num_decoder_layers=1, dropout=dropout, max_len=32)
    return model.to(device=device, dtype=dtype).eval()


def out_layer(model):
    """The linear layer that writes the target logits."""
    return model.decoder.out if isinstance(model, Seq2Seq) else model.generator


def sharpen(model, factor=4.0):
    """Peaked next-token distributions, so that decoders have something to choose between."""
    with torch.no_grad():
        out_layer(model).weight.mul_(factor)
    return model


def sources(device="cpu", lengths=(5, 3, 1), seed=0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor(lengths)
    src = torch.randint(4, V_SRC, (len(lengths), int(lengths.max())), generator=g)
    src[torch.arange(src.shape[1])[None] >= lengths[:, None]] = PAD
    return src.to(device), lengths.to(device)


def teacher_forced(model, src, lengths, tgt_in):
    """Logits (B, T, V) of every position of ``tgt_in`` at once (teacher forcing)."""
    return model(src, lengths, tgt_in) if isinstance(model, Seq2Seq) else model(src, tgt_in)


def shifted(ys):
    """``<sos> y_1 .. y_{L-1}``: the inputs that made ``ys``."""
    return torch.cat([torch.full_like(ys[:, :1], SOS), ys[:, :-1]], 1)


def sequence_log_prob(model, src, lengths, ys):
    """log p(ys | src) by teacher forcing, up to and including the first <eos> (padding adds nothing)."""
    logp = torch.log_softmax(teacher_forced(model, src, lengths, shifted(ys)), -1)
    return (logp.gather(2, ys[..., None]).squeeze(-1) * (ys != PAD)).sum(1)


def written(ys):
    """Tokens written per row, <eos> included (the padding after it is not)."""
    return (ys != PAD).sum(1)


# ---------------------------------------------------------------------------------------------
# Greedy decoding and beam search, on both models.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_beam_width_one_equals_greedy(kind, device):
    model = sharpen(make_model(kind, device))
    src, lengths = sources(device, lengths=tuple(range(1, 8)) * 2, seed=1)
    greedy = greedy_decode(model, src, lengths, max_len=9)
    assert torch.equal(beam_search(model, src, lengths, 1, max_len=9), greedy)
    assert torch.equal(beam_search(model, src, lengths, 1, max_len=9, length_penalty=1.0), greedy)


@pytest.mark.parametrize("kind", KINDS)
def test_greedy_follows_the_teacher_forced_argmax(kind, device):
    model = sharpen(make_model(kind, device))
    src, lengths = sources(device)
    ys = greedy_decode(model, src, lengths, max_len=8)
    assert ys.shape[0] == 3 and 1 <= ys.shape[1] <= 8
    expected = teacher_forced(model, src, lengths, shifted(ys)).argmax(-1)
    for b in range(3):  # up to and including the first <eos>, then <pad>
        n = int(written(ys[b : b + 1]))
        assert torch.equal(ys[b, :n], expected[b, :n])
        assert (ys[b, n:] == PAD).all()


@pytest.mark.parametrize("kind", KINDS)
def test_decoders_give_the_output_a_biased_model_predicts(kind, device):
    # no weights into the output layer: every step predicts by the bias alone, whatever the source
    model = make_model(kind, device)
    src, lengths = sources(device)
    with torch.no_grad():
        out_layer(model).weight.zero_()
        out_layer(model).bias.zero_()
        out_layer(model).bias[5] = 10.0
        out_layer(model).bias[6] = 5.0
    for decode in (lambda **kw: greedy_decode(model, src, lengths, 6, **kw),
                   lambda **kw: beam_search(model, src, lengths, 3, 6, **kw)):
        assert torch.equal(decode(), torch.full((3, 6), 5, device=device))
        assert torch.equal(decode(forbid=(5,)), torch.full((3, 6), 6, device=device))  # the next best
        with torch.no_grad():
            out_layer(model).bias[EOS] = 20.0
        ys = decode()  # <eos> first; beam search may have run on with other beams, then pads
        assert ys[:, 0].tolist() == [EOS] * 3 and (ys[:, 1:] == PAD).all()
        assert torch.equal(decode(forbid=[EOS]), torch.full((3, 6), 5, device=device))
        with torch.no_grad():
            out_layer(model).bias[EOS] = 0.0


@pytest.mark.parametrize("kind", KINDS)
def test_forbidden_ids_are_never_emitted(kind, device):
    model = sharpen(make_model(kind, device))
    src, lengths = sources(device, lengths=tuple(range(1, 8)), seed=2)
    forbid = (EOS, 4, 5)
    for ys in (greedy_decode(model, src, lengths, 7, forbid=forbid),
               beam_search(model, src, lengths, 3, 7, forbid=forbid)):
        assert ys.shape == (7, 7)  # without <eos> every row runs to max_len
        assert not torch.isin(ys, torch.tensor(forbid, device=device)).any()


@pytest.mark.parametrize("kind", KINDS)
def test_beam_scores_are_the_log_probs_of_the_returned_sequences(kind, device):
    model = sharpen(make_model(kind, device))
    src, lengths = sources(device)
    for alpha in (0.0, 1.5):
        ys, scores = beam_search(model, src, lengths, 4, 6, return_scores=True, length_penalty=alpha)
        assert scores.dtype == F64
        assert_same_math(scores, sequence_log_prob(model, src, lengths, ys), n=TERMS)


def brute_force(model, src, lengths, max_len, alpha):
    """The best sequence for ``src`` (one source) by log p / lp, over every sequence that ends at its
    first <eos> or is cut at ``max_len``: ``(normalised score, log p, tokens written)``."""
    V = out_layer(model).out_features
    best = (-float("inf"), None, None)
    for n in range(1, max_len + 1):
        for seq in itertools.product(range(1, V), repeat=n):
            if EOS in seq[:-1] or (n < max_len and seq[-1] != EOS):
                continue
            ys = torch.tensor([list(seq) + [PAD] * (max_len - n)], device=src.device)
            with torch.no_grad():
                logp = float(sequence_log_prob(model, src, lengths, ys))
            best = max(best, (logp / ((5 + n) / 6) ** alpha, logp, n), key=lambda t: t[0])
    return best


# seeds for which greedy decoding misses the best sequence and length normalisation changes it
@pytest.mark.parametrize(("kind", "seed"), [("rnn", 11), ("transformer", 20)])
def test_exhaustive_beam_finds_the_best_sequence_with_and_without_length_normalisation(kind, seed):
    V, max_len = 5, 3
    model = make_model(kind, V=V, seed=seed)
    with torch.no_grad():
        out_layer(model).weight.mul_(8.0)  # peaked distributions
        out_layer(model).bias[EOS] += 1.0  # short outputs are likely: length normalisation matters
        out_layer(model).bias[PAD] -= 100.0  # <pad> only ever follows <eos>
    src, lengths = torch.tensor([[4, 5, 4]]), torch.tensor([3])
    best = {}
    for alpha in (0.0, 3.0):
        best[alpha] = brute_force(model, src, lengths, max_len, alpha)
        # a beam as wide as the number of sequences keeps every one of them
        ys, score = beam_search(model, src, lengths, V**max_len, max_len, return_scores=True,
                                length_penalty=alpha)
        assert int(written(ys)) == best[alpha][2]
        assert score.item() == approx(best[alpha][1], F64, n=TERMS)
    _, greedy = beam_search(model, src, lengths, 1, max_len, return_scores=True)
    assert greedy.item() < best[0.0][1] - 0.1  # greedy goes wrong here
    assert best[3.0][2] > best[0.0][2]  # and a longer output wins with alpha = 3


@pytest.mark.parametrize("kind", KINDS)
def test_greedy_returns_the_attention_of_each_step(kind, device):
    model = sharpen(make_model(kind, device))
    src, lengths = sources(device, lengths=(5, 2, 4))
    ys, weights = greedy_decode(model, src, lengths, 7, return_attention=True)
    assert torch.equal(ys, greedy_decode(model, src, lengths, 7))
    assert weights.shape == (*ys.shape, src.shape[1])
    real = ys != PAD  # (B, L): the steps before and at <eos>
    assert_close(weights.sum(-1)[real], torch.ones(int(real.sum()), dtype=F64, device=device), n=10)
    assert (weights[~real] == 0).all()
    assert (weights.masked_select((src == PAD)[:, None, :].expand_as(weights)) == 0).all()
    if kind == "transformer":  # the last layer's cross-attention, averaged over the heads
        with torch.no_grad():
            model(src, shifted(ys), need_weights=True)
        expected = model.decoder[-1].cross_attn_weights.mean(1)  # (B, L, S)
        assert_same_math(weights[real], expected[real], n=TERMS)


def test_plain_decoder_has_no_attention_to_return():
    model = Seq2Seq(V_SRC, V_TGT, embed_dim=6, hidden_size=7, attention=False).eval()
    src, lengths = sources()
    ys, weights = greedy_decode(model, src, lengths, 4, return_attention=True)
    assert weights is None and ys.shape[0] == 3


@pytest.mark.parametrize("kind", KINDS)
def test_decoders_run_in_eval_mode_and_restore_the_mode(kind):
    model = sharpen(make_model(kind, dropout=0.5))
    src, lengths = sources(lengths=tuple(range(1, 8)), seed=4)
    expected = greedy_decode(model, src, lengths, 8)
    expected_beam = beam_search(model, src, lengths, 3, 8)
    model.train()
    assert torch.equal(greedy_decode(model, src, lengths, 8), expected)
    assert torch.equal(beam_search(model, src, lengths, 3, 8), expected_beam)
    assert model.training


@pytest.mark.parametrize("kind", KINDS)
def test_translate_takes_both_models(kind):
    data = date_dataset(50, 8, seed=0)
    model = make_model(kind, dtype=torch.float32, V=len(data.tgt_vocab), V_src=len(data.src_vocab))
    model.train()
    test = [s for s, _ in data.test]
    greedy = translate(model, test, data.src_vocab, data.tgt_vocab, max_len=11, batch_size=3)
    assert model.training  # the mode is restored
    assert greedy == translate(model, test, data.src_vocab, data.tgt_vocab, max_len=11, beam_width=1)
    beam = translate(model, test, data.src_vocab, data.tgt_vocab, 11, beam_width=3, length_penalty=0.6)
    assert len(greedy) == len(beam) == 8 and all(isinstance(p, str) for p in beam)
    # the strings are the greedy ids read back with the target vocabulary
    src, lengths, _ = data.tensors("test")
    ys = greedy_decode(model, src, lengths, 11)
    assert greedy == [decode_ids(row, data.tgt_vocab) for row in ys]


def test_transformer_state_is_the_target_prefix():
    model = make_model("transformer")
    src, lengths = sources()
    memory = model.encode(src, lengths)
    y = torch.full((3,), SOS)
    logits, state = model.decode_step(y, None, memory)
    assert state.tolist() == [[SOS]] * 3 and logits.shape == (3, V_TGT)
    nxt = logits.argmax(-1)
    logits2, state2 = model.decode_step(nxt, state, memory)
    assert torch.equal(state2, torch.stack([y, nxt], 1))
    assert_same_math(logits2, model(src, state2)[:, -1], n=TERMS)


def test_rnn_state_is_the_decoder_state():
    model = make_model("rnn")
    src, lengths = sources()
    memory = model.encode(src, lengths)
    logits, s = model.decode_step(torch.full((3,), SOS), None, memory)
    s0 = model.decoder.init_state(memory)
    expected_logits, expected_s, _ = model.decoder.step(torch.full((3,), SOS), s0, memory)
    assert torch.equal(logits, expected_logits) and torch.equal(s, expected_s)


# ---------------------------------------------------------------------------------------------
# sample_next: the one sampling rule of the language models.
# ---------------------------------------------------------------------------------------------


def test_temperature_zero_is_the_argmax_and_draws_nothing():
    logits = torch.randn(50, 11)
    g = torch.Generator().manual_seed(0)
    before = g.get_state()
    ids = sample_next(logits, temperature=0, generator=g)
    assert ids.dtype == torch.int64 and torch.equal(ids, logits.argmax(-1))
    assert torch.equal(g.get_state(), before)  # greedy uses no randomness
    # top_k=1 at any temperature is the argmax too
    assert torch.equal(sample_next(logits, 2.0, top_k=1, generator=g), logits.argmax(-1))


def test_forbidden_ids_are_never_drawn():
    logits = torch.zeros(4000, 6)
    logits[:, 1] = 5.0  # the favourite, forbidden
    logits[:, 3] = 4.0  # the next best, forbidden too
    g = torch.Generator().manual_seed(0)
    ids = sample_next(logits, 1.0, forbid=(1, 3), generator=g)
    assert not torch.isin(ids, torch.tensor([1, 3])).any()
    assert set(ids.tolist()) == {0, 2, 4, 5}
    assert (sample_next(logits, 0.0, forbid=[1]) == 3).all()  # greedy takes the best allowed id
    out = forbid_tokens(logits, (1, 3))
    assert torch.isinf(out[:, [1, 3]]).all() and (logits[:, 1] == 5.0).all()  # the input is untouched
    assert forbid_tokens(logits, ()) is logits


def test_samples_follow_the_softmax_at_the_temperature_and_top_k():
    z = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0])
    n = 40_000
    g = torch.Generator().manual_seed(0)
    for temperature, top_k in ((1.0, None), (0.5, None), (2.0, 3)):
        ids = sample_next(z.expand(n, 5), temperature, top_k=top_k, generator=g)
        freq = torch.bincount(ids, minlength=5).double() / n
        p = torch.softmax(z.double() / temperature, -1)
        if top_k is not None:
            p[top_k:] = 0.0  # z is sorted: the top k are the first k
            p /= p.sum()
        # Monte Carlo: the standard error of a frequency is at most 0.5 / sqrt(n) = 0.0025; allow 6 of them
        assert (freq - p).abs().max() < 0.015, (temperature, top_k, freq, p)
        if top_k is not None:
            assert (freq[top_k:] == 0).all()


def test_sampling_is_reproducible_and_stays_on_the_device(device):
    logits = torch.randn(8, 30, device=device)
    a = sample_next(logits, 0.8, generator=torch.Generator().manual_seed(1))
    b = sample_next(logits, 0.8, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b) and a.device == logits.device and a.shape == (8,)
    assert sample_next(logits.double(), 1.0, top_k=30).shape == (8,)


def test_gpt_generate_draws_with_sample_next():
    torch.manual_seed(0)
    gpt = GPT(GPTConfig(vocab_size=12, block_size=8, n_layer=1, n_head=2, n_embd=8, init_std=0.5)).eval()
    idx = torch.tensor([[4, 5, 6], [7, 8, 9]])
    kw = dict(temperature=0.7, top_k=6, forbid=(0, 1, 2, 3))
    out = gpt.generate(idx, 10, generator=torch.Generator().manual_seed(3), **kw)
    g, expected = torch.Generator().manual_seed(3), idx
    with torch.no_grad():
        for _ in range(10):
            nxt = sample_next(gpt(expected[:, -8:])[0][:, -1], generator=g, **kw)
            expected = torch.cat([expected, nxt[:, None]], 1)
    assert torch.equal(out, expected)


# ---------------------------------------------------------------------------------------------
# The decoders know no data module: reserved ids and vocabularies come from the caller.
# ---------------------------------------------------------------------------------------------


def test_the_reserved_ids_of_decoding_are_those_of_vocab():
    assert (decoding.PAD_ID, decoding.SOS_ID, decoding.EOS_ID) == (PAD, SOS, EOS)
    assert Vocab.unk_id not in (PAD, SOS, EOS)


class CharTable:
    """A vocabulary that is not seqbook.vocab.Vocab: a token table, encode and the reserved ids."""

    pad_id, unk_id, sos_id, eos_id = 0, 1, 2, 3

    def __init__(self, chars):
        self.itos = ["<pad>", "<unk>", "<sos>", "<eos>", *chars]
        self.stoi = {c: i for i, c in enumerate(self.itos)}

    def encode(self, tokens, add_sos=False, add_eos=False):
        ids = [self.stoi.get(t, self.unk_id) for t in tokens]
        return [self.sos_id] * add_sos + ids + [self.eos_id] * add_eos


def test_any_vocabulary_with_the_reserved_ids_decodes_as_vocab_does():
    data = date_dataset(40, 6, seed=0)
    model = make_model("rnn", dtype=torch.float32, V=len(data.tgt_vocab), V_src=len(data.src_vocab))
    src_table, tgt_table = (CharTable(v.itos[4:]) for v in (data.src_vocab, data.tgt_vocab))
    test = [s for s, _ in data.test]
    expected = translate(model, test, data.src_vocab, data.tgt_vocab, 11)
    assert translate(model, test, src_table, tgt_table, 11) == expected
    assert translate(model, test, src_table, tgt_table, 11, beam_width=2) == translate(
        model, test, data.src_vocab, data.tgt_vocab, 11, beam_width=2)
    vocab = Vocab(list("the time machine"))
    lm = CharLM(len(vocab), hidden_size=8, embed_dim=4)
    table = CharTable(vocab.itos[4:])
    g = lambda: torch.Generator().manual_seed(0)  # noqa: E731
    assert generate(lm, table, "the ", 12, generator=g()) == generate(lm, vocab, "the ", 12, generator=g())


def test_generate_tokens_is_the_loop_of_gpt_generate_and_checks_its_own_door():
    torch.manual_seed(0)
    gpt = GPT(GPTConfig(vocab_size=12, block_size=8, n_layer=1, n_head=2, n_embd=8, init_std=0.5))
    idx = torch.tensor([[4, 5, 6], [7, 8, 9]])
    kw = dict(temperature=0.7, top_k=6, forbid=(0, 1, 2, 3))
    for use_cache in (False, True):
        ours = generate_tokens(gpt, idx, 10, generator=torch.Generator().manual_seed(3),
                               use_cache=use_cache, **kw)
        theirs = gpt.generate(idx, 10, generator=torch.Generator().manual_seed(3), use_cache=use_cache,
                              **kw)
        assert torch.equal(ours, theirs) and gpt.training  # the mode is restored
    assert torch.equal(generate_tokens(gpt, idx, 0), idx)
    with pytest.raises(ValueError, match=r"idx must hold ids in \[0, 11\], found 12"):
        generate_tokens(gpt, idx + 3, 2)
    with pytest.raises(TypeError, match="model must be a transformer language model"):
        generate_tokens(CharLM(12), idx, 2)
    with pytest.raises(ValueError, match=r"forbid\[0\] must be an int <= 11, got 12"):
        generate_tokens(gpt, idx, 2, forbid=[12])


@pytest.mark.parametrize("kind", KINDS)
def test_decoders_refuse_lengths_beyond_the_source(kind):
    model = make_model(kind)
    src, lengths = sources()
    longer = lengths.clone()
    longer[1] = src.shape[1] + 2
    message = rf"src_lengths must lie in \[1, {src.shape[1]}\] .*longest length of {src.shape[1] + 2}"
    for decode in (lambda: greedy_decode(model, src, longer, 4),
                   lambda: beam_search(model, src, longer, 2, 4)):
        with pytest.raises(ValueError, match=message):
            decode()
