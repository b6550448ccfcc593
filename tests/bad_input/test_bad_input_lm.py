"""Bad input for every public callable of ``seqbook.lm`` and the language-model samplers of
``seqbook.decoding``: a clear error in time, or a correct edge result.

Cases: 124 rejected (each a ValueError/TypeError raised by seqbook that names the argument, loops
under a timeout) and 20 legal edge checks in ``test_legal_edge_inputs``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from seqbook import data
from seqbook.batching import lm_chunks
from seqbook.decoding import check_sampling, forbid_tokens, generate, sample_next, sample_sequence
from seqbook.lm import CharLM, ConditionalCharLM, detach_state, evaluate_perplexity, unigram_perplexity
from seqbook.train import train_lm
from seqbook.vocab import Vocab
from tests.badinput import BAD_FLAGS, assert_clear_error_in_time, table, with_value

VOCAB = Vocab(list("the cat sat"))  # 4 reserved + 6 characters = 10
V = len(VOCAB)
IDS = torch.tensor(VOCAB.encode(list("the cat sat on the mat " * 3)))
X, Y = lm_chunks(IDS, 2, 5)  # (num_chunks, 2, 5)
MODEL = CharLM(V, hidden_size=4, embed_dim=3)
LSTM_LM = CharLM(V, hidden_size=4, embed_dim=3, cell="lstm")
COND = ConditionalCharLM(V, 3, hidden_size=4, embed_dim=3)
SMALL = Vocab(list("ab"))  # 6 tokens: not the model's 10
LOGITS = torch.randn(3, V, generator=torch.Generator().manual_seed(0))  # (B, V)


class Flat(nn.Module):
    """Returns one number per token, not a vector of logits."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(V, 3)

    def forward(self, ids):
        return self.embed(ids).sum(-1)  # (B, T)


def run(**kwargs):
    args = dict(model=CharLM(V, hidden_size=4, embed_dim=3), inputs=X, targets=Y, steps=2, device="cpu",
                progress=False)
    args.update(kwargs)
    return train_lm(**args)


ERRORS, case = table()
case("time_machine_ids-valid_frac-0", lambda: data.time_machine_ids(0.0), "valid_frac", "> 0")
case("time_machine_ids-valid_frac-1", lambda: data.time_machine_ids(1.0), "valid_frac", "< 1")
case("time_machine_ids-valid_frac-nan", lambda: data.time_machine_ids(math.nan), "valid_frac", "nan")
case("time_machine_ids-valid_frac-str", lambda: data.time_machine_ids("0.1"), "valid_frac", "str")
case("unigram_perplexity-2d", lambda: unigram_perplexity(IDS[None], IDS, V), "train_ids", "(N,)")
case("unigram_perplexity-eval-2d", lambda: unigram_perplexity(IDS, IDS[None], V), "eval_ids", "(N,)")
case("unigram_perplexity-eval-empty", lambda: unigram_perplexity(IDS, IDS[:0], V), "eval_ids", "empty")
case("unigram_perplexity-train-empty", lambda: unigram_perplexity(IDS[:0], IDS, V), "train_ids", "empty")
case("unigram_perplexity-float", lambda: unigram_perplexity(IDS.float(), IDS, V), "train_ids", "integer")
case("unigram_perplexity-id-too-large", lambda: unigram_perplexity(IDS, IDS, 5), "train_ids", "[0, 4]")
case("unigram_perplexity-eval-id-too-large", lambda: unigram_perplexity(IDS, torch.tensor([V]), V),
     "eval_ids", f"[0, {V - 1}]", str(V))
case("unigram_perplexity-negative-id", lambda: unigram_perplexity(IDS, torch.tensor([-1]), V), "eval_ids",
     "-1")
case("unigram_perplexity-vocab_size-0", lambda: unigram_perplexity(IDS, IDS, 0), "vocab_size", "0")
case("unigram_perplexity-vocab_size-float", lambda: unigram_perplexity(IDS, IDS, 10.0), "vocab_size", "float")
case("detach_state-str", lambda: detach_state("h"), "state", "str")
case("detach_state-list-of-floats", lambda: detach_state([1.0, 2.0]), "state[0]", "float")
case("CharLM-vocab_size-0", lambda: CharLM(0), "vocab_size", "0")
case("CharLM-vocab_size-float", lambda: CharLM(10.0), "vocab_size", "float")
case("CharLM-hidden_size-0", lambda: CharLM(V, hidden_size=0), "hidden_size", "0")
case("CharLM-embed_dim-0", lambda: CharLM(V, embed_dim=0), "embed_dim", "0")
case("CharLM-embed_dim-negative", lambda: CharLM(V, embed_dim=-2), "embed_dim", "-2")
case("CharLM-num_layers-0", lambda: CharLM(V, num_layers=0), "num_layers", "0")
case("CharLM-dropout-1", lambda: CharLM(V, dropout=1.0), "dropout", "1.0")
case("CharLM-cell", lambda: CharLM(V, cell="transformer"), "cell", "'transformer'")
case("CharLM-nonlinearity", lambda: CharLM(V, nonlinearity="gelu"), "nonlinearity", "'gelu'")
case("CharLM-fast-str", lambda: CharLM(V, fast="yes"), "fast", "str")
case("CharLM.forward-1d", lambda: MODEL(IDS), "ids", "(B, T)")
case("CharLM.forward-3d", lambda: MODEL(X), "ids", "(B, T)")
case("CharLM.forward-float", lambda: MODEL(X[0].float()), "ids", "integer", "torch.float32")
case("CharLM.forward-id-too-large", lambda: MODEL(X[0] + V), "ids", f"[0, {V - 1}]")
case("CharLM.forward-id-negative", lambda: MODEL(-X[0] - 1), "ids", f"[0, {V - 1}]")
case("CharLM.forward-T-0", lambda: MODEL(X[0, :, :0]), "ids", "empty", "(2, 0)")
case("CharLM.forward-B-0", lambda: MODEL(X[0, :0]), "ids", "empty")
case("CharLM.forward-state-batch", lambda: MODEL(X[0], torch.zeros(1, 3, 4)), "state", "(1, 2, 4)",
     "(1, 3, 4)")
case("CharLM.forward-state-list", lambda: MODEL(X[0], [0.0]), "state", "list")
case("CharLM.forward-state-float64", lambda: MODEL(X[0], torch.zeros(1, 2, 4).double()), "state",
     "torch.float64")
case("CharLM.forward-lstm-state-tensor", lambda: LSTM_LM(X[0], torch.zeros(1, 2, 4)), "state", "pair")
case("CharLM.forward-lstm-state-c", lambda: LSTM_LM(X[0], (torch.zeros(1, 2, 4), torch.zeros(2, 2, 4))),
     "state[1]", "(1, 2, 4)", "(2, 2, 4)")
case("ConditionalCharLM-num_conditions-0", lambda: ConditionalCharLM(V, 0), "num_conditions", "0")
case("ConditionalCharLM-num_conditions-float", lambda: ConditionalCharLM(V, 2.0), "num_conditions", "float")
case("ConditionalCharLM-embed_dim-0", lambda: ConditionalCharLM(V, 2, embed_dim=0), "embed_dim", "0")
case("ConditionalCharLM.initial_state-2d", lambda: COND.initial_state(torch.zeros(2, 1, dtype=torch.long)),
     "cond", "(B,)")
case("ConditionalCharLM.initial_state-too-large", lambda: COND.initial_state(torch.tensor([3])), "cond",
     "[0, 2]", "3")
case("ConditionalCharLM.initial_state-float", lambda: COND.initial_state(torch.tensor([0.0])), "cond",
     "integer")
case("ConditionalCharLM.forward-no-cond", lambda: COND(X[0]), "cond")
case("ConditionalCharLM.forward-cond-batch", lambda: COND(X[0], torch.tensor([0])), "cond", "(2,)", "(1,)")
case("ConditionalCharLM.forward-cond-negative", lambda: COND(X[0], torch.tensor([0, -1])), "cond", "-1")
case("ConditionalCharLM.forward-ids-1d", lambda: COND(IDS, torch.tensor([0])), "ids", "(B, T)")
case("sample_sequence-model-CharLM", lambda: sample_sequence(MODEL, VOCAB, 0), "model", "ConditionalCharLM")
case("sample_sequence-vocab-list", lambda: sample_sequence(COND, VOCAB.itos, 0), "vocab", "list")
case("sample_sequence-vocab-size", lambda: sample_sequence(COND, SMALL, 0), "vocab", str(V), "6")
case("sample_sequence-cond-too-large", lambda: sample_sequence(COND, VOCAB, 3), "cond", "<= 2", "3")
case("sample_sequence-cond-negative", lambda: sample_sequence(COND, VOCAB, -1), "cond", ">= 0")
case("sample_sequence-cond-tensor", lambda: sample_sequence(COND, VOCAB, torch.tensor([0])), "cond", "Tensor")
case("sample_sequence-max_len-negative", lambda: sample_sequence(COND, VOCAB, 0, max_len=-1), "max_len", "-1")
case("sample_sequence-max_len-0", lambda: sample_sequence(COND, VOCAB, 0, max_len=0), "max_len", ">= 1", "0")
case("sample_sequence-max_len-float", lambda: sample_sequence(COND, VOCAB, 0, max_len=5.0), "max_len",
     "float")
case("sample_sequence-temperature-negative", lambda: sample_sequence(COND, VOCAB, 0, temperature=-1.0),
     "temperature", ">= 0")
case("sample_sequence-temperature-nan", lambda: sample_sequence(COND, VOCAB, 0, temperature=math.nan),
     "temperature", "nan")
case("sample_sequence-generator-int", lambda: sample_sequence(COND, VOCAB, 0, generator=1), "generator",
     "int")
case("evaluate_perplexity-2d", lambda: evaluate_perplexity(MODEL, X[0], Y[0]), "inputs and targets",
     "(num_chunks, B, T)", "(2, 5)")
case("evaluate_perplexity-shape-mismatch", lambda: evaluate_perplexity(MODEL, X, Y[:, :1]),
     "inputs and targets", "(6, 1, 5)")
case("evaluate_perplexity-empty", lambda: evaluate_perplexity(MODEL, X[:0], Y[:0]), "inputs", "empty")
case("evaluate_perplexity-float", lambda: evaluate_perplexity(MODEL, X.float(), Y), "inputs", "integer")
case("evaluate_perplexity-target-too-large", lambda: evaluate_perplexity(MODEL, X, Y + V), "targets",
     f"[0, {V - 1}]")
case("evaluate_perplexity-target-negative", lambda: evaluate_perplexity(MODEL, X, Y * 0 - 1), "targets", "-1")
case("evaluate_perplexity-model-None", lambda: evaluate_perplexity(None, X, Y), "model", "NoneType")
case("evaluate_perplexity-model-no-parameters", lambda: evaluate_perplexity(nn.Identity(), X, Y), "model",
     "parameters")
case("evaluate_perplexity-model-wrong-output", lambda: evaluate_perplexity(Flat(), X, Y, carry_state=False),
     "model must return logits", "(2, 5, V)", "(2, 5)")
case("train_lm-2d", lambda: run(inputs=X[0], targets=Y[0]), "inputs and targets", "(2, 5)")
case("train_lm-empty", lambda: run(inputs=X[:0], targets=Y[:0]), "inputs", "empty")
case("train_lm-float", lambda: run(inputs=X.float()), "inputs", "integer")
case("train_lm-target-too-large", lambda: run(targets=Y + V), "targets", f"[0, {V - 1}]")
case("train_lm-model-None", lambda: run(model=None), "model", "NoneType")
case("train_lm-steps-0", lambda: run(steps=0), "steps", "0")
case("train_lm-steps-float", lambda: run(steps=2.5), "steps", "float")
case("train_lm-clip-negative", lambda: run(clip=-1.0), "clip", "-1.0")
case("train_lm-lr-nan", lambda: run(lr=math.nan), "lr", "nan")
case("train_lm-eval_every-negative", lambda: run(eval_every=-1), "eval_every", "-1")
case("generate-prefix-empty", lambda: generate(MODEL, VOCAB, "", 5), "prefix", "''")
case("generate-prefix-list", lambda: generate(MODEL, VOCAB, ["t"], 5), "prefix", "list")
case("generate-n-negative", lambda: generate(MODEL, VOCAB, "the", -1), "n must be", "-1")
case("generate-n-float", lambda: generate(MODEL, VOCAB, "the", 2.0), "n must be", "float")
case("generate-n-inf", lambda: generate(MODEL, VOCAB, "the", math.inf), "n must be", "float")
case("generate-temperature-negative", lambda: generate(MODEL, VOCAB, "the", 5, temperature=-1.0),
     "temperature", ">= 0")
case("generate-temperature-inf", lambda: generate(MODEL, VOCAB, "the", 5, temperature=math.inf),
     "temperature", "inf")
case("generate-temperature-str", lambda: generate(MODEL, VOCAB, "the", 5, temperature="1"), "temperature",
     "str")
case("generate-vocab-size", lambda: generate(MODEL, SMALL, "ab", 5), "vocab", str(V), "6")
case("generate-vocab-None", lambda: generate(MODEL, None, "the", 5), "vocab", "NoneType")
case("generate-vocab-only-reserved", lambda: generate(CharLM(4, hidden_size=2), Vocab(), "a", 5), "vocab",
     "reserved")
case("generate-model-None", lambda: generate(None, VOCAB, "the", 5), "model", "NoneType")
case("generate-generator-int", lambda: generate(MODEL, VOCAB, "the", 5, generator=0), "generator", "int")
case("sample_next-logits-rank1", lambda: sample_next(LOGITS[0]), "logits", "(B, V)", f"({V},)")
case("sample_next-logits-rank3", lambda: sample_next(LOGITS[None]), "logits", "(B, V)", f"(1, 3, {V})")
case("sample_next-logits-int", lambda: sample_next(LOGITS.long()), "logits", "floating", "int64")
case("sample_next-logits-list", lambda: sample_next([[0.0, 1.0]]), "logits", "list")
case("sample_next-temperature-negative", lambda: sample_next(LOGITS, -0.5), "temperature", ">= 0", "-0.5")
case("sample_next-temperature-nan", lambda: sample_next(LOGITS, math.nan), "temperature", "nan")
case("sample_next-top_k-0", lambda: sample_next(LOGITS, top_k=0), "top_k", ">= 1", "0")
case("sample_next-top_k-float", lambda: sample_next(LOGITS, top_k=2.0), "top_k", "float")
case("sample_next-forbid-int", lambda: sample_next(LOGITS, forbid=1), "forbid", "sequence", "int")
case("sample_next-forbid-tensor", lambda: sample_next(LOGITS, forbid=torch.tensor([1])), "forbid", "Tensor")
case("sample_next-forbid-out-of-range", lambda: sample_next(LOGITS, forbid=(0, V)), "forbid[1]",
     f"<= {V - 1}", str(V))
case("sample_next-forbid-float", lambda: sample_next(LOGITS, forbid=[1.0]), "forbid[0]", "float")
case("sample_next-forbid-all", lambda: sample_next(LOGITS, 0.0, forbid=range(V)), "forbid", "at least one id",
     str(V))
case("sample_next-generator-int", lambda: sample_next(LOGITS, generator=1), "generator", "int")
case("forbid_tokens-logits-rank1", lambda: forbid_tokens(LOGITS[0], (1,)), "logits", "(B, V)")
case("forbid_tokens-forbid-str", lambda: forbid_tokens(LOGITS, "ab"), "forbid", "str")
case("check_sampling-vocab_size-0", lambda: check_sampling(0), "vocab_size", ">= 1", "0")
case("check_sampling-forbid-negative", lambda: check_sampling(V, forbid=(-1,)), "forbid[0]", ">= 0", "-1")


def logits_with(*entries):
    """LOGITS with ``(row, column, value)`` entries set."""
    z = LOGITS.clone()
    for row, col, value in entries:
        z[row, col] = value
    return z


DEAD_ROW = LOGITS.clone()
DEAD_ROW[1] = -math.inf
# sample_next refuses logits it cannot sample from: a NaN would win the argmax (temperature 0) or
# break the draw, +inf is no logit, and a row with no finite logit left has no token to draw
case("sample_next-logits-nan-greedy", lambda: sample_next(logits_with((0, 3, math.nan)), temperature=0),
     "logits", "NaN")
case("sample_next-logits-nan-sampled", lambda: sample_next(logits_with((2, 0, math.nan)), 1.0), "logits",
     "NaN")
case("sample_next-logits-inf", lambda: sample_next(logits_with((0, 1, math.inf)), 0.0), "logits", "+inf")
case("sample_next-logits-row-of-minus-inf", lambda: sample_next(DEAD_ROW, 0.0), "logits", "row of -inf")
case("sample_next-logits-only-forbidden-left",
     lambda: sample_next(logits_with(*((1, c, -math.inf) for c in range(1, V))), 1.0, forbid=(0,)), "logits",
     "forbid", "row of -inf")
case("sample_next-logits-float64-nan-top_k",
     lambda: sample_next(logits_with((1, 2, math.nan)).double(), 0.5, top_k=2), "logits", "NaN")
case("CharLM-gru-nonlinearity", lambda: CharLM(V, cell="gru", nonlinearity="sigmoid"), "nonlinearity",
     "'sigmoid'")
case("CharLM-lstm-nonlinearity-None", lambda: CharLM(V, cell="lstm", nonlinearity=None), "nonlinearity",
     "None")
case("CharLM-cell-list", lambda: CharLM(V, cell=["gru"]), "cell", "['gru']")
case("ConditionalCharLM.forward-state-cond-too-large",
     lambda: COND(X[1], torch.tensor([0, 3]), state=torch.zeros(1, 2, 4)), "cond", "[0, 2]", "3")
case("ConditionalCharLM.forward-state-cond-float",
     lambda: COND(X[1], torch.tensor([0.0, 1.0]), state=torch.zeros(1, 2, 4)), "cond", "integer")
case("ConditionalCharLM.forward-state-cond-list", lambda: COND(X[1], [0, 1], state=torch.zeros(1, 2, 4)),
     "cond", "list")
case("train_lm-inputs-negative-id", lambda: run(model=Flat(), inputs=with_value(X, -4)), "inputs", ">= 0",
     "-4")
# every flag goes through check_flag: carry_state of evaluate_perplexity
for kind, value, word in BAD_FLAGS:
    case(f"evaluate_perplexity-carry_state-{kind}",
         lambda v=value: evaluate_perplexity(MODEL, X, Y, carry_state=v), "carry_state", word)


@pytest.mark.parametrize(("fn", "words"), ERRORS)
def test_bad_input_is_refused_clearly_in_time(fn, words):
    assert_clear_error_in_time(fn, *words, seconds=30)


def test_legal_edge_inputs():
    # unigram perplexity: float64 math; one training token is enough (add-one smoothing)
    assert unigram_perplexity(IDS[:1], IDS[:1], V) == pytest.approx((V + 1) / 2)
    assert unigram_perplexity(IDS.to(torch.int32), IDS[:3], np.int64(V)) > 1
    assert detach_state(None) is None
    h, c = detach_state([torch.ones(1, requires_grad=True), torch.ones(1, requires_grad=True)])
    assert not h.requires_grad and not c.requires_grad
    # CharLM with numpy sizes, int32 ids, a carried LSTM state given as a list
    model = CharLM(np.int64(V), hidden_size=np.int64(4), embed_dim=3, cell="lstm")
    logits, state = model(X[0].to(torch.int32))
    assert logits.shape == (2, 5, V)
    assert model(X[1], list(state))[0].shape == (2, 5, V)
    # a float64 model keeps float64 logits; the perplexity is a Python (float64) number
    model64 = CharLM(V, hidden_size=4, embed_dim=3).double()
    assert model64(X[0])[0].dtype == torch.float64
    ppl = evaluate_perplexity(model64, X, Y)
    assert isinstance(ppl, float) and 1 < ppl < 100
    # clip=0 means no clipping; steps as a NumPy int
    assert len(run(clip=0, steps=np.int64(3)).step_loss) == 3
    # max_len as a NumPy int; temperature 0 is greedy (the same every time); n=0 returns the prefix
    assert len(sample_sequence(COND, VOCAB, np.int64(2), max_len=np.int64(1))) <= 1
    g = torch.Generator().manual_seed(0)
    greedy = sample_sequence(COND, VOCAB, 0, max_len=4, temperature=0, generator=g)
    assert len(greedy) <= 4 and greedy == sample_sequence(COND, VOCAB, 0, max_len=4, temperature=0)
    assert generate(MODEL, VOCAB, "the", 0) == "the"
    assert generate(MODEL, VOCAB, "zzz", 2, temperature=0)[:3] == "zzz"  # unknown characters read as <unk>
    # sample_next: NumPy ints and a range as forbid, a top_k above V, one id left to draw, float64 logits
    assert (sample_next(LOGITS, 1.0, top_k=np.int64(V + 5), forbid=range(1, V)) == 0).all()
    last = sample_next(LOGITS.double(), np.float64(0.0), forbid=[np.int64(i) for i in range(V - 1)])
    assert (last == V - 1).all()
    assert check_sampling(np.int64(V), 1, None, [np.int64(2)]) == (1.0, None, (2,))
    # ConditionalCharLM: a state continues a sequence without cond
    logits, state = COND(X[0], torch.tensor([0, 2]))
    assert COND(X[1], state=state)[0].shape == (2, 5, V)
    assert COND(X[1], torch.tensor([1, 1]), state=state)[0].shape == (2, 5, V)  # cond checked, not used
    # -inf logits are legal (a token never drawn); carry_state may be NumPy's bool
    assert (sample_next(logits_with((0, 0, -math.inf)), 0.0) != 0)[0]
    assert evaluate_perplexity(MODEL, X, Y, carry_state=np.bool_(True)) > 1
