"""Positional encodings: sinusoids, learned tables, Shaw relative vectors, T5 buckets, ALiBi.

Peers: transformers' DistilBERT sinusoid table, T5Attention buckets and bias, Bloom's ALiBi tensor,
and the reference attention (itself tested against torch SDPA).
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attn_edu.attention import attention_weights, scaled_dot_product_attention
from attn_edu.masks import causal_mask
from attn_edu.positional import (
    LearnedPositionalEmbedding,
    ShawRelativePosition,
    T5RelativeBias,
    alibi_bias,
    alibi_bias_from_slopes,
    alibi_mean_distance,
    alibi_slopes,
    clipped_relative_positions,
    fit_shift_map,
    position_similarity,
    relative_positions,
    rotation_matrix,
    shaw_attention,
    shift_by_rotation,
    sinusoidal_encoding,
    t5_relative_position_bucket,
    wavelengths,
)

# ---------------------------------------------------------------- sinusoidal


def test_sinusoidal_matches_the_formula_entry_by_entry():
    pe = sinusoidal_encoding(7, 6, base=100.0, dtype=torch.float64)
    expected = torch.empty(7, 6, dtype=torch.float64)
    for pos in range(7):
        for i in range(3):
            omega = 100.0 ** (-2 * i / 6)
            expected[pos, 2 * i] = math.sin(pos * omega)
            expected[pos, 2 * i + 1] = math.cos(pos * omega)
    torch.testing.assert_close(pe, expected)


def test_sinusoidal_matches_distilbert_table():
    distilbert = pytest.importorskip("transformers.models.distilbert.modeling_distilbert")
    out = torch.empty(50, 16)
    distilbert._create_sinusoidal_embeddings(n_pos=50, dim=16, out=out)
    torch.testing.assert_close(sinusoidal_encoding(50, 16), out)


def test_sinusoidal_rejects_odd_dim():
    with pytest.raises(ValueError, match="dim: expected an even number"):
        sinusoidal_encoding(4, 7)
    with pytest.raises(ValueError, match="num_positions"):
        sinusoidal_encoding(0, 8)


def test_wavelengths_are_the_periods_of_the_columns():
    dim, base = 8, 10000.0
    lam = wavelengths(dim, base=base)
    assert lam.shape == (dim // 2,)
    torch.testing.assert_close(lam[0], torch.tensor(2 * math.pi, dtype=torch.float64))
    assert 2 * math.pi < lam[-1] < 2 * math.pi * base
    ratios = lam[1:] / lam[:-1]  # geometric progression
    torch.testing.assert_close(ratios, torch.full_like(ratios, base ** (2 / dim)))
    # the sin column of pair i is sin(2π pos / λ_i)
    pe = sinusoidal_encoding(30, dim, dtype=torch.float64)
    pos = torch.arange(30, dtype=torch.float64)[:, None]
    torch.testing.assert_close(pe[:, 0::2], torch.sin(2 * math.pi * pos / lam))


@settings(max_examples=40, deadline=None)
@given(pos=st.integers(0, 5000), k=st.integers(-2000, 2000), half_dim=st.integers(1, 16))
def test_rotation_matrix_shifts_positions(pos, k, half_dim):
    # float64 throughout: pos·ω for positions in the thousands carries ~1e-4 rad of rounding in
    # float32, far above the 1e-5 this identity is checked to.
    dim = 2 * half_dim
    pos = max(pos, -k)  # keep pos + k >= 0
    pe = sinusoidal_encoding(max(pos, pos + k) + 1, dim, dtype=torch.float64)
    torch.testing.assert_close(rotation_matrix(k, dim) @ pe[pos], pe[pos + k], atol=1e-5, rtol=0)


def test_shift_by_rotation_on_a_whole_table():
    pe = sinusoidal_encoding(300, 16, base=500.0, dtype=torch.float64)
    for k in (1, 7, 100):
        torch.testing.assert_close(shift_by_rotation(pe[: 300 - k], k, base=500.0), pe[k:], atol=1e-5, rtol=0)
    torch.testing.assert_close(shift_by_rotation(pe[50:], -50, base=500.0), pe[:250], atol=1e-5, rtol=0)


def test_rotation_matrix_is_an_orthogonal_group():
    M3, M4, M7 = (rotation_matrix(k, 10) for k in (3, 4, 7))
    torch.testing.assert_close(M3 @ M4, M7)
    torch.testing.assert_close(M3 @ M3.T, torch.eye(10, dtype=torch.float64))
    torch.testing.assert_close(rotation_matrix(0, 10), torch.eye(10, dtype=torch.float64))


def test_rotation_errors():
    with pytest.raises(ValueError, match="k: expected an int"):
        rotation_matrix(1.5, 4)
    with pytest.raises(ValueError, match="D"):
        shift_by_rotation(torch.zeros(3, 5), 1)


def test_fit_shift_map_recovers_the_rotation_where_the_pairs_turn():
    pe = sinusoidal_encoding(300, 10, base=1000.0, dtype=torch.float64)  # every pair turns within 300
    torch.testing.assert_close(fit_shift_map(pe, 7), rotation_matrix(7, 10, base=1000.0).T)
    # The paper's base over 100 positions: the slowest pairs hardly move; the fast ones are still exact.
    short = sinusoidal_encoding(100, 16, dtype=torch.float64)
    M, exact = fit_shift_map(short, 5), rotation_matrix(5, 16).T
    torch.testing.assert_close(short[:-5] @ M, short[5:])  # the data is fitted anyway
    torch.testing.assert_close(M[:4, :4], exact[:4, :4])  # pairs 0, 1: periods 6.3 and 20 positions
    # Any linear view of the table shifts linearly too: M = W⁻¹ M_kᵀ W for positions seen through W.
    W = torch.eye(10, dtype=torch.float64) + 0.2 * torch.randn(
        10, 10, generator=torch.Generator().manual_seed(0), dtype=torch.float64
    )
    expected = torch.linalg.solve(W, rotation_matrix(7, 10, base=1000.0).T @ W)
    torch.testing.assert_close(fit_shift_map(pe @ W, 7), expected)


def test_fit_shift_map_errors():
    with pytest.raises(ValueError, match="k: expected an int shift"):
        fit_shift_map(torch.zeros(5, 4), 5)
    with pytest.raises(ValueError, match="table"):
        fit_shift_map(torch.zeros(5, 4, dtype=torch.long), 1)
    with pytest.raises(ValueError, match="table"):
        fit_shift_map(torch.zeros(5), 1)


# ---------------------------------------------------------------- learned


def test_learned_embedding_looks_up_rows():
    torch.manual_seed(0)
    emb = LearnedPositionalEmbedding(max_len=12, dim=4)
    torch.testing.assert_close(emb(5), emb.embedding.weight[:5])
    torch.testing.assert_close(emb(3, offset=9), emb.embedding.weight[9:12])
    positions = torch.tensor([[0, 11], [4, 4]])
    torch.testing.assert_close(emb(positions), emb.embedding.weight[positions])


def test_learned_embedding_cannot_extrapolate():
    emb = LearnedPositionalEmbedding(max_len=512, dim=4)
    msg = "position 600 is past max_len=512: learned absolute embeddings cannot extrapolate"
    with pytest.raises(ValueError, match=msg):
        emb(torch.tensor([3, 600]))
    with pytest.raises(ValueError, match="position 512 is past max_len=512"):
        emb(513)
    with pytest.raises(ValueError, match="integer tensor"):
        emb(torch.tensor([1.0]))


# ---------------------------------------------------------------- Shaw


def test_relative_positions_bottom_right():
    T, S = 3, 7
    rel = relative_positions(T, S)
    for t in range(T):
        for s in range(S):
            assert rel[t, s] == s - (S - T + t)
    # the causal mask sees exactly the keys at distance <= 0
    assert torch.equal(rel <= 0, causal_mask(T, S))
    assert torch.equal(relative_positions(4), -relative_positions(4).T)


def test_clipped_relative_positions():
    rel = clipped_relative_positions(5, 9, 2)
    assert rel.min() == -2 and rel.max() == 2
    unclipped = relative_positions(5, 9)
    inside = unclipped.abs() <= 2
    assert torch.equal(rel[inside], unclipped[inside])
    assert torch.equal(rel[~inside], 2 * unclipped[~inside].sign())


@pytest.mark.parametrize("is_causal", [False, True])
def test_shaw_with_zero_embeddings_is_plain_attention(is_causal):
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 6, 8), torch.randn(2, 3, 6, 5)
    rel = ShawRelativePosition(max_distance=2, head_dim=8, value_dim=5)
    torch.nn.init.zeros_(rel.key_embedding.weight)
    torch.nn.init.zeros_(rel.value_embedding.weight)
    rel_k, rel_v = rel(4, 6)
    out = shaw_attention(q, k, v, rel_k, rel_v, is_causal=is_causal)
    torch.testing.assert_close(out, scaled_dot_product_attention(q, k, v, is_causal=is_causal))
    if not is_causal:
        torch.testing.assert_close(out, torch.nn.functional.scaled_dot_product_attention(q, k, v))


def test_shaw_matches_the_paper_equations_loop():
    torch.manual_seed(1)
    T, S, D = 3, 5, 4
    q, k, v = torch.randn(T, D), torch.randn(S, D), torch.randn(S, D)
    rel = ShawRelativePosition(max_distance=2, head_dim=D)
    rel_k, rel_v = rel(T, S)
    mask = torch.tensor([[True, True, False, True, True]]).expand(T, S)
    out = shaw_attention(q, k, v, rel_k, rel_v, mask, scale=0.7)

    expected = torch.zeros(T, D)
    for i in range(T):
        e = torch.full((S,), float("-inf"))
        for j in range(S):
            if mask[i, j]:
                dist = max(-2, min(2, j - (S - T + i)))  # clip(j − i, k), bottom-right aligned
                e[j] = q[i] @ (k[j] + rel.key_embedding.weight[dist + 2]) * 0.7
        alpha = torch.softmax(e, dim=0)
        for j in range(S):
            dist = max(-2, min(2, j - (S - T + i)))
            expected[i] += alpha[j] * (v[j] + rel.value_embedding.weight[dist + 2])
    torch.testing.assert_close(out, expected.detach())


def test_shaw_errors():
    q, k, v = torch.randn(3, 4), torch.randn(5, 4), torch.randn(5, 4)
    rel_k, rel_v = ShawRelativePosition(2, 4)(3, 5)
    with pytest.raises(ValueError, match=r"rel_k: expected shape \(T, S, D\)"):
        shaw_attention(q, k, v, rel_k[:, :4], rel_v)
    with pytest.raises(ValueError, match="rel_v"):
        shaw_attention(q, k, v, rel_k, rel_v[..., :3])


# ---------------------------------------------------------------- T5


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize(("num_buckets", "max_distance"), [(32, 128), (8, 20), (6, 7)])
def test_t5_buckets_match_transformers(bidirectional, num_buckets, max_distance):
    modeling_t5 = pytest.importorskip("transformers.models.t5.modeling_t5")
    rel = torch.arange(-400, 401)
    ours = t5_relative_position_bucket(
        rel, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    theirs = modeling_t5.T5Attention._relative_position_bucket(rel, bidirectional, num_buckets, max_distance)
    assert torch.equal(ours, theirs)
    assert ours.min() >= 0 and ours.max() < num_buckets


def test_t5_buckets_are_exact_for_small_distances():
    rel = torch.arange(-7, 8)
    buckets = t5_relative_position_bucket(rel, num_buckets=32, max_distance=128)
    assert len(set(buckets.tolist())) == len(rel)  # 8 exact buckets per direction: 0..7 all distinct
    far = t5_relative_position_bucket(torch.tensor([-128, -1000, 128, 1000]))
    assert far[0] == far[1] and far[2] == far[3]


@pytest.mark.parametrize(("is_decoder", "T", "S"), [(False, 6, 6), (True, 6, 6), (True, 1, 9), (True, 3, 8)])
def test_t5_bias_matches_transformers(is_decoder, T, S):
    transformers = pytest.importorskip("transformers")
    from transformers.models.t5.modeling_t5 import T5Attention

    config = transformers.T5Config(
        vocab_size=16, d_model=16, d_kv=4, num_heads=4, relative_attention_num_buckets=8,
        relative_attention_max_distance=10, is_decoder=is_decoder,
    )  # fmt: skip
    torch.manual_seed(0)
    theirs = T5Attention(config, has_relative_attention_bias=True)
    ours = T5RelativeBias(4, bidirectional=not is_decoder, num_buckets=8, max_distance=10)
    with torch.no_grad():
        ours.embedding.weight.copy_(theirs.relative_attention_bias.weight)
    # transformers places the queries after `past_seen_tokens` cached ones: our default S − T
    expected = theirs.compute_bias(T, S, past_seen_tokens=S - T)
    torch.testing.assert_close(ours(T, S), expected)
    assert ours(T, S).shape == (1, 4, T, S)


def test_t5_bias_plugs_into_reference_attention():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 4, 5, 8), torch.randn(2, 4, 5, 8)
    bias = T5RelativeBias(4, num_buckets=8, max_distance=16)
    out = scaled_dot_product_attention(q, k, v, scale=1.0, score_bias=bias(5, 5))
    expected_weights = torch.softmax(q @ k.transpose(-2, -1) + bias(5, 5), dim=-1)
    torch.testing.assert_close(out, expected_weights @ v)


def test_t5_bucket_errors():
    with pytest.raises(ValueError, match="relative_position: expected an integer tensor"):
        t5_relative_position_bucket(torch.tensor([0.5]))
    with pytest.raises(ValueError, match="num_buckets"):
        t5_relative_position_bucket(torch.tensor([1]), num_buckets=2)


# ---------------------------------------------------------------- ALiBi


@pytest.mark.parametrize("num_heads", [1, 2, 5, 6, 8, 12, 16, 24])
def test_alibi_slopes_match_bloom(num_heads):
    bloom = pytest.importorskip("transformers.models.bloom.modeling_bloom")
    # Bloom's tensor is slope · key position; at key position 1 it is the slope itself.
    alibi = bloom.build_alibi_tensor(torch.ones(1, 3, dtype=torch.long), num_heads, torch.float32)
    torch.testing.assert_close(alibi_slopes(num_heads), alibi[:, 0, 1])


def test_alibi_slopes_paper_formula():
    # Press et al. §3: for 8 heads the slopes are 1/2^1 .. 1/2^8.
    torch.testing.assert_close(alibi_slopes(8), torch.tensor([2.0**-i for i in range(1, 9)]))
    # 12 heads (not a power of 2): the 8-head slopes, then every other slope of the 16-head sequence.
    sixteen = [2.0 ** (-i / 2) for i in range(1, 17)]
    torch.testing.assert_close(
        alibi_slopes(12), torch.tensor([2.0**-i for i in range(1, 9)] + sixteen[0::2][:4])
    )


@pytest.mark.parametrize(("T", "S"), [(5, 5), (2, 6)])
def test_alibi_bias_equals_bloom_under_causal_softmax(T, S):
    bloom = pytest.importorskip("transformers.models.bloom.modeling_bloom")
    torch.manual_seed(0)
    H = 6
    q, k, v = torch.randn(1, H, T, 8), torch.randn(1, H, S, 8), torch.randn(1, H, S, 8)
    bloom_bias = bloom.build_alibi_tensor(torch.ones(1, S, dtype=torch.long), H, torch.float32)
    bloom_bias = bloom_bias.reshape(1, H, 1, S)  # slope · key position: equal to ours up to a per-row shift
    ours = scaled_dot_product_attention(q, k, v, is_causal=True, score_bias=alibi_bias(H, T, S))
    theirs = scaled_dot_product_attention(q, k, v, is_causal=True, score_bias=bloom_bias)
    torch.testing.assert_close(ours, theirs)


def test_alibi_bias_values():
    bias = alibi_bias(4, 3, 5)
    assert bias.shape == (4, 3, 5)
    slopes = alibi_slopes(4)
    # last query sits at position 4: key j is 4 − j behind
    torch.testing.assert_close(bias[:, -1], -slopes[:, None] * torch.tensor([4.0, 3, 2, 1, 0]))
    assert (bias <= 0).all()
    with pytest.raises(ValueError, match="num_heads"):
        alibi_slopes(0)


@pytest.mark.parametrize("T, S", [(4, 4), (2, 7), (1, 5)])
def test_alibi_bias_from_any_slopes_by_loop(T, S):
    slopes = torch.tensor([0.3, 1.7, 0.01], dtype=torch.float64)  # not the paper's schedule
    bias = alibi_bias_from_slopes(slopes, T, S)
    assert bias.dtype == torch.float64 and bias.shape == (3, T, S)
    for h in range(3):
        for i in range(T):
            for j in range(S):
                assert bias[h, i, j] == -slopes[h] * abs((S - T + i) - j)  # query i sits at S - T + i
    with pytest.raises(ValueError, match="slopes: expected a floating-point tensor"):
        alibi_bias_from_slopes(torch.tensor([1, 2]), 3)
    with pytest.raises(ValueError, match="slopes: expected shape"):
        alibi_bias_from_slopes(torch.ones(2, 2), 3)


# ---------------------------------------------------------------- similarity of table rows


def test_position_similarity_equals_torch_cosine_similarity_of_every_pair():
    table = torch.randn(7, 5, generator=torch.Generator().manual_seed(0))
    expected = torch.nn.functional.cosine_similarity(table[:, None, :], table[None, :, :], dim=-1)
    torch.testing.assert_close(position_similarity(table), expected)


def test_position_similarity_of_sinusoids_is_the_dot_product_over_half_the_width_and_depends_on_the_offset():
    pe = sinusoidal_encoding(20, 12, dtype=torch.float64)
    similarity = position_similarity(pe)
    torch.testing.assert_close(similarity, pe @ pe.T / 6)
    torch.testing.assert_close(similarity[1:, 1:], similarity[:-1, :-1])  # constant along diagonals
    with pytest.raises(ValueError, match=r"table: expected shape \(N, D\)"):
        position_similarity(torch.ones(3))


# ---------------------------------------------------------------- ALiBi reach


@pytest.mark.parametrize("num_keys", [1, 7, 256])
def test_alibi_mean_distance_is_what_the_attention_weights_give(num_keys):
    slopes = alibi_slopes(8)
    flat = torch.zeros(1, 8, num_keys, 4, dtype=torch.float64)  # no content: the bias alone sets the weights
    bias = alibi_bias(8, num_keys).double()
    weights = attention_weights(flat, flat, is_causal=True, score_bias=bias)[0, :, -1]  # (H, S) last query
    distance = torch.arange(num_keys - 1, -1, -1, dtype=torch.float64)  # key s is num_keys - 1 - s back
    torch.testing.assert_close(alibi_mean_distance(slopes, num_keys), (weights * distance).sum(-1))


def test_alibi_mean_distance_without_end_is_the_geometric_mean_and_about_one_over_m_minus_a_half():
    slopes = torch.tensor([2.0, 0.5, 1 / 64, 1 / 256], dtype=torch.float64)
    r = torch.exp(-slopes)
    by_sum = torch.stack(
        [sum(d * ri**d for d in range(20_000)) / sum(ri**d for d in range(20_000)) for ri in r]
    )
    torch.testing.assert_close(alibi_mean_distance(slopes), by_sum)
    assert ((alibi_mean_distance(slopes) - (1 / slopes - 0.5)).abs() <= slopes / 12).all()  # next term m/12
    torch.testing.assert_close(alibi_mean_distance(slopes, 10**6), alibi_mean_distance(slopes))


def test_alibi_mean_distance_rejects_bad_slopes():
    with pytest.raises(ValueError, match="slopes: expected slopes > 0"):
        alibi_mean_distance(torch.tensor([0.5, 0.0]))
    with pytest.raises(ValueError, match=r"slopes: expected shape \(H\)"):
        alibi_mean_distance(torch.ones(2, 2))
    with pytest.raises(ValueError, match="num_keys"):
        alibi_mean_distance(torch.tensor([0.5]), 0)
