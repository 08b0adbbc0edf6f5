"""Gated DeltaNet against transformers' two reference forms, and the properties that make it a memory."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers.models.qwen3_next.modeling_qwen3_next import (
    torch_chunk_gated_delta_rule,
    torch_recurrent_gated_delta_rule,
)

from attn_edu.delta_rule import gated_delta_rule, gated_delta_step, state_bytes
from attn_edu.efficient import linear_attention


def _inputs(B=2, H=3, T=11, Dk=8, Dv=5, *, seed=0, decay=1.0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T, Dk, generator=gen)
    k = F.normalize(torch.randn(B, H, T, Dk, generator=gen), dim=-1)  # unit keys, as Qwen3-Next's
    v = torch.randn(B, H, T, Dv, generator=gen)
    g = -decay * torch.rand(B, H, T, generator=gen)  # log of a decay in (exp(-decay), 1]
    beta = torch.rand(B, H, T, generator=gen)  # write strength in (0, 1)
    state = torch.randn(B, H, Dk, Dv, generator=gen)
    return q, k, v, g, beta, state


def _peer_layout(*tensors):
    """(B, H, T, ...) -> transformers' (B, T, H, ...)."""
    return [x.transpose(1, 2) for x in tensors]


@pytest.mark.parametrize("form", ["recurrent", "chunked"])
@pytest.mark.parametrize("with_state", [False, True], ids=["zero state", "initial state"])
@pytest.mark.parametrize("T, chunk", [(11, 4), (16, 8), (3, 64)], ids=["ragged", "even", "short"])
def test_equals_transformers(form: str, with_state: bool, T: int, chunk: int) -> None:
    q, k, v, g, beta, state = _inputs(T=T)
    initial = state if with_state else None
    pq, pk, pv = _peer_layout(q, k, v)
    pg, pbeta = g.transpose(1, 2), beta.transpose(1, 2)  # (B, T, H)
    if form == "recurrent":
        expected, expected_state = torch_recurrent_gated_delta_rule(
            pq, pk, pv, pg, pbeta, initial_state=initial, output_final_state=True
        )
        got, got_state = gated_delta_rule(q, k, v, g, beta, initial_state=initial, output_final_state=True)
    else:
        expected, expected_state = torch_chunk_gated_delta_rule(
            pq, pk, pv, pg, pbeta, chunk_size=chunk, initial_state=initial, output_final_state=True
        )
        got, got_state = gated_delta_rule(
            q, k, v, g, beta, chunk_size=chunk, initial_state=initial, output_final_state=True
        )
    torch.testing.assert_close(got, expected.transpose(1, 2), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_state, expected_state, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("chunk", [1, 2, 5, 7, 32])
@pytest.mark.parametrize("decay", [0.0, 1.0, 30.0], ids=["no decay", "decay", "near-total decay"])
def test_chunked_equals_recurrent_with_gradients(chunk: int, decay: float) -> None:
    inputs = [x.requires_grad_() for x in _inputs(T=13, decay=decay, seed=chunk)]
    q, k, v, g, beta, state = inputs
    recurrent, recurrent_state = gated_delta_rule(
        q, k, v, g, beta, initial_state=state, output_final_state=True
    )
    grads = torch.autograd.grad((recurrent.sum(), recurrent_state.square().sum()), inputs)
    chunked, chunked_state = gated_delta_rule(
        q, k, v, g, beta, chunk_size=chunk, initial_state=state, output_final_state=True
    )
    torch.testing.assert_close(chunked, recurrent, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(chunked_state, recurrent_state, rtol=1e-4, atol=1e-5)
    chunked_grads = torch.autograd.grad((chunked.sum(), chunked_state.square().sum()), inputs)
    for name, got, expected in zip("q k v g beta state".split(), chunked_grads, grads):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4, msg=name)


@pytest.mark.parametrize("chunk", [None, 4])
def test_two_pieces_from_the_carried_state_equal_one_run(chunk: int | None) -> None:
    q, k, v, g, beta, _ = _inputs(T=14)
    whole, whole_state = gated_delta_rule(q, k, v, g, beta, chunk_size=chunk, output_final_state=True)
    first, state = gated_delta_rule(*(x[:, :, :9] for x in (q, k, v, g, beta)), output_final_state=True)
    second, final = gated_delta_rule(
        *(x[:, :, 9:] for x in (q, k, v, g, beta)),
        chunk_size=chunk,
        initial_state=state,
        output_final_state=True,
    )
    torch.testing.assert_close(torch.cat([first, second], dim=2), whole, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(final, whole_state, rtol=1e-5, atol=1e-5)


def test_a_full_write_makes_the_state_recall_the_value_and_decay_forgets() -> None:
    """With β = 1 and a unit key the state answers v exactly for that key (the delta rule's point); plain linear
    attention would answer old + v. With g = log 0.5 the old contents halve first."""
    _, _, _, _, _, state = _inputs(B=1, H=1)
    k = F.normalize(torch.randn(1, 1, 8), dim=-1)
    v = torch.randn(1, 1, 5)
    _, written = gated_delta_step(state, k, k, v, torch.zeros(1, 1), torch.ones(1, 1))
    torch.testing.assert_close((k[..., None, :] @ written).squeeze(-2), v)
    other = F.normalize(torch.randn(1, 1, 8), dim=-1)
    other = F.normalize(other - (other * k).sum(-1, keepdim=True) * k, dim=-1)  # orthogonal to k
    _, halved = gated_delta_step(written, k, other, v, torch.full((1, 1), 0.5).log(), torch.zeros(1, 1))
    torch.testing.assert_close(halved, written / 2)  # β = 0 writes nothing; the decay halves everything


def test_with_orthonormal_keys_it_is_linear_attention() -> None:
    """Orthonormal keys never overlap, so the correction is the value itself: with no decay and β = 1 the delta
    rule is causal linear attention with the identity feature map and no normaliser."""
    T, D = 6, 8
    gen = torch.Generator().manual_seed(0)
    k = torch.linalg.qr(torch.randn(D, D, generator=gen))[0][:T][None, None]  # (1, 1, T, D): orthonormal rows
    q, v = torch.randn(1, 1, T, D, generator=gen), torch.randn(1, 1, T, 3, generator=gen)
    out, _ = gated_delta_rule(q, k, v, torch.zeros(1, 1, T), torch.ones(1, 1, T), scale=1.0)
    scores = (q @ k.transpose(-1, -2)).tril()  # (1, 1, T, T): q_t·k_s for s <= t, unnormalised
    torch.testing.assert_close(out, scores @ v, rtol=1e-5, atol=1e-5)
    # Notebook 11's linear attention is the same sum divided by Σ_s q_t·k_s.
    normaliser = scores.sum(-1, keepdim=True)  # (1, 1, T, 1)
    assert normaliser.abs().min() > 0.05  # the seeded draw keeps the division well away from 0
    linear = linear_attention(q, k, v, feature_map=lambda x: x, is_causal=True, eps=0.0)
    torch.testing.assert_close(linear * normaliser, out, rtol=1e-4, atol=1e-5)


def test_state_is_float32_and_output_keeps_the_dtype() -> None:
    q, k, v, g, beta, _ = (x.to(torch.bfloat16) for x in _inputs())
    out, state = gated_delta_rule(q, k, v, g, beta, chunk_size=4, output_final_state=True)
    assert out.dtype == torch.bfloat16 and state.dtype == torch.float32
    assert gated_delta_rule(q, k, v, g, beta)[1] is None


def test_state_bytes_against_a_kv_cache() -> None:
    # One Qwen3-Next linear layer holds 32 x 128 x 128 bfloat16 values whatever the length; one of its attention
    # layers (2 key/value heads of 256) caches 2 x 2 x 256 values a token: equal at 512 tokens.
    assert state_bytes(32, 128, 128) == 2 * 2 * 256 * 2 * 512


@pytest.mark.parametrize(
    "change, message",
    [
        ({"g": torch.full((2, 3, 11), 0.1)}, "g: expected the log of a decay"),
        ({"g": torch.full((2, 3, 11), -float("inf"))}, "g: expected the log of a decay"),
        ({"k": torch.randn(2, 3, 11, 7)}, "k: expected shape"),
        ({"beta": torch.rand(2, 11, 3)}, "beta: expected shape"),
        ({"v": torch.randn(2, 3, 10, 5)}, "v: expected shape"),
        ({"initial_state": torch.zeros(2, 3, 5, 8)}, "initial_state: expected shape"),
        ({"chunk_size": 0}, "chunk_size: expected a positive int"),
    ],
)
def test_bad_input_names_the_argument(change: dict, message: str) -> None:
    q, k, v, g, beta, _ = _inputs()
    args = {"q": q, "k": k, "v": v, "g": g, "beta": beta} | change
    with pytest.raises(ValueError, match=message):
        gated_delta_rule(**args)


def _peer_layer(H: int, H_k: int, seed: int = 0, eps: float = 1e-6):
    from transformers import Qwen3NextConfig
    from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextGatedDeltaNet

    config = Qwen3NextConfig(
        hidden_size=32,
        linear_num_value_heads=H,
        linear_num_key_heads=H_k,
        linear_key_head_dim=8,
        linear_value_head_dim=6,
        linear_conv_kernel_dim=4,
        num_hidden_layers=1,
        layer_types=["linear_attention"],
        rms_norm_eps=eps,
    )
    torch.manual_seed(seed)
    layer = Qwen3NextGatedDeltaNet(config, layer_idx=0).eval()
    with torch.no_grad():  # the constructor leaves the gate's weight at one: draw it, to test the mapping
        layer.norm.weight.copy_(1 + 0.5 * torch.randn(6))
        layer.dt_bias.copy_(torch.randn(H))
    return layer


@pytest.mark.parametrize("H, H_k", [(4, 4), (4, 2), (6, 2)], ids=["equal heads", "2 per key", "3 per key"])
@pytest.mark.parametrize("T", [1, 5, 70], ids=["one token", "short", "two chunks"])
def test_layer_equals_qwen3_next_gated_deltanet(H: int, H_k: int, T: int) -> None:
    from attn_edu.delta_rule import GatedDeltaNet

    peer = _peer_layer(H, H_k)
    ours = GatedDeltaNet.from_hf(peer).eval()
    x = torch.randn(2, T, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(ours(x), peer(x), rtol=1e-4, atol=1e-5)


def test_the_norm_epsilon_is_the_output_norm_s_alone() -> None:
    """transformers L2-normalises q and k with 1e-6 whatever the config says; its rms_norm_eps is the gated output
    norm's. A large epsilon shows which is which."""
    from attn_edu.delta_rule import GatedDeltaNet

    peer = _peer_layer(4, 2, eps=0.5)
    ours = GatedDeltaNet.from_hf(peer).eval()
    x = torch.randn(2, 9, 32, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.testing.assert_close(ours(x), peer(x), rtol=1e-4, atol=1e-5)


def test_layer_decodes_through_its_state_as_the_full_pass_computes() -> None:
    from attn_edu.delta_rule import DeltaStateLayer, GatedDeltaNet

    torch.manual_seed(0)
    layer = GatedDeltaNet(32, 4, num_k_heads=2, k_dim=8, v_dim=6, chunk_size=4).eval()
    x = torch.randn(2, 12, 32)
    cache = DeltaStateLayer()
    with torch.no_grad():
        full = layer(x)
        pieces = [layer(x[:, :7], kv_cache=cache)] + [
            layer(x[:, t : t + 1], kv_cache=cache) for t in range(7, 12)
        ]
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=1e-4, atol=1e-5)
    assert cache.seq_len == 12
    # Fixed size: the float32 state (2 x 4 x 8 x 6) and three steps of the convolution's 2·16 + 24 channels.
    assert cache.nbytes() == 4 * (2 * 4 * 8 * 6 + 2 * 56 * 3)


def test_layer_refuses_a_mask() -> None:
    from attn_edu.delta_rule import GatedDeltaNet

    with pytest.raises(ValueError, match="mask: Gated DeltaNet has no score matrix"):
        GatedDeltaNet(8, 2)(torch.randn(1, 3, 8), mask=torch.ones(3, 3, dtype=torch.bool))
