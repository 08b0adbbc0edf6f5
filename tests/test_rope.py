"""Rotary position embeddings: the relative-position property, both layouts, the complex view,
context-extension scalings, and equivalence with transformers' Llama rotary code and rope utilities.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attn_edu.rope import (
    RotaryEmbedding,
    apply_rope,
    apply_rope_complex,
    half_to_interleaved,
    interleaved_to_half,
    rope_angles,
    rope_frequencies,
    rotate_2d,
)
from attn_edu.rope_scaling import (
    RopeScaling,
    angle_overshoot,
    linear_scaled_frequencies,
    ntk_scaled_frequencies,
    yarn_frequencies,
    yarn_frequencies_by_turns,
)

LAYOUTS = ["half", "interleaved"]


def _at(x: torch.Tensor, position: int, **kwargs) -> torch.Tensor:
    """RoPE of one vector ``(D,)`` placed at ``position``."""
    return apply_rope(x[None], torch.tensor([position]), **kwargs)[0]


# ---------------------------------------------------------------- the defining property


@settings(max_examples=40, deadline=None)
@given(
    half_dim=st.integers(1, 12),
    m=st.integers(-300, 300),
    n=st.integers(-300, 300),
    c=st.integers(-300, 300),
    layout=st.sampled_from(LAYOUTS),
    seed=st.integers(0, 2**16),
)
def test_score_depends_only_on_offset(half_dim, m, n, c, layout, seed):
    gen = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, 2 * half_dim, generator=gen, dtype=torch.float64)
    score = _at(q, m, layout=layout) @ _at(k, n, layout=layout)
    shifted = _at(q, m + c, layout=layout) @ _at(k, n + c, layout=layout)
    torch.testing.assert_close(shifted, score, atol=1e-9, rtol=1e-9)
    # and it is the score of the unrotated query with the key moved by n − m
    torch.testing.assert_close(q @ _at(k, n - m, layout=layout), score, atol=1e-9, rtol=1e-9)


def test_score_changes_with_the_offset():
    # guards against a RoPE that does nothing: same content, different offsets, different scores
    torch.manual_seed(0)
    q, k = torch.randn(2, 16, dtype=torch.float64)
    scores = torch.stack([_at(q, 10) @ _at(k, 10 - d) for d in range(5)])
    assert scores.unique().numel() == 5


@pytest.mark.parametrize("layout", LAYOUTS)
def test_norm_is_preserved_pair_by_pair(layout):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 7, 10, dtype=torch.float64)
    out = apply_rope(x, layout=layout, offset=5)
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1))
    to_pairs = interleaved_to_half if layout == "interleaved" else (lambda t: t)
    pairs_in = to_pairs(x).unflatten(-1, (2, -1)).norm(dim=-2)  # (..., D/2): |(x_i, x_(i+D/2))|
    pairs_out = to_pairs(out).unflatten(-1, (2, -1)).norm(dim=-2)
    torch.testing.assert_close(pairs_out, pairs_in)


def test_position_zero_is_the_identity_and_values_follow_the_formula():
    x = torch.randn(3, 6)
    torch.testing.assert_close(apply_rope(x, torch.zeros(3, dtype=torch.long)), x)
    # half layout by hand: pair (i, i + D/2) turned by m · base^(−2i/D)
    m, base = 3, 50.0
    out = _at(x[0], m, base=base)
    for i in range(3):
        theta = m * base ** (-2 * i / 6)
        a, b = x[0, i].item(), x[0, i + 3].item()
        expected = [a * math.cos(theta) - b * math.sin(theta), a * math.sin(theta) + b * math.cos(theta)]
        torch.testing.assert_close(out[[i, i + 3]], torch.tensor(expected))


def test_offset_matches_slicing_the_full_sequence():
    # what a KV cache relies on: rotating the last tokens with offset = rotating all, then slicing
    torch.manual_seed(0)
    x = torch.randn(2, 4, 9, 8)
    torch.testing.assert_close(apply_rope(x[..., 6:, :], offset=6), apply_rope(x)[..., 6:, :])


# ---------------------------------------------------------------- layouts and views


def test_layouts_agree_up_to_the_permutation():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 5, 12)
    interleaved = apply_rope(x, layout="interleaved", offset=4)
    via_half = half_to_interleaved(apply_rope(interleaved_to_half(x), layout="half", offset=4))
    torch.testing.assert_close(interleaved, via_half)
    # the two results differ as raw tensors: the layouts are not interchangeable without the permutation
    assert not torch.allclose(interleaved, apply_rope(x, layout="half", offset=4))


def test_permutations_are_inverse():
    x = torch.arange(10)
    assert torch.equal(half_to_interleaved(interleaved_to_half(x)), x)
    assert torch.equal(interleaved_to_half(half_to_interleaved(x)), x)
    assert interleaved_to_half(x).tolist() == [0, 2, 4, 6, 8, 1, 3, 5, 7, 9]


def test_complex_view_equals_interleaved():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 6, 8)
    positions = torch.tensor([0, 5, 2, 9, 100, 7])
    torch.testing.assert_close(
        apply_rope_complex(x, positions, base=500.0),
        apply_rope(x, positions, base=500.0, layout="interleaved"),
    )
    half = x.half()
    torch.testing.assert_close(
        apply_rope_complex(half).float(), apply_rope(half, layout="interleaved").float(), atol=2e-3, rtol=2e-3
    )


def test_rotate_2d_is_rope_with_two_dims():
    torch.manual_seed(0)
    vec = torch.randn(5, 2, dtype=torch.float64)
    for m in (1, 4, -3):
        # D = 2: one pair, θ_0 = base^0 = 1, so position m turns by m radians
        torch.testing.assert_close(
            rotate_2d(vec, float(m)), apply_rope(vec[:, None, :], torch.tensor([m]))[:, 0]
        )
    torch.testing.assert_close(rotate_2d(rotate_2d(vec, 0.3), 0.5), rotate_2d(vec, 0.8))
    torch.testing.assert_close(rotate_2d(torch.tensor([0.0, 1.0]), math.pi / 2), torch.tensor([-1.0, 0.0]))


def test_angles_are_an_outer_product():
    angles = rope_angles(torch.arange(4), rope_frequencies(6))
    assert angles.shape == (4, 3)
    torch.testing.assert_close(angles[2], 2 * rope_frequencies(6))


# ---------------------------------------------------------------- transformers peers


def _llama_config(**rope_parameters):
    transformers = pytest.importorskip("transformers")
    parameters = {"rope_type": "default", "rope_theta": 10000.0, **rope_parameters}
    return transformers.LlamaConfig(
        hidden_size=48, num_attention_heads=4, num_key_value_heads=2, head_dim=12,
        max_position_embeddings=64, rope_parameters=parameters,
    )  # fmt: skip


@pytest.mark.parametrize("offset", [0, 13])
def test_half_layout_equals_llama(offset):
    pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    config = _llama_config(rope_theta=500.0)
    torch.manual_seed(0)
    q, k = torch.randn(2, 4, 7, 12), torch.randn(2, 2, 7, 12)  # GQA: 4 query heads, 2 key heads
    position_ids = torch.arange(offset, offset + 7)[None].expand(2, 7)
    cos, sin = LlamaRotaryEmbedding(config)(q, position_ids)
    q_hf, k_hf = apply_rotary_pos_emb(q, k, cos, sin)

    q_ours, k_ours = RotaryEmbedding(12, base=500.0)(q, k, offset=offset)
    torch.testing.assert_close(q_ours, q_hf)
    torch.testing.assert_close(k_ours, k_hf)
    torch.testing.assert_close(apply_rope(q, position_ids[:, None, :], base=500.0), q_hf)


def test_yarn_rotary_embedding_equals_llama_with_yarn():
    pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    config = _llama_config(rope_type="yarn", factor=4.0, original_max_position_embeddings=64)
    torch.manual_seed(0)
    q, k = torch.randn(1, 4, 5, 12), torch.randn(1, 2, 5, 12)
    position_ids = torch.arange(200, 205)[None]
    hf = LlamaRotaryEmbedding(config)
    q_hf, k_hf = apply_rotary_pos_emb(q, k, *hf(q, position_ids))

    rope = RotaryEmbedding(12, scaling=RopeScaling("yarn", 4.0, original_max_positions=64))
    assert rope.attention_factor == pytest.approx(hf.attention_scaling)
    q_ours, k_ours = rope(q, k, offset=200)
    # Our inv_freq is rounded from float64, transformers' computed in float32: a one-ulp difference
    # times position ~200 moves an angle by ~1e-5 rad, hence the looser tolerance here.
    torch.testing.assert_close(q_ours, q_hf, atol=5e-5, rtol=1e-5)
    torch.testing.assert_close(k_ours, k_hf, atol=5e-5, rtol=1e-5)


@pytest.mark.parametrize(
    ("head_dim", "base", "factor"), [(8, 10000.0, 2.0), (12, 500.0, 4.0), (64, 10000.0, 8.0)]
)
def test_scalings_match_transformers_rope_utils(head_dim, base, factor):
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    def config(**params):
        return transformers.LlamaConfig(
            hidden_size=4 * head_dim, num_attention_heads=4, head_dim=head_dim, max_position_embeddings=64,
            rope_parameters={"rope_theta": base, "factor": factor, **params},
        )  # fmt: skip

    inv_hf, _ = ROPE_INIT_FUNCTIONS["linear"](config(rope_type="linear"))
    torch.testing.assert_close(linear_scaled_frequencies(head_dim, factor, base=base), inv_hf)

    # "dynamic" scales the base with effective factor f·T/L − (f − 1); at T = L·(2f − 1)/f that is f,
    # our fixed NTK-aware factor.
    seq_len = round(64 * (2 * factor - 1) / factor)
    assert factor * seq_len / 64 - (factor - 1) == pytest.approx(factor)
    inv_hf, _ = ROPE_INIT_FUNCTIONS["dynamic"](config(rope_type="dynamic"), None, seq_len)
    torch.testing.assert_close(ntk_scaled_frequencies(head_dim, factor, base=base), inv_hf)

    for original, truncate in itertools.product((32, 2048), (True, False)):  # gpt-oss: truncate=False
        yarn_config = config(rope_type="yarn", original_max_position_embeddings=original, truncate=truncate)
        inv_hf, attention_hf = ROPE_INIT_FUNCTIONS["yarn"](yarn_config)
        inv_ours, attention_ours = yarn_frequencies(
            head_dim, factor, original_max_positions=original, base=base, truncate=truncate
        )
        torch.testing.assert_close(inv_ours, inv_hf)
        assert attention_ours == pytest.approx(attention_hf)
        scaling = RopeScaling("yarn", factor, original_max_positions=original, truncate=truncate)
        torch.testing.assert_close(scaling.frequencies(head_dim, base)[0], inv_hf)


# ---------------------------------------------------------------- scaling properties


def test_linear_scaling_is_position_interpolation():
    torch.manual_seed(0)
    x = torch.randn(3, 9, 8, dtype=torch.float64)
    positions = torch.arange(9)
    inv = linear_scaled_frequencies(8, 4.0).double()
    torch.testing.assert_close(apply_rope(x, positions, inv_freq=inv), apply_rope(x, positions / 4.0))


def test_ntk_keeps_the_fastest_pair_and_slows_the_slowest_by_the_factor():
    base_inv, ntk = rope_frequencies(16), ntk_scaled_frequencies(16, 8.0)
    assert ntk[0] == base_inv[0] == 1.0
    torch.testing.assert_close(base_inv[-1] / ntk[-1], torch.tensor(8.0))
    assert ((base_inv / ntk)[1:] > 1).all()


def test_yarn_ramp_keeps_fast_pairs_and_interpolates_slow_ones():
    theta = rope_frequencies(64)
    inv, attention_factor = yarn_frequencies(64, 16.0, original_max_positions=1024)
    turns = 1024 * theta / (2 * math.pi)  # how often each pair wraps around in the trained context
    torch.testing.assert_close(inv[turns > 40], theta[turns > 40])  # many turns: untouched
    torch.testing.assert_close(inv[turns < 0.5], theta[turns < 0.5] / 16)  # under one turn: interpolated
    ratio = theta / inv
    assert (ratio[1:] >= ratio[:-1] - 1e-6).all()  # a monotone blend between 1 and 16
    assert attention_factor == pytest.approx(0.1 * math.log(16) + 1)
    assert yarn_frequencies(64, 1.0, original_max_positions=1024)[1] == 1.0


def _unseen_by_enumeration(inv_freq: torch.Tensor, theta: torch.Tensor, L: int, s: float) -> torch.Tensor:
    """Per pair: does some distance below s·L meet an angle (mod 2π) that no distance below L met?

    Distances in steps of 1/8; the trained angles form the arc [0, L·θ_i], or the whole circle once it wraps.
    """
    d_new = torch.arange(0, s * L, 0.125, dtype=torch.float64)[:, None]  # (N, 1)
    angles = (d_new * inv_freq.double()) % (2 * math.pi)  # (N, D/2) angles met at 4L
    arc = L * theta.double()  # (D/2,) the end of the trained arc
    return ((angles > arc + 1e-9) & (arc < 2 * math.pi)).any(dim=0)  # (D/2,)


@pytest.mark.parametrize(("head_dim", "L", "s"), [(16, 64, 4.0), (64, 512, 4.0), (32, 100, 2.5)])
def test_angle_overshoot_flags_exactly_the_pairs_that_meet_unseen_angles(head_dim, L, s):
    theta = rope_frequencies(head_dim)
    scalings = {
        "none": theta,
        "PI": linear_scaled_frequencies(head_dim, s),
        "NTK": ntk_scaled_frequencies(head_dim, s),
        "YaRN": yarn_frequencies(head_dim, s, original_max_positions=L)[0],
    }
    for name, inv_freq in scalings.items():
        over = angle_overshoot(inv_freq, context=L, factor=s)
        assert over.shape == (head_dim // 2,) and over.dtype == torch.float64
        assert ((over > 1) == _unseen_by_enumeration(inv_freq, theta, L, s)).all(), name
    wrapped = L * theta.double() >= 2 * math.pi
    unscaled = angle_overshoot(theta, context=L, factor=s)
    assert (unscaled[wrapped] == 1).all() and torch.allclose(unscaled[~wrapped], torch.tensor(s).double())
    assert (angle_overshoot(scalings["PI"], context=L, factor=s) == 1).all()  # interpolation stays inside


def test_angle_overshoot_of_ntk_is_s_to_the_one_minus_2i_over_d_minus_2():
    """NTK-aware: θ'_i = θ_i · s^(−2i/(D−2)), so an unwrapped pair goes s^(1 − 2i/(D−2)) past its range."""
    D, L, s = 16, 64, 4.0
    over = angle_overshoot(ntk_scaled_frequencies(D, s), context=L, factor=s)
    i = torch.arange(D // 2, dtype=torch.float64)
    unwrapped = L * rope_frequencies(D).double() < 2 * math.pi
    torch.testing.assert_close(over[unwrapped], s ** (1 - 2 * i[unwrapped] / (D - 2)), rtol=1e-6, atol=0)
    assert over[unwrapped].max() == over[unwrapped][0]  # the first pair that did not wrap is the worst


def test_angle_overshoot_rejects_bad_input():
    theta = rope_frequencies(8)
    with pytest.raises(ValueError, match="context"):
        angle_overshoot(theta, context=0, factor=2.0)
    with pytest.raises(ValueError, match="factor"):
        angle_overshoot(theta, context=16, factor=0.5)
    with pytest.raises(ValueError, match="inv_freq"):
        angle_overshoot(theta[None], context=16, factor=2.0)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_cached_table_equals_on_the_fly(layout):
    torch.manual_seed(0)
    q, k = torch.randn(1, 2, 6, 8), torch.randn(1, 1, 6, 8)
    cached = RotaryEmbedding(8, layout=layout, max_positions=16)
    plain = RotaryEmbedding(8, layout=layout)
    for offset in (0, 10, 14):  # the last runs past the 16-position table
        torch.testing.assert_close(cached(q, k, offset=offset), plain(q, k, offset=offset))
    q_rot, _ = plain(q, k, offset=3)
    torch.testing.assert_close(q_rot, apply_rope(q, layout=layout, offset=3))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_partial_rope_turns_the_first_rotary_dim_coordinates_as_a_head_of_that_size(layout):
    torch.manual_seed(0)
    q, k = torch.randn(1, 2, 6, 12), torch.randn(1, 1, 6, 12)
    partial = RotaryEmbedding(12, rotary_dim=4, layout=layout)
    q_rot, k_rot = partial(q, k, offset=5)
    q_head, k_head = RotaryEmbedding(4, layout=layout)(q[..., :4], k[..., :4], offset=5)
    torch.testing.assert_close(
        q_rot[..., :4], q_head
    )  # the frequencies of a 4-wide head, not of a 12-wide one
    torch.testing.assert_close(k_rot[..., :4], k_head)
    assert torch.equal(q_rot[..., 4:], q[..., 4:]) and torch.equal(k_rot[..., 4:], k[..., 4:])  # no position
    # the score still depends on the offset only: moving both tokens by 7 changes nothing
    moved_q, moved_k = partial(q, k, offset=12)
    torch.testing.assert_close(q_rot @ k_rot.transpose(-1, -2), moved_q @ moved_k.transpose(-1, -2))
    assert "rotary_dim=4" in repr(partial)
    with pytest.raises(ValueError, match="rotary_dim: expected at most head_dim=12, got 14"):
        RotaryEmbedding(12, rotary_dim=14)
    with pytest.raises(ValueError, match="rotary_dim: RoPE rotates pairs"):
        RotaryEmbedding(12, rotary_dim=3)


# ---------------------------------------------------------------- errors


def test_bad_inputs_raise_value_error():
    with pytest.raises(ValueError, match="head dim D must be even, got D=7"):
        rope_frequencies(7)
    with pytest.raises(ValueError, match="D must be even, got D=5"):
        apply_rope(torch.randn(3, 5))
    with pytest.raises(ValueError, match="D must be even"):
        RotaryEmbedding(9)
    with pytest.raises(ValueError, match="layout: expected 'half'"):
        apply_rope(torch.randn(3, 4), layout="pairs")
    with pytest.raises(ValueError, match=r"positions: expected shape \(..., T\) with T=3"):
        apply_rope(torch.randn(3, 4), torch.arange(4))
    with pytest.raises(ValueError, match="inv_freq"):
        apply_rope(torch.randn(3, 8), inv_freq=rope_frequencies(4))
    with pytest.raises(ValueError, match="x: expected a floating-point tensor"):
        apply_rope(torch.ones(3, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="x: expected shape"):
        apply_rope(torch.randn(4))
    with pytest.raises(ValueError, match="offset"):
        apply_rope(torch.randn(3, 4), offset=-1)
    with pytest.raises(ValueError, match="vec: expected shape"):
        rotate_2d(torch.randn(3), 0.5)


def test_rotary_module_and_scaling_errors():
    rope = RotaryEmbedding(8)
    with pytest.raises(ValueError, match=r"q: expected shape \(..., T, D\) with D=8"):
        rope(torch.randn(1, 2, 5, 6), torch.randn(1, 2, 5, 6))
    with pytest.raises(ValueError, match=r"k: expected shape .* \(T=4 does not match T=5\)"):
        rope(torch.randn(1, 2, 5, 8), torch.randn(1, 2, 4, 8))
    with pytest.raises(ValueError, match="original_max_positions: required"):
        RopeScaling("yarn", 4.0)
    with pytest.raises(ValueError, match="kind"):
        RopeScaling("dynamic", 4.0)
    with pytest.raises(ValueError, match="factor"):
        RopeScaling("linear", 0.5)
    with pytest.raises(ValueError, match="truncate: expected True or False"):
        RopeScaling("yarn", 4.0, original_max_positions=64, truncate="no")
    with pytest.raises(ValueError, match="D >= 4"):
        ntk_scaled_frequencies(2, 2.0)
    with pytest.raises(ValueError, match="scaling"):
        RotaryEmbedding(8, scaling={"kind": "linear", "factor": 2.0})


# ---------------------------------------------------------------- YaRN's ramp: the paper's and the code's


def test_yarn_by_turns_follows_the_paper_ramp_linear_in_turns():
    head_dim, factor, L = 64, 4.0, 512
    theta = rope_frequencies(head_dim).double()
    turns = L * theta / (2 * math.pi)  # r_i
    inv, attention_factor = yarn_frequencies_by_turns(head_dim, factor, original_max_positions=L)
    kept = ((inv.double() - theta / factor) / (theta - theta / factor)).tolist()  # γ per pair
    for r, gamma in zip(turns.tolist(), kept):  # eq. 18 pair by pair, in plain Python
        expected = 0.0 if r < 1 else 1.0 if r > 32 else (r - 1) / 31
        assert gamma == pytest.approx(expected, abs=1e-5), r
    assert attention_factor == pytest.approx(0.1 * math.log(factor) + 1)


def test_the_two_yarn_ramps_agree_at_the_ends_and_differ_in_between():
    theta = rope_frequencies(64)
    by_turns, _ = yarn_frequencies_by_turns(64, 4.0, original_max_positions=512)
    by_index, _ = yarn_frequencies(64, 4.0, original_max_positions=512)
    turns = 512 * theta / (2 * math.pi)
    ends = (turns > 40) | (turns < 0.5)
    torch.testing.assert_close(by_turns[ends], by_index[ends])
    between = ~ends & (turns < 32) & (turns > 1)
    assert between.sum() >= 8
    assert ((by_index - by_turns)[between] > 0).all()  # linear in r interpolates more of each middle pair
    with pytest.raises(ValueError, match="beta_fast, beta_slow"):
        yarn_frequencies_by_turns(64, 4.0, original_max_positions=512, beta_fast=1.0, beta_slow=2.0)


def test_attention_factor_overrides_the_methods_own_as_in_transformers():
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = transformers.LlamaConfig(
        hidden_size=64, num_attention_heads=4, head_dim=16, max_position_embeddings=256,
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                         "original_max_position_embeddings": 64, "attention_factor": 1.0},
    )  # fmt: skip
    inv_hf, attention_hf = ROPE_INIT_FUNCTIONS["yarn"](config)
    inv, attention = RopeScaling("yarn", 4.0, original_max_positions=64, attention_factor=1.0).frequencies(
        16, 1e4
    )
    torch.testing.assert_close(inv, inv_hf)
    assert attention == attention_hf == 1.0

    torch.manual_seed(0)
    q, k = torch.randn(1, 2, 6, 16), torch.randn(1, 2, 6, 16)
    plain = RotaryEmbedding(16, scaling=RopeScaling("linear", 2.0))
    doubled = RotaryEmbedding(16, scaling=RopeScaling("linear", 2.0, attention_factor=2.0))
    (q1, k1), (q2, k2) = plain(q, k), doubled(q, k)
    torch.testing.assert_close(q2 @ k2.transpose(-1, -2), 4 * (q1 @ k1.transpose(-1, -2)))  # scores × 2²
    for bad in (0.0, -1.0, math.inf, True):
        with pytest.raises(ValueError, match="attention_factor"):
            RopeScaling("linear", 2.0, attention_factor=bad)


def test_the_scalings_still_import_from_their_old_home():
    from attn_edu import rope, rope_scaling
    from attn_edu.rope import RopeScaling as old_home

    assert old_home is rope_scaling.RopeScaling
    assert rope.yarn_frequencies is rope_scaling.yarn_frequencies
    with pytest.raises(AttributeError, match="no attribute 'yarn'"):
        rope.yarn  # noqa: B018
