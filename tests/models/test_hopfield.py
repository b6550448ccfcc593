"""Tests of seqbook.hopfield: classical, dense and continuous memories, and the Hopfield layers."""

import math

import pytest
import torch
import torch.nn.functional as F
from tolerance import approx, assert_close, assert_same_math, tol

from seqbook.attention import scaled_dot_product_attention
from seqbook.hopfield import (
    Hopfield,
    HopfieldLayer,
    HopfieldPooling,
    continuous_energy,
    dense_energy,
    dense_recall,
    dense_update_async,
    dense_update_sync,
    energy,
    hebbian_weights,
    neighbour_probs,
    recall,
    retrieve,
    update_async,
    update_sync,
)


def random_binary(*shape, generator=None, device="cpu", dtype=torch.float32):
    return (torch.randint(0, 2, shape, generator=generator) * 2 - 1).to(device=device, dtype=dtype)


def corrupt(x, n_flips, generator):
    flip = torch.rand(x.shape, generator=generator).argsort(-1) < n_flips  # n_flips bits per row
    return torch.where(flip.to(x.device), -x, x)


# ---------------------------------------------------------------------------------------------
# Classical network


def test_hebbian_weights_formula():
    g = torch.Generator().manual_seed(0)
    x = random_binary(4, 10, generator=g)
    W = hebbian_weights(x)
    expected = sum(torch.outer(p, p) for p in x) / 10
    expected.fill_diagonal_(0)
    assert_close(W, expected, n=4)
    assert torch.equal(W, W.T)  # sums of 4 products of +-1: exact integers before the division
    assert_close(hebbian_weights(x, normalize=False), 10 * W, n=1)


def test_energy_never_increases_under_async_updates(device):
    g = torch.Generator().manual_seed(1)
    N = 30
    W = hebbian_weights(random_binary(6, N, generator=g, device=device))
    state = random_binary(16, N, generator=g, device=device)
    e = energy(W, state)

    def slack(e):  # float32 rounding of an energy, a sum of N * N terms
        return tol(torch.float32, n=N * N, scale=max(1.0, e.abs().max().item()))["atol"]

    for i in torch.randperm(N, generator=g).tolist() * 2:  # single-neuron updates, two sweeps
        state = update_async(W, state, order=[i])
        e_new = energy(W, state)
        assert torch.all(e_new <= e + slack(e))
        e = e_new
    final, energies = recall(W, random_binary(16, N, generator=g, device=device), generator=g)
    assert torch.all(energies[1:] <= energies[:-1] + slack(energies))
    assert torch.equal(update_async(W, final, generator=g), final)  # recall ends in a fixed point


def test_stored_patterns_are_fixed_points_when_few(device):
    g = torch.Generator().manual_seed(2)
    x = random_binary(3, 100, generator=g, device=device)
    W = hebbian_weights(x)
    assert torch.equal(update_sync(W, x), x)
    assert torch.equal(update_async(W, x, generator=g), x)
    for F_ in (2, 3, "exp"):
        assert torch.equal(dense_update_sync(x, x, F_), x)


def test_recall_repairs_a_corrupted_cue(device):
    g = torch.Generator().manual_seed(3)
    x = random_binary(3, 100, generator=g, device=device)
    cue = corrupt(x, 10, g)
    out, energies = recall(hebbian_weights(x), cue, generator=g)
    assert torch.equal(out, x)
    assert energies.shape[1:] == (3,)
    assert torch.all(energies[-1] < energies[0])


def test_batched_networks_broadcast():
    g = torch.Generator().manual_seed(4)
    x = random_binary(5, 3, 30, generator=g)  # 5 networks with 3 patterns each
    W = torch.stack([hebbian_weights(p) for p in x])  # (5, 30, 30)
    out = update_async(W[:, None], x, order=list(range(30)))  # (5, 3, 30)
    for k in range(5):
        assert torch.equal(out[k], update_async(W[k], x[k], order=list(range(30))))


def test_batched_networks_broadcast_sync_and_energy():
    # W (K, 1, N, N) against states (K, P, N): the fields broadcast W without copying it
    g = torch.Generator().manual_seed(5)
    x = random_binary(4, 6, 40, generator=g)  # 4 networks with 6 patterns each
    cues = torch.stack([corrupt(p, 8, g) for p in x])  # (4, 6, 40)
    # integer weights: every field is an exact sum in any order, ties (field 0) included
    W = torch.stack([hebbian_weights(p, normalize=False) for p in x])  # (4, 40, 40)
    out, E = update_sync(W[:, None], cues), energy(W[:, None], cues)  # (4, 6, 40), (4, 6)
    for k in range(4):
        assert torch.equal(out[k], update_sync(W[k], cues[k]))
        assert_close(E[k], energy(W[k], cues[k]), n=40 * 40)
        fields = cues[k] @ W[k]  # W is symmetric: row i of cues @ W is W cue_i
        assert_close(E[k], -0.5 * (fields * cues[k]).sum(-1), n=40 * 40)


def test_sync_dynamics_can_cycle_while_async_converges():
    W = hebbian_weights(torch.tensor([[1.0, 1.0]]))
    s = torch.tensor([1.0, -1.0])
    assert torch.equal(update_sync(W, s), -s)
    assert torch.equal(update_sync(W, update_sync(W, s)), s)  # a 2-cycle
    out = update_async(W, s, order=[0, 1])
    assert torch.equal(update_async(W, out, order=[0, 1]), out)  # a fixed point


# ---------------------------------------------------------------------------------------------
# Dense associative memory


def test_dense_n2_is_the_classical_network():
    g = torch.Generator().manual_seed(5)
    x = random_binary(6, 30, generator=g, dtype=torch.float64)
    s = random_binary(20, 30, generator=g, dtype=torch.float64)
    order = torch.randperm(30, generator=g)
    W = hebbian_weights(x, normalize=False)
    assert torch.equal(dense_update_async(x, s, 2, order=order), update_async(W, s, order=order))
    # -sum_mu (x_mu^T s)^2 = -s^T (W + P I) s = 2 E(s) - P N: the classical energy, doubled and shifted
    assert_same_math(dense_energy(x, s, 2), 2 * energy(W, s) - 6 * 30, n=30 * 30)


@pytest.mark.parametrize("F_", [2, 3, 4, "exp"])
def test_dense_rule_is_the_energy_comparison(F_):
    """Rule (6.5) in Demircigil's form equals the seed's form sgn[-E(xi) + E(flip_l xi)] xi[l]."""
    g = torch.Generator().manual_seed(6)
    x = random_binary(40, 24, generator=g, dtype=torch.float64)
    s = random_binary(10, 24, generator=g, dtype=torch.float64)
    new = dense_update_sync(x, s, F_)
    for i in range(24):
        plus, minus, flipped = s.clone(), s.clone(), s.clone()
        plus[:, i], minus[:, i], flipped[:, i] = 1, -1, -s[:, i]
        demircigil = torch.sign(-dense_energy(x, plus, F_) + dense_energy(x, minus, F_))
        seed = torch.sign(-dense_energy(x, s, F_) + dense_energy(x, flipped, F_)) * s[:, i]
        assert torch.equal(demircigil, seed)
        decided = demircigil != 0
        assert torch.equal(new[decided, i], demircigil[decided])
        # a single asynchronous update of neuron i is the same decision
        assert torch.equal(dense_update_async(x, s, F_, order=[i])[:, i], new[:, i])


def test_dense_capacity_beyond_classical(device):
    g = torch.Generator().manual_seed(7)
    x = random_binary(40, 60, generator=g, device=device)  # P = 0.67 N: far beyond 0.14 N
    assert (update_sync(hebbian_weights(x), x) == x).all(-1).float().mean() < 0.2
    for F_ in (3, "exp"):
        assert torch.equal(dense_update_sync(x, x, F_), x)
    cue = corrupt(x[:10], 5, g)
    assert torch.equal(dense_recall(x, cue, "exp", generator=g), x[:10])


def test_dense_exp_does_not_overflow():
    g = torch.Generator().manual_seed(8)
    x = random_binary(20, 300, generator=g)  # overlaps up to 300 >> 88, float32
    out = dense_update_async(x, corrupt(x[:4], 30, g), "exp", generator=g)
    assert torch.equal(out, x[:4])
    assert torch.isfinite(dense_energy(x.double(), x.double(), "exp")).all()


# ---------------------------------------------------------------------------------------------
# Continuous modern Hopfield network


def test_retrieve_is_exact_at_large_beta(device):
    g = torch.Generator().manual_seed(9)
    x = torch.randn(20, 64, generator=g).to(device)
    # the other patterns get weights below exp(-10 * 20): what is left is float32 rounding
    n = 64 + 2 * 20
    assert_close(retrieve(x, x, beta=10.0), x, n=n)
    noisy = x + 0.3 * torch.randn(20, 64, generator=g).to(device)
    assert_close(retrieve(x, noisy, beta=10.0), x, n=n)
    assert_close(retrieve(x, x[3], beta=10.0), x[3], n=n)  # a single (d,) query


def test_retrieve_small_beta_averages_and_matches_attention(device):
    g = torch.Generator().manual_seed(10)
    x = torch.randn(2, 15, 8, generator=g, dtype=torch.float64).to(device)  # one memory per batch element
    q = torch.randn(2, 4, 8, generator=g, dtype=torch.float64).to(device)
    out, w = retrieve(x, q, beta=0.7, return_weights=True)
    n = 8 + 2 * 15  # similarities over d = 8, softmax and weighted mean over 15 patterns
    assert_same_math(out, F.scaled_dot_product_attention(q, x, x, scale=0.7), n=n)
    assert_same_math(w, torch.softmax(0.7 * q @ x.transpose(1, 2), -1), n=n)
    # a modelling error, not rounding: at beta = 1e-7 the weights are 1/15 (1 + O(beta |q . x|)), with
    # |q . x| < 30 here, so the output is the mean to about 1e-7 * 30 * max |x| < 1e-5
    torch.testing.assert_close(retrieve(x, q, beta=1e-7), x.mean(1, keepdim=True).expand(2, 4, 8),
                               atol=1e-5, rtol=0)
    two = retrieve(x, q, beta=0.7, steps=2)
    assert_same_math(two, retrieve(x, retrieve(x, q, beta=0.7), beta=0.7), n=2 * n)


def _neighbour_data(device, N=40, d=6, V=5, seed=12):
    g = torch.Generator().manual_seed(seed)
    keys = torch.randn(N, d, generator=g, dtype=torch.float64).to(device)
    queries = torch.randn(7, d, generator=g, dtype=torch.float64).to(device)
    next_tokens = torch.randint(0, V, (N,), generator=g).to(device)
    return queries, keys, next_tokens, V


def test_neighbour_probs_is_the_sum_of_distance_weights_by_next_token(device):
    queries, keys, next_tokens, V = _neighbour_data(device)
    p = neighbour_probs(queries, keys, next_tokens, V, 0.3)
    expected = torch.zeros(len(queries), V, dtype=torch.float64, device=device)
    for q in range(len(queries)):  # eq. (7.12), written out one query and one key at a time
        w = [math.exp(-0.3 * ((queries[q] - k) ** 2).sum().item()) for k in keys]
        for i, v in enumerate(next_tokens.tolist()):
            expected[q, v] += w[i] / sum(w)
    assert_same_math(p, expected, n=len(keys))
    assert_close(p.sum(-1), torch.ones(len(queries), dtype=torch.float64, device=device), n=len(keys))


def test_neighbour_probs_is_a_hopfield_retrieval_with_one_extra_coordinate(device):
    # -beta ||q - k||^2 = 2 beta (q . k - ||k||^2 / 2) - beta ||q||^2, and the last term is the
    # same for every key: the softmax is attention with scale 2 beta on q' = (q, 1) and
    # k' = (k, -||k||^2 / 2), whose values are the one-hot next tokens
    queries, keys, next_tokens, V = _neighbour_data(device)
    beta = 0.45
    q1 = torch.cat([queries, torch.ones(len(queries), 1, dtype=queries.dtype, device=device)], -1)
    k1 = torch.cat([keys, -0.5 * keys.square().sum(-1, keepdim=True)], -1)
    values = F.one_hot(next_tokens, V).double()
    expected, _ = scaled_dot_product_attention(q1, k1, values, scale=2 * beta)
    assert_same_math(neighbour_probs(queries, keys, next_tokens, V, beta), expected, n=len(keys),
                     scale=beta * keys.square().sum(-1).max().item())


def test_neighbour_probs_limits_of_beta(device):
    queries, keys, next_tokens, V = _neighbour_data(device)
    # large beta: all the weight on the nearest key, whose next token wins
    nearest = torch.cdist(queries, keys).argmin(-1)
    p = neighbour_probs(queries, keys, next_tokens, V, 1e4)
    assert torch.equal(p.argmax(-1), next_tokens[nearest])
    torch.testing.assert_close(p, F.one_hot(next_tokens[nearest], V).double(), atol=1e-12, rtol=0)
    # beta -> 0: every key the same weight, the frequencies of the next tokens
    counts = torch.bincount(next_tokens, minlength=V).double() / len(keys)
    torch.testing.assert_close(neighbour_probs(queries, keys, next_tokens, V, 1e-9),
                               counts.expand(len(queries), V), atol=1e-7, rtol=0)


def test_neighbour_probs_gradients(device):
    queries, keys, next_tokens, V = _neighbour_data(device, N=9, d=3)
    queries.requires_grad_()
    keys.requires_grad_()
    assert torch.autograd.gradcheck(lambda q, k: neighbour_probs(q, k, next_tokens, V, 0.4),
                                    (queries, keys))


def test_neighbour_probs_float32_is_float64_to_rounding(device):
    queries, keys, next_tokens, V = _neighbour_data(device)
    p32 = neighbour_probs(queries.float(), keys.float(), next_tokens, V, 0.3)
    assert p32.dtype == torch.float32
    assert_close(p32, neighbour_probs(queries, keys, next_tokens, V, 0.3).float(), n=len(keys),
                 scale=0.3 * torch.cdist(queries, keys).square().max().item())


def test_continuous_energy_decreases_under_updates(device):
    g = torch.Generator().manual_seed(11)
    x = torch.randn(30, 16, generator=g).to(device)
    xi = torch.randn(8, 16, generator=g).to(device)
    beta = 0.5
    energies = [continuous_energy(x, xi, beta)]
    for _ in range(6):
        xi = retrieve(x, xi, beta)
        energies.append(continuous_energy(x, xi, beta))
    E = torch.stack(energies)
    # float32 rounding of E: log-sum-exp over 30 patterns, norms over d = 16, at the size of E's terms
    slack = tol(torch.float32, n=30 + 16, scale=max(1.0, E.abs().max().item()))["atol"]
    assert torch.all(E[1:] <= E[:-1] + slack)
    assert torch.all(E >= -slack)  # the constants of (6.6) make E >= 0
    assert E.shape == (7, 8)


# ---------------------------------------------------------------------------------------------
# Hopfield layers


def test_hopfield_layer_equals_scaled_dot_product_attention(device):
    torch.manual_seed(12)
    layer = Hopfield(state_dim=6, stored_dim=10, key_dim=8, value_dim=5)
    layer = layer.to(device=device, dtype=torch.float64)
    R = torch.randn(3, 4, 6, device=device, dtype=torch.float64)
    Y = torch.randn(3, 7, 10, device=device, dtype=torch.float64)
    Z, w = layer(R, Y)
    Q, K = R @ layer.w_q.weight.T, Y @ layer.w_k.weight.T  # eq. (6.8), (6.9)
    V = K @ layer.w_v.weight.T  # eq. (6.10)
    assert layer.beta == approx(1 / math.sqrt(8))
    n = 10 + 8 + 2 * 7 + 8  # W_K over 10, similarities over 8, softmax and sum over 7 keys, W_V over 8
    expected, expected_w = scaled_dot_product_attention(Q, K, V)
    assert_same_math(Z, expected, n=n)
    assert_same_math(w, expected_w, n=n)
    assert_same_math(Z, F.scaled_dot_product_attention(Q, K, V), n=n)
    # Hopfield form: one retrieval step of the projected state patterns, then W_V, eq. (6.11)
    assert_same_math(Z, retrieve(K, Q, beta=layer.beta) @ layer.w_v.weight.T, n=n)


def test_hopfield_steps_iterate_the_update():
    torch.manual_seed(13)
    layer = Hopfield(state_dim=6, key_dim=6, steps=3, beta=0.8).double()
    R, Y = torch.randn(2, 3, 6, dtype=torch.float64), torch.randn(2, 5, 6, dtype=torch.float64)
    Z, _ = layer(R, Y)
    Q, K = layer.w_q(R), layer.w_k(Y)
    assert_same_math(Z, layer.w_v(retrieve(K, Q, beta=0.8, steps=3)), n=6 + 3 * (6 + 2 * 5) + 6)


def test_hopfield_padding_mask(device):
    torch.manual_seed(14)
    layer = Hopfield(state_dim=6, stored_dim=4).to(device=device, dtype=torch.float64)
    R = torch.randn(2, 3, 6, device=device, dtype=torch.float64)
    Y = torch.randn(2, 5, 4, device=device, dtype=torch.float64)
    mask = torch.tensor([[True, True, True, False, False], [False] * 5], device=device)
    Z, w = layer(R, Y, mask)
    assert torch.all(w[0, :, 3:] == 0)
    assert_same_math(Z[0], layer(R[:1], Y[:1, :3])[0][0], n=6 + 6 + 2 * 5 + 6)  # padding changes nothing
    assert torch.all(w[1] == 0) and torch.all(Z[1] == 0)  # fully masked: zeros, not NaN
    Z.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in layer.parameters())


def test_hopfield_pooling_mask_and_shapes(device):
    torch.manual_seed(15)
    pool = HopfieldPooling(input_dim=4, key_dim=8, value_dim=3, num_queries=2).to(device=device,
                                                                                   dtype=torch.float64)
    Y = torch.randn(3, 6, 4, device=device, dtype=torch.float64)
    lengths = torch.tensor([6, 2, 0], device=device)
    mask = torch.arange(6, device=device)[None] < lengths[:, None]
    Z, w = pool(Y, mask)
    assert Z.shape == (3, 2, 3) and w.shape == (3, 2, 6)
    assert_close(w[0].sum(-1), torch.ones(2, device=device, dtype=torch.float64), n=2 * 6)
    assert torch.all(w[1, :, 2:] == 0)
    n = 4 + 8 + 2 * 6 + 8  # W_K over 4, similarities over 8, softmax and sum over 6, W_V over 8
    assert_same_math(Z[1], pool(Y[1:2, :2])[0][0], n=n)
    assert not torch.isnan(Z).any() and torch.all(Z[2] == 0)
    # the pooled vector is a softmax-weighted mean of the values, whatever the set size
    k = pool.w_k(Y[0])
    expected = torch.softmax(pool.beta * pool.query @ k.T, -1) @ pool.w_v(k)
    assert_same_math(Z[0], expected, n=n)


def test_hopfield_pooling_gradcheck():
    torch.manual_seed(16)
    pool = HopfieldPooling(input_dim=3, key_dim=4).double()
    Y = torch.randn(2, 5, 3, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[True] * 5, [True, True, False, False, False]])
    assert torch.autograd.gradcheck(lambda y: pool(y, mask)[0], (Y,))


def test_hopfield_lookup_layer(device):
    torch.manual_seed(17)
    layer = HopfieldLayer(input_dim=5, num_stored=7, key_dim=6, value_dim=2).to(device=device,
                                                                               dtype=torch.float64)
    R = torch.randn(3, 4, 5, device=device, dtype=torch.float64)
    Z, w = layer(R)
    assert Z.shape == (3, 4, 2) and w.shape == (3, 4, 7)
    K = layer.stored
    expected = torch.softmax(layer.beta * layer.w_q(R) @ K.T, -1) @ layer.w_v(K)
    assert_same_math(Z, expected, n=5 + 6 + 2 * 7 + 6)
    Z.sum().backward()
    assert layer.stored.grad is not None and layer.stored.grad.abs().sum() > 0


# ---------------------------------------------------------------------------------------------
# Bad input


def test_bad_input_raises_clear_errors():
    x = random_binary(4, 10, generator=torch.Generator().manual_seed(18))
    W = hebbian_weights(x)
    with pytest.raises(ValueError, match=r"patterns must contain only -1 and \+1"):
        hebbian_weights(torch.tensor([[1.0, 0.0, -1.0]]))
    with pytest.raises(ValueError, match=r"state must contain only -1 and \+1"):
        update_sync(W, torch.full((10,), 0.5))
    with pytest.raises(ValueError, match=r"state must contain only -1 and \+1"):
        update_async(W, torch.zeros(10))
    with pytest.raises(ValueError, match=r"state must have shape \(\.\.\., 10\), got \(9,\)"):
        update_async(W, torch.ones(9))
    with pytest.raises(ValueError, match=r"W must have shape \(\.\.\., N, N\), got \(10, 9\)"):
        energy(W[:, :9], torch.ones(10))
    with pytest.raises(ValueError, match=r"patterns must have shape \(P, N\)"):
        hebbian_weights(torch.ones(10))
    with pytest.raises(ValueError, match=r"state must have shape \(\.\.\., 10\), got \(3, 11\)"):
        dense_update_async(x, torch.ones(3, 11))
    with pytest.raises(ValueError, match=r"state must contain only -1 and \+1"):
        dense_update_sync(x, torch.zeros(10))
    with pytest.raises(ValueError, match="F must be a positive int"):
        dense_energy(x, x, "cosh")
    with pytest.raises(ValueError, match=r"queries must have shape \(\.\.\., 10\), got \(2, 8\)"):
        retrieve(x, torch.randn(2, 8), beta=1.0)
    with pytest.raises(ValueError, match="beta must be > 0"):
        retrieve(x, x, beta=0.0)
    with pytest.raises(ValueError, match="mode must be"):
        recall(W, x, mode="parallel")
    layer = Hopfield(state_dim=6, stored_dim=4)
    with pytest.raises(ValueError, match=r"Y must have shape \(B, length, 4\), got \(2, 5, 3\)"):
        layer(torch.randn(2, 3, 6), torch.randn(2, 5, 3))
    with pytest.raises(ValueError, match=r"mask must be a bool tensor of shape \(2, 5\)"):
        layer(torch.randn(2, 3, 6), torch.randn(2, 5, 4), torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="same batch size"):
        layer(torch.randn(2, 3, 6), torch.randn(3, 5, 4))
