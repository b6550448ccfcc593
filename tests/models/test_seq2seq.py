"""seqbook.seq2seq: data pipeline, encoder, decoders, teacher forcing; greedy and beam decoding of
seqbook.decoding on the recurrent model."""

import itertools

import pytest
import torch
from tolerance import approx, assert_close, assert_same_math
from torch import nn

from seqbook.batching import bucket_batches, encode_pairs
from seqbook.data import copy_dataset, date_dataset
from seqbook.decoding import beam_search, greedy_decode, translate
from seqbook.seq2seq import (
    Encoder,
    Seq2Seq,
    exact_match,
    exact_match_by_length,
    reverse_padded,
)
from seqbook.utils import set_fast
from seqbook.vocab import Vocab, decode_ids

EOS, PAD = Vocab.eos_id, Vocab.pad_id
F64 = torch.float64


def model_and_batch(attention=True, device="cpu", fast=False, V_src=9, V_tgt=8, lengths=(5, 3, 1),
                    dtype=torch.float32):
    torch.manual_seed(0)
    model = Seq2Seq(V_src, V_tgt, embed_dim=6, hidden_size=7, attention=attention, attention_dim=5,
                    fast=fast).to(device=device, dtype=dtype)
    lengths = torch.tensor(lengths, device=device)
    src = torch.randint(4, V_src, (len(lengths), int(lengths.max())), device=device)
    src[torch.arange(src.shape[1], device=device)[None] >= lengths[:, None]] = PAD
    tgt = torch.randint(4, V_tgt, (len(lengths), 4), device=device)
    tgt[:, 0] = Vocab.sos_id
    return model, src, lengths, tgt


def gru_terms(S, E, H):
    """Sums behind one state of a GRU run over S steps: input (E) and state (H) into each gate."""
    return S * (E + H)


def model_terms(S=5, T=4, E=6, H=7, A=5, V=8):
    """Sums behind one logit of :func:`model_and_batch`'s model: the encoder over S steps, then T decoder
    steps of attention (2H into the keys, H into the query, A into a score, S into the context) and a
    GRU step (E + 2H inputs, H states), then the read-out (H + 2H + E) and a softmax over V."""
    return gru_terms(S, E, H) + T * (2 * H + H + A + S + E + 2 * H + H) + (3 * H + E) + V


# --- data -------------------------------------------------------------------------------------


def test_date_dataset_is_deterministic_and_split_by_date():
    a, b = date_dataset(300, 100, seed=3), date_dataset(300, 100, seed=3)
    assert a.train == b.train and a.test == b.test
    assert len(a.train) == 300 and len(a.test) == 100
    assert not {iso for _, iso in a.train} & {iso for _, iso in a.test}
    assert date_dataset(300, 100, seed=4).test != a.test
    assert set(a.tgt_vocab.itos[4:]) <= set("0123456789-")
    assert a.max_target_len == 11


def test_encode_decode_round_trip():
    data = date_dataset(200, 20, seed=0)
    src, src_lengths, tgt = data.tensors("test")
    assert src.shape[0] == tgt.shape[0] == src_lengths.shape[0] == 20
    for (s, t), row, n, trow in zip(data.test, src, src_lengths, tgt, strict=True):
        assert int(n) == len(s) + 1 and row[n - 1] == EOS  # characters, then <eos>
        assert trow[0] == Vocab.sos_id
        assert decode_ids(trow, data.tgt_vocab) == t
    with pytest.raises(ValueError, match="split must be"):
        data.tensors("valid")
    with pytest.raises(ValueError, match="pairs is empty"):
        encode_pairs([], data.src_vocab, data.tgt_vocab)


def test_decode_ids_stops_at_eos():
    v = Vocab(list("ab"))
    ids = [Vocab.sos_id, v["a"], v["b"], EOS, v["a"], PAD]
    assert decode_ids(ids, v) == "ab"
    assert decode_ids(torch.tensor([v["b"], PAD, v["a"]]), v) == "ba"


def test_copy_dataset_lengths():
    data = copy_dataset(500, 6, 3, test_max_len=9, seed=1, alphabet="xyz")
    assert all(s == t for s, t in data.train + data.test)
    assert {len(s) for s, _ in data.train} == set(range(1, 7))
    assert [len(s) for s, _ in data.test] == [n for n in range(1, 10) for _ in range(3)]
    with pytest.raises(ValueError, match="alphabet"):
        copy_dataset(5, 3, 1, alphabet="a")


def test_bucket_batches_trim_and_group_by_length():
    data = copy_dataset(400, 12, 1, seed=0)
    src, src_lengths, tgt = data.tensors("train")
    batches = bucket_batches(src, src_lengths, tgt, 16, torch.Generator().manual_seed(0))
    for _ in range(30):
        s, n, t = next(batches)
        assert s.shape == (16, int(n.max())) and t.shape[0] == 16
        assert (t[:, -1] != PAD).any()  # trimmed to the longest target
        assert int(n.max()) - int(n.min()) <= 3  # sorted pools give batches of similar length
    with pytest.raises(ValueError, match="batch_size"):
        next(bucket_batches(src, src_lengths, tgt, 0))


def test_exact_match():
    assert exact_match(["a", "b", "c", "d"], ["a", "x", "c", "y"]) == 0.5
    lengths, acc, count = exact_match_by_length(["ab", "c", "dd"], [("xy", "ab"), ("z", "q"), ("uv", "dd")])
    assert lengths.tolist() == [1, 2] and acc.tolist() == [0.0, 1.0] and count.tolist() == [1, 2]
    with pytest.raises(ValueError, match="equally many"):
        exact_match(["a"], ["a", "b"])


# --- encoder ----------------------------------------------------------------------------------


def test_reverse_padded():
    x = torch.arange(12.0).view(2, 6, 1)
    lengths = torch.tensor([4, 6])
    r = reverse_padded(x, lengths)
    assert r[0, :, 0].tolist() == [3, 2, 1, 0, 4, 5]
    assert r[1, :, 0].tolist() == [11, 10, 9, 8, 7, 6]
    assert torch.equal(reverse_padded(r, lengths), x)


def test_encoder_equals_torch_bidirectional_gru_on_unpadded_input(device):
    torch.manual_seed(0)
    enc = Encoder(10, 4, 6).to(device=device, dtype=F64)
    ref = nn.GRU(4, 6, batch_first=True, bidirectional=True).to(device=device, dtype=F64)
    with torch.no_grad():
        for ours, suffix in ((enc.forward_rnn.cells[0], "l0"), (enc.backward_rnn.cells[0], "l0_reverse")):
            for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                getattr(ours, name).copy_(getattr(ref, f"{name}_{suffix}"))
    src = torch.randint(1, 10, (3, 7), device=device)
    out = enc(src, torch.full((3,), 7, device=device))
    expected, h_n = ref(enc.embedding(src))
    n = gru_terms(7, 4, 6)
    assert_same_math(out.annotations, expected, n=n)
    assert_same_math(out.final, torch.cat([h_n[0], h_n[1]], dim=-1), n=n)
    assert out.mask.all()


def test_encoder_ignores_padding(device):
    torch.manual_seed(0)
    enc = Encoder(10, 4, 6).to(device=device, dtype=F64)
    src = torch.randint(4, 10, (2, 6), device=device)
    lengths = torch.tensor([6, 3], device=device)
    padded = enc(src, lengths)
    alone = enc(src[1:, :3], lengths[1:])
    n = gru_terms(6, 4, 6)
    assert_same_math(padded.annotations[1, :3], alone.annotations[0], n=n)
    assert_same_math(padded.final[1], alone.final[0], n=n)
    assert torch.all(padded.annotations[1, 3:] == 0) and padded.mask[1].tolist() == [1, 1, 1, 0, 0, 0]


# --- model ------------------------------------------------------------------------------------


@pytest.mark.parametrize("attention", [True, False])
def test_fast_path_equals_readable_path(device, attention):
    model, src, lengths, tgt = model_and_batch(attention, device, dtype=F64)
    loss = model.loss(src, lengths, tgt)
    grads = torch.autograd.grad(loss, list(model.parameters()))
    set_fast(model, True)
    assert model.encoder.forward_rnn.fast and model.encoder.backward_rnn.fast and model.decoder.cell.fast
    loss_fast = model.loss(src, lengths, tgt)
    grads_fast = torch.autograd.grad(loss_fast, list(model.parameters()))
    n = model_terms() + 3 * 4  # the loss: a mean over B * T
    assert_same_math(loss_fast, loss, n=n)
    for g, gf in zip(grads, grads_fast, strict=True):
        assert_same_math(gf, g, n=2 * n + 3 * 4)  # forward, backward, a sum over B * T


@pytest.mark.parametrize("attention", [True, False])
def test_teacher_forcing_equals_stepping(device, attention):
    model, src, lengths, tgt = model_and_batch(attention, device, dtype=F64)
    logits, weights = model(src, lengths, tgt, return_attention=True)
    memory = model.encode(src, lengths)
    s = model.decoder.init_state(memory)
    n = model_terms()
    for i in range(tgt.shape[1]):
        step_logits, s, w = model.decoder.step(tgt[:, i], s, memory)
        assert_same_math(logits[:, i], step_logits, n=n)
        if attention:
            assert_same_math(weights[:, i], w, n=n)
    assert (weights is None) == (not attention)


def test_attention_weights_in_the_model_respect_padding(device):
    model, src, lengths, tgt = model_and_batch(True, device, lengths=(5, 2, 4))
    _, weights = model(src, lengths, tgt, return_attention=True)  # (B, T, S)
    assert weights.shape == (3, 4, 5)
    assert_close(weights.sum(-1), torch.ones(3, 4, device=device), n=2 * 5)  # softmax over S, then sum
    pad = src == PAD
    assert torch.all(weights.masked_select(pad[:, None, :].expand_as(weights)) == 0.0)


@pytest.mark.parametrize("attention", [True, False])
@pytest.mark.parametrize("lengths", [(1,), (4,), (1, 1)])
def test_shapes_for_batch_one_and_length_one(device, attention, lengths):
    model, src, src_lengths, tgt = model_and_batch(attention, device, lengths=lengths)
    logits = model(src, src_lengths, tgt)
    assert logits.shape == (len(lengths), 4, 8)
    ys, weights = greedy_decode(model, src, src_lengths, max_len=5, return_attention=True)
    assert ys.shape[0] == len(lengths) and 1 <= ys.shape[1] <= 5
    assert (weights is None) == (not attention)
    if attention:
        assert weights.shape == (*ys.shape, src.shape[1])
    assert beam_search(model, src, src_lengths, 3, max_len=5).shape[0] == len(lengths)


def test_loss_ignores_padding(device):
    model, src, lengths, tgt = model_and_batch(True, device, dtype=F64)
    padded = torch.cat([tgt, torch.full((3, 2), PAD, device=device)], 1)
    assert_same_math(model.loss(src, lengths, padded), model.loss(src, lengths, tgt), n=model_terms() + 3 * 6)


# --- decoding ---------------------------------------------------------------------------------


def biased(model, token, amount=100.0):
    """Make ``token`` the certain prediction of every step."""
    with torch.no_grad():
        model.decoder.out.bias[token] += amount
    return model


def test_greedy_stops_at_eos(device):
    model, src, lengths, _ = model_and_batch(True, device)
    ys = greedy_decode(biased(model, EOS), src, lengths, max_len=10)
    assert ys.tolist() == [[EOS], [EOS], [EOS]]


def test_greedy_respects_max_len(device):
    model, src, lengths, _ = model_and_batch(True, device)
    ys = greedy_decode(biased(model, 5), src, lengths, max_len=6)
    assert ys.shape == (3, 6) and torch.all(ys == 5)
    assert beam_search(model, src, lengths, 2, max_len=6).shape == (3, 6)


def test_greedy_pads_after_eos(device):
    model, src, lengths, _ = model_and_batch(True, device)
    ys = greedy_decode(model, src, lengths, max_len=12)
    for row in ys.tolist():
        if EOS in row:
            assert all(t == PAD for t in row[row.index(EOS) + 1 :])


@pytest.mark.parametrize("attention", [True, False])
def test_beam_width_one_equals_greedy(device, attention):
    model, _, _, _ = model_and_batch(attention, device)
    torch.manual_seed(1)
    lengths = torch.randint(1, 8, (16,), device=device)
    src = torch.randint(4, 9, (16, 7), device=device)
    greedy = greedy_decode(model, src, lengths, max_len=9)
    beam = beam_search(model, src, lengths, 1, max_len=9)
    assert torch.equal(beam, greedy)


def sequence_log_prob(model, src, lengths, ys):
    """log p(ys | src) by teacher forcing, up to and including the first <eos>."""
    tgt_in = torch.cat([torch.full((ys.shape[0], 1), Vocab.sos_id, device=ys.device), ys[:, :-1]], 1)
    logp = torch.log_softmax(model(src, lengths, tgt_in), -1).gather(2, ys[..., None]).squeeze(-1)
    return (logp * (ys != PAD)).sum(1)


def test_beam_scores_are_the_log_probs_of_the_returned_sequences(device):
    model, src, lengths, _ = model_and_batch(True, device)
    model.eval()
    ys, scores = beam_search(model, src, lengths, 4, max_len=6, return_scores=True)
    # float32: beam search takes its log-softmax in float32 whatever the model's dtype; 6 steps summed
    assert_close(scores, sequence_log_prob(model, src, lengths, ys), n=model_terms(T=6) + 6)


def test_wide_beam_finds_the_best_sequence_by_brute_force():
    torch.manual_seed(10)
    V, max_len = 5, 3
    model = Seq2Seq(6, V, embed_dim=4, hidden_size=5, attention=True).eval()
    src, lengths = torch.tensor([[4, 5, 4]]), torch.tensor([3])
    with torch.no_grad():
        model.decoder.out.weight.mul_(8.0)  # peaked distributions: greedy goes wrong here
        model.decoder.out.bias[PAD] -= 100.0  # <pad> only ever follows <eos>
    best = -float("inf")
    for n in range(1, max_len + 1):
        for seq in itertools.product(range(1, V), repeat=n):
            if EOS in seq[:-1] or (n < max_len and seq[-1] != EOS):
                continue  # a sequence ends at its first <eos>, or is cut at max_len
            ys = torch.tensor([list(seq) + [PAD] * (max_len - n)])
            with torch.no_grad():
                best = max(best, float(sequence_log_prob(model, src, lengths, ys)))
    _, exhaustive = beam_search(model, src, lengths, V**max_len, max_len, return_scores=True)
    _, narrow = beam_search(model, src, lengths, 2, max_len, return_scores=True)
    _, greedy = beam_search(model, src, lengths, 1, max_len, return_scores=True)
    # float32 scores of the model below, summed over max_len steps
    assert exhaustive.item() == approx(best, torch.float32, n=model_terms(S=3, T=max_len, E=4, H=5, A=5, V=V))
    assert greedy.item() < narrow.item() < best - 0.1  # a wider beam finds better sequences here


def test_translate_and_exact_match():
    data = date_dataset(50, 8, seed=0)
    model = Seq2Seq(len(data.src_vocab), len(data.tgt_vocab), embed_dim=4, hidden_size=5)
    sources = [s for s, _ in data.test]
    greedy = translate(model, sources, data.src_vocab, data.tgt_vocab, max_len=11, batch_size=3)
    beam1 = translate(model, sources, data.src_vocab, data.tgt_vocab, max_len=11, beam_width=1)
    assert greedy == beam1 and len(greedy) == 8
    # an untrained model may emit <unk>: one token, five characters
    assert all(len(p.replace("<unk>", "?")) <= 11 for p in greedy)
    assert 0.0 <= exact_match(greedy, [t for _, t in data.test]) <= 1.0
    with pytest.raises(ValueError, match="list of strings"):
        translate(model, "3 march 2021", data.src_vocab, data.tgt_vocab, max_len=11)


# --- bad input --------------------------------------------------------------------------------


def test_bad_input_raises_clear_errors():
    model, src, lengths, tgt = model_and_batch(True)
    with pytest.raises(TypeError, match=r"src must be an int64 tensor of shape \(B, S\)"):
        model(src.float(), lengths, tgt)
    with pytest.raises(ValueError, match=r"src must be an int64 tensor of shape \(B, S\), got .* \(5,\)"):
        model(src[0], lengths, tgt)
    with pytest.raises(ValueError, match=r"src_lengths must have shape \(3,\), got \(2,\)"):
        model(src, lengths[:2], tgt)
    with pytest.raises(ValueError, match=r"src_lengths must lie in \[1, 5\]"):
        model(src, torch.tensor([6, 3, 1]), tgt)
    with pytest.raises(ValueError, match=r"src_lengths must lie in \[1, 5\]"):
        model(src, torch.tensor([5, 0, 1]), tgt)
    with pytest.raises(ValueError, match=r"src ids must lie in \[0, 9\)"):
        model(src + 20, lengths, tgt)
    with pytest.raises(ValueError, match=r"tgt_in must have shape \(3, T>=1\), got \(2, 4\)"):
        model(src, lengths, tgt[:2])
    with pytest.raises(ValueError, match=r"tgt must have shape \(B, T>=2\)"):
        model.loss(src, lengths, tgt[:, :1])
    with pytest.raises(ValueError, match="max_len must be an int"):
        greedy_decode(model, src, lengths, max_len=0)
    with pytest.raises(ValueError, match="beam_width must be an int"):
        beam_search(model, src, lengths, beam_width=0, max_len=5)
    with pytest.raises(TypeError, match="model must be a Seq2Seq or a Seq2SeqTransformer"):
        greedy_decode(nn.Linear(2, 2), src, lengths, max_len=5)
    with pytest.raises(ValueError, match="hidden_size must be an int"):
        Seq2Seq(5, 5, hidden_size=0)
