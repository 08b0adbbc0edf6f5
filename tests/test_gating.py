"""Gated attention and learned sinks as parts of the course's multi-head attention, against transformers' layers.

Peers: ``Qwen3NextAttention`` (sigmoid output gate from the query projection, RMS QK-norm with zero-centred
gains, GQA, partial RoPE on the first half of each head, the rotations from its own ``Qwen3NextRotaryEmbedding``) and gpt-oss's eager attention (one sink logit per head). Our layer is
:class:`attn_edu.multihead.MultiHeadAttention` with ``output_gate=OutputGate(...)``, ``qk_norm=QKNorm(kind="rms")``
``rotary=RotaryEmbedding(D, rotary_dim=D // 2)`` and ``attention_fn=SinkAttention(H)``, given the peer's
weights.
"""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen3NextConfig
from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward
from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextAttention, Qwen3NextRotaryEmbedding

from attn_edu.gating import OutputGate, SinkAttention
from attn_edu.masks import causal_mask
from attn_edu.multihead import MultiHeadAttention
from attn_edu.qk_norm import QKNorm
from attn_edu.rope import RotaryEmbedding

C, H, H_KV, D = 32, 4, 2, 8


def _qwen3_next_config() -> Qwen3NextConfig:
    config = Qwen3NextConfig(
        hidden_size=C,
        num_attention_heads=H,
        num_key_value_heads=H_KV,
        head_dim=D,
        rms_norm_eps=1e-6,
        attention_bias=False,
        partial_rotary_factor=0.5,  # the first D/2 coordinates of each head turn (0.25 in the released model)
    )
    config._attn_implementation = "eager"
    return config


def _qwen3_next_attention(seed: int = 0) -> Qwen3NextAttention:
    torch.manual_seed(seed)
    layer = Qwen3NextAttention(_qwen3_next_config(), layer_idx=3).eval()
    with torch.no_grad():  # zero-centred gains start at 0: make them differ from it, per coordinate
        layer.q_norm.weight.normal_(0, 0.3)
        layer.k_norm.weight.normal_(0, 0.3)
    return layer


def _ours_from(peer: Qwen3NextAttention) -> MultiHeadAttention:
    ours = MultiHeadAttention(
        C,
        H,
        num_kv_heads=H_KV,
        head_dim=D,
        bias=False,
        rotary=RotaryEmbedding(D, rotary_dim=D // 2),
        qk_norm=QKNorm(D, kind="rms", eps=1e-6),
        output_gate=OutputGate(C, H * D),
    ).eval()
    # Qwen3-Next computes each head's queries and gates in one matrix: per head, D query rows then D gate rows.
    q_and_gate = peer.q_proj.weight.view(H, 2 * D, C)
    with torch.no_grad():
        ours.q_proj.weight.copy_(q_and_gate[:, :D].reshape(H * D, C))
        ours.output_gate.proj.weight.copy_(q_and_gate[:, D:].reshape(H * D, C))
        ours.k_proj.weight.copy_(peer.k_proj.weight)
        ours.v_proj.weight.copy_(peer.v_proj.weight)
        ours.out_proj.weight.copy_(peer.o_proj.weight)
        ours.qk_norm.q_norm.weight.copy_(1 + peer.q_norm.weight)  # its gain is 1 + w
        ours.qk_norm.k_norm.weight.copy_(1 + peer.k_norm.weight)
    return ours


@pytest.mark.parametrize("T", [1, 7])
def test_gated_attention_equals_qwen3_next_attention(T: int) -> None:
    peer = _qwen3_next_attention()
    ours = _ours_from(peer)
    x = torch.randn(2, T, C, generator=torch.Generator().manual_seed(1))
    additive = torch.zeros(T, T).masked_fill(~causal_mask(T, T), float("-inf"))[None, None]  # (1, 1, T, T)
    with torch.no_grad():
        cos_sin = Qwen3NextRotaryEmbedding(_qwen3_next_config())(x, torch.arange(T)[None])  # (1, T, D/2) each
        assert cos_sin[0].shape[-1] == D // 2  # partial: the peer turns half of each head
        expected, _ = peer(x, position_embeddings=cos_sin, attention_mask=additive)
        got = ours(x, is_causal=True)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_the_gate_is_what_makes_the_difference() -> None:
    peer = _qwen3_next_attention()
    ours = _ours_from(peer)
    x = torch.randn(2, 5, C, generator=torch.Generator().manual_seed(2))
    ungated = MultiHeadAttention(
        C, H, num_kv_heads=H_KV, head_dim=D, bias=False, rotary=ours.rotary, qk_norm=ours.qk_norm
    )
    ungated.load_state_dict({k: v for k, v in ours.state_dict().items() if not k.startswith("output_gate")})
    with torch.no_grad():
        gates = ours.output_gate.gates(x)  # (B, T, H·D)
        assert ((gates > 0) & (gates < 1)).all()
        ours.output_gate.proj.weight.fill_(0)
        ours.output_gate.proj.weight[:, 0] = 1e4  # gates of 0 or 1 wherever x's first feature is not 0
        closed = ours(x, is_causal=True)
        assert not torch.allclose(closed, ungated(x, is_causal=True))
        x[..., 0] = x[..., 0].abs() + 1  # every gate now 1: the layer is ungated attention
        torch.testing.assert_close(ours(x, is_causal=True), ungated(x, is_causal=True))
        x[..., 0] = -x[..., 0]  # every gate 0: the output is out_proj's bias, absent here
        assert ours(x, is_causal=True).abs().max() == 0


def test_sink_attention_in_multi_head_attention_equals_gpt_oss_and_trains() -> None:
    mha = MultiHeadAttention(C, H, num_kv_heads=H_KV, head_dim=D, attention_fn=SinkAttention(H, init=0.5))
    assert [name for name, _ in mha.named_parameters()].count("attention_fn.sinks") == 1
    x = torch.randn(2, 6, C, generator=torch.Generator().manual_seed(3))
    out, weights = mha(x, is_causal=True, need_weights=True)
    B, T = x.shape[:2]
    q = mha.q_proj(x).view(B, T, H, D).transpose(1, 2)
    k = mha.k_proj(x).view(B, T, H_KV, D).transpose(1, 2)
    v = mha.v_proj(x).view(B, T, H_KV, D).transpose(1, 2)
    additive = torch.zeros(T, T).masked_fill(~causal_mask(T, T), float("-inf"))
    peer = type(
        "Layer", (), {"sinks": mha.attention_fn.sinks, "num_key_value_groups": H // H_KV, "training": False}
    )
    heads, peer_weights = eager_attention_forward(peer, q, k, v, additive, scaling=D**-0.5)
    torch.testing.assert_close(out, mha.out_proj(heads.reshape(B, T, H * D)))
    torch.testing.assert_close(weights, peer_weights)  # need_weights shows the sinks' share missing
    assert (weights.sum(-1) < 1).all()
    out.pow(2).sum().backward()
    assert mha.attention_fn.sinks.grad is not None and mha.attention_fn.sinks.grad.abs().sum() > 0


def test_bad_gate_inputs_name_the_argument() -> None:
    gate = OutputGate(8, 6)
    with pytest.raises(ValueError, match=r"heads: .*HD"):
        gate(torch.randn(2, 5, 8), torch.randn(2, 5, 7))
    with pytest.raises(ValueError, match="x: "):
        gate(torch.randn(2, 5, 9), torch.randn(2, 5, 6))
    with pytest.raises(ValueError, match="num_heads"):
        SinkAttention(0)


def test_sinks_and_gates_decode_through_a_kv_cache_as_the_full_pass_computes() -> None:
    """The cached decode path: one token at a time through a KVCacheLayer equals one causal pass, with learned
    sinks (read by every step's softmax) and with an output gate (computed from each new token)."""
    from attn_edu.kv_cache import KVCacheLayer

    torch.manual_seed(0)
    layers = [
        MultiHeadAttention(C, H, num_kv_heads=H_KV, head_dim=D, attention_fn=SinkAttention(H, init=1.0)),
        MultiHeadAttention(C, H, num_kv_heads=H_KV, head_dim=D, output_gate=OutputGate(C, H * D)),
    ]
    x = torch.randn(2, 9, C, generator=torch.Generator().manual_seed(4))
    for mha in layers:
        cache = KVCacheLayer()
        with torch.no_grad():
            steps = [mha(x[:, :4], is_causal=True, kv_cache=cache)]
            steps += [mha(x[:, t : t + 1], is_causal=True, kv_cache=cache) for t in range(4, 9)]
            torch.testing.assert_close(torch.cat(steps, dim=1), mha(x, is_causal=True), rtol=1e-5, atol=1e-6)
