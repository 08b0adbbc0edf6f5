"""Norms, feed-forward networks and blocks against PyTorch's own layers (nn.BatchNorm1d, nn.LayerNorm,
nn.RMSNorm, nn.TransformerEncoderLayer / nn.TransformerDecoderLayer) and their defining properties."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attn_edu.blocks import (
    CrossAttentionBlock,
    FeedForward,
    PostNormDecoderBlock,
    PostNormEncoderBlock,
    PreNormDecoderBlock,
    PreNormEncoderBlock,
    RMSNorm,
    SwiGLUFeedForward,
    batch_norm_stats,
    block_flops,
    init_normal_,
    layer_norm_stats,
)
from attn_edu.kv_cache import KVCache
from attn_edu.masks import causal_mask, key_mask, padding_mask
from attn_edu.multihead import MultiHeadAttention
from tests.helpers import randomize_

TOL = {"atol": 1e-5, "rtol": 1e-5}
C, H, HIDDEN = 12, 3, 20


def x_input(B: int = 2, T: int = 5, seed: int = 1) -> torch.Tensor:
    return torch.randn(B, T, C, generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------------------------------------------
# Norms
# ---------------------------------------------------------------------------------------------------


def test_batch_norm_stats_are_what_batchnorm_uses():
    x = x_input()
    mean, var = batch_norm_stats(x)
    bn = nn.BatchNorm1d(C, affine=False).train()
    expected = bn(x.reshape(-1, C)).reshape(x.shape)  # BatchNorm over every token of the batch
    torch.testing.assert_close((x - mean) / torch.sqrt(var + bn.eps), expected, **TOL)


def test_layer_norm_stats_are_what_layernorm_uses():
    x = x_input()
    mean, var = layer_norm_stats(x)
    expected = F.layer_norm(x, (C,), eps=1e-5)
    torch.testing.assert_close((x - mean) / torch.sqrt(var + 1e-5), expected, **TOL)


def test_layer_norm_is_per_token_batch_norm_is_not():
    x = x_input()
    other = x.clone()
    other[1] = 10 * other[1] + 3  # change the second sequence only
    assert torch.equal(layer_norm_stats(x)[0][0], layer_norm_stats(other)[0][0])
    assert not torch.allclose(batch_norm_stats(x)[0], batch_norm_stats(other)[0])


def test_rms_norm_matches_torch():
    x = x_input()
    ours = randomize_(RMSNorm(C, eps=1e-6), scale=0.2)
    theirs = nn.RMSNorm(C, eps=1e-6)
    with torch.no_grad():
        theirs.weight.copy_(ours.weight)
    torch.testing.assert_close(ours(x), theirs(x), **TOL)


def test_zero_centred_rms_norm_stores_the_gain_minus_one():
    """Qwen3-Next's norm: the weight ``w`` is the gain minus 1, so a fresh one (``w = 0``) has gain 1, and it
    equals the plain norm whose gain is ``1 + w``. Weight decay alone then pulls the gain towards 1."""
    x = x_input()
    zero = randomize_(RMSNorm(C, eps=1e-6, zero_centred=True), scale=0.2)
    plain = RMSNorm(C, eps=1e-6)
    with torch.no_grad():
        plain.weight.copy_(1 + zero.weight)
    torch.testing.assert_close(zero(x), plain(x), **TOL)
    torch.testing.assert_close(RMSNorm(C, zero_centred=True)(x), RMSNorm(C)(x), **TOL)
    before = zero.weight.detach().clone()  # w = gain - 1
    zero.weight.grad = torch.zeros_like(zero.weight)  # no loss: only the decay acts
    torch.optim.AdamW(zero.parameters(), lr=0.5, weight_decay=0.5).step()
    assert (zero.weight.detach().abs() < before.abs()).all()  # every gain 1 + w closer to 1


def test_rms_norm_is_layer_norm_without_the_mean():
    x = x_input()
    x = x - x.mean(-1, keepdim=True)  # zero-mean tokens: then RMS = standard deviation
    torch.testing.assert_close(RMSNorm(C, eps=1e-5)(x), F.layer_norm(x, (C,), eps=1e-5), **TOL)


def test_rms_norm_keeps_half_precision():
    x = x_input().to(torch.bfloat16)
    out = RMSNorm(C).to(torch.bfloat16)(x)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), RMSNorm(C)(x.float()), atol=2e-2, rtol=2e-2)


def test_norm_errors():
    with pytest.raises(ValueError, match=r"x: expected shape \(\.\.\., C\) with C=12"):
        RMSNorm(C)(torch.randn(2, 5, 8))
    with pytest.raises(ValueError, match="x"):
        batch_norm_stats(torch.randn(5, C))
    with pytest.raises(ValueError, match="dim"):
        RMSNorm(0)


# ---------------------------------------------------------------------------------------------------
# Feed-forward networks
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("activation", "fn"),
    [("relu", F.relu), ("gelu", F.gelu), ("gelu_tanh", lambda h: F.gelu(h, approximate="tanh"))],
)
def test_feed_forward_formula(activation, fn):
    ffn = randomize_(FeedForward(C, HIDDEN, activation), scale=0.2)
    x = x_input()
    expected = F.linear(
        fn(F.linear(x, ffn.up_proj.weight, ffn.up_proj.bias)), ffn.down_proj.weight, ffn.down_proj.bias
    )
    torch.testing.assert_close(ffn(x), expected, **TOL)


def test_gelu_tanh_is_the_gpt2_formula():
    # GPT-2's "gelu_new": 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))  (Hendrycks & Gimpel, 2016, §2)
    h = torch.linspace(-6, 6, 101)
    expected = 0.5 * h * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (h + 0.044715 * h**3)))
    torch.testing.assert_close(FeedForward(1, 1, "gelu_tanh").activation(h), expected, **TOL)


def test_swiglu_matches_llama_mlp():
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaMLP

    config = transformers.LlamaConfig(
        hidden_size=C, intermediate_size=HIDDEN, num_attention_heads=H, hidden_act="silu"
    )
    theirs = randomize_(LlamaMLP(config), scale=0.2)
    ours = SwiGLUFeedForward(C, HIDDEN)
    ours.load_state_dict(theirs.state_dict())  # the same names: gate_proj, up_proj, down_proj
    x = x_input()
    torch.testing.assert_close(ours(x), theirs(x), **TOL)


def test_feed_forward_is_position_wise():
    ffn = randomize_(SwiGLUFeedForward(C, HIDDEN), scale=0.2)
    x = x_input()
    perm = torch.tensor([3, 0, 4, 1, 2])
    torch.testing.assert_close(ffn(x[:, perm]), ffn(x)[:, perm], **TOL)


def test_feed_forward_errors():
    with pytest.raises(ValueError, match="activation"):
        FeedForward(C, HIDDEN, "swish")
    with pytest.raises(ValueError, match="hidden"):
        SwiGLUFeedForward(C, 0)


# ---------------------------------------------------------------------------------------------------
# Blocks against torch.nn.TransformerEncoderLayer / TransformerDecoderLayer
# ---------------------------------------------------------------------------------------------------


def torch_encoder_layer(norm_first: bool) -> nn.TransformerEncoderLayer:
    layer = nn.TransformerEncoderLayer(
        C, H, dim_feedforward=HIDDEN, dropout=0.0, activation="relu", batch_first=True, norm_first=norm_first
    )
    return randomize_(layer, scale=0.2)


def block_from_torch(block_cls, layer: nn.TransformerEncoderLayer) -> nn.Module:
    ffn = FeedForward(C, HIDDEN, "relu")
    ffn.up_proj, ffn.down_proj = layer.linear1, layer.linear2
    return block_cls(MultiHeadAttention.from_torch(layer.self_attn), ffn, layer.norm1, layer.norm2).eval()


@pytest.mark.parametrize(
    ("block_cls", "norm_first"), [(PreNormEncoderBlock, True), (PostNormEncoderBlock, False)]
)
def test_encoder_blocks_match_torch_with_padding(block_cls, norm_first):
    layer = torch_encoder_layer(norm_first)
    block = block_from_torch(block_cls, layer)
    x, real = x_input(), padding_mask([5, 3], 5)  # (B, T): True = real token
    with torch.no_grad():
        ours = block(x, mask=key_mask(real))
        theirs = layer(x, src_key_padding_mask=~real)  # torch: True = ignore
    # torch's eval fast path may zero padded rows; compare the real tokens.
    torch.testing.assert_close(ours[real], theirs[real], **TOL)


@pytest.mark.parametrize(
    ("block_cls", "norm_first"), [(PreNormDecoderBlock, True), (PostNormDecoderBlock, False)]
)
def test_decoder_blocks_are_causal_encoder_layers(block_cls, norm_first):
    layer = torch_encoder_layer(norm_first)
    block = block_from_torch(block_cls, layer)
    x = x_input()
    with torch.no_grad():
        theirs = layer(x, src_mask=~causal_mask(5), is_causal=True)
        torch.testing.assert_close(block(x), theirs, **TOL)


def test_cross_attention_block_matches_torch_decoder_layer():
    layer = nn.TransformerDecoderLayer(
        C, H, dim_feedforward=HIDDEN, dropout=0.0, activation="relu", batch_first=True, norm_first=True
    )
    layer = randomize_(layer, scale=0.2)
    ffn = FeedForward(C, HIDDEN, "relu")
    ffn.up_proj, ffn.down_proj = layer.linear1, layer.linear2
    block = CrossAttentionBlock(
        MultiHeadAttention.from_torch(layer.self_attn),
        MultiHeadAttention.from_torch(layer.multihead_attn),
        ffn,
        layer.norm1,
        layer.norm2,
        layer.norm3,
    ).eval()
    x, memory = x_input(T=4), x_input(T=6, seed=2)
    memory_real = padding_mask([6, 2], 6)
    with torch.no_grad():
        theirs = layer(
            x, memory, tgt_mask=~causal_mask(4), tgt_is_causal=True, memory_key_padding_mask=~memory_real
        )
        ours = block(x, block.cross_attn.project_kv(memory), memory_mask=key_mask(memory_real))
    torch.testing.assert_close(ours, theirs, **TOL)


def gpt_like_block(residual: bool = True) -> PreNormDecoderBlock:
    torch.manual_seed(0)
    block = PreNormDecoderBlock(
        MultiHeadAttention(C, H),
        FeedForward(C, HIDDEN, "gelu_tanh"),
        nn.LayerNorm(C),
        nn.LayerNorm(C),
        residual=residual,
    )
    return randomize_(block, scale=0.2)


def test_decoder_block_with_kv_cache_equals_full_forward():
    block = gpt_like_block()
    x = x_input(T=6)
    cache = KVCache(1)
    with torch.no_grad():
        steps = [block(x[:, :2], kv_cache=cache.layers[0])]
        steps += [block(x[:, t : t + 1], kv_cache=cache.layers[0]) for t in range(2, 6)]
        torch.testing.assert_close(torch.cat(steps, dim=1), block(x), **TOL)


def test_residual_false_removes_the_skip_connections():
    block = gpt_like_block(residual=False)
    x = x_input()
    with torch.no_grad():
        h = block.attn(block.attn_norm(x), is_causal=True)
        expected = block.ffn(block.ffn_norm(h))
        torch.testing.assert_close(block(x), expected, **TOL)
        with_skip = gpt_like_block(residual=True)  # same seed, same weights
        assert not torch.allclose(with_skip(x), block(x))


def test_residual_stream_carries_gradient_through_a_deep_stack():
    """The experiment of notebook 08 in miniature: without skips, the input gradient of a deep
    post-norm-free stack shrinks; with them it stays of order one."""

    def input_grad_norm(residual: bool) -> float:
        torch.manual_seed(0)
        blocks = nn.Sequential(
            *[
                PreNormEncoderBlock(
                    MultiHeadAttention(C, H),
                    FeedForward(C, HIDDEN),
                    nn.LayerNorm(C),
                    nn.LayerNorm(C),
                    residual=residual,
                )
                for _ in range(12)
            ]
        )
        init_normal_(blocks)
        x = x_input().requires_grad_(True)
        blocks(x).sum().backward()
        return float(x.grad.norm())

    assert input_grad_norm(residual=True) > 10 * input_grad_norm(residual=False)


def test_block_errors():
    block = gpt_like_block()
    with pytest.raises(ValueError, match=r"x: expected shape \(B, T, C\)"):
        block(torch.randn(5, C))
    cross = CrossAttentionBlock(
        MultiHeadAttention(C, H),
        MultiHeadAttention(C, H),
        FeedForward(C, HIDDEN),
        RMSNorm(C),
        RMSNorm(C),
        RMSNorm(C),
    )
    with pytest.raises(
        TypeError, match=r"memory_kv: expected the encoder output's \(k, v\).*shape \(3, 6, 12\)"
    ):
        cross(x_input(), torch.randn(3, 6, C))  # the encoder output itself, not its projection
    with pytest.raises(ValueError, match=r"k: expected shape \(B, H_kv, S, D\) with B=2"):
        cross(x_input(), cross.cross_attn.project_kv(torch.randn(3, 6, C)))  # batch of 3 against 2
    with pytest.raises(ValueError, match="std"):
        init_normal_(nn.Linear(2, 2), std=0.0)


# ---------------------------------------------------------------------------------------------------
# Cost
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("T", "dim", "hidden", "heads"), [(1, 6, 10, 3), (7, 12, 20, 2), (23, 9, 31, 1)])
def test_block_flops_are_what_flop_counter_mode_counts(T, dim, hidden, heads):
    """PyTorch counts every matrix product of a real block: bmm is q kᵀ and P v, mm/addmm the rest."""
    from torch.utils.flop_counter import FlopCounterMode

    block = PreNormEncoderBlock(
        MultiHeadAttention(dim, heads), FeedForward(dim, hidden, "gelu"), nn.LayerNorm(dim), nn.LayerNorm(dim)
    )
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        block(torch.randn(1, T, dim))
    counts = {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}
    expected = block_flops(T, dim, hidden)
    assert counts.get("aten.bmm", 0) == expected["attention_core"]
    assert sum(counts.values()) - counts.get("aten.bmm", 0) == expected["per_token"]


def test_block_flops_cross_over_just_after_two_widths_plus_the_ffn():
    dim, hidden = 768, 3072  # GPT-2 small: attention's T² terms cost more only from T = 2·768 + 3072 + 1 on
    tie, after = block_flops(4608, dim, hidden), block_flops(4609, dim, hidden)
    assert tie["attention_core"] == tie["per_token"] and after["attention_core"] > after["per_token"]
    with pytest.raises(ValueError, match="seq_len: expected a positive int, got 0"):
        block_flops(0, dim, hidden)
    with pytest.raises(ValueError, match="hidden"):
        block_flops(4, dim, 2.5)


# ---------------------------------------------------------------------------------------------------
# The gradient that reaches the first block, and a toy decoder to train block types against each other
# ---------------------------------------------------------------------------------------------------


def test_first_block_grad_norm_vanishes_without_skips_and_norms_and_holds_with_skips():
    from attn_edu.blocks import first_block_grad_norm

    depths = [1, 2, 4, 8]
    plain = [first_block_grad_norm(n, residual=False, norm=False, dim=16, heads=2) for n in depths]
    skips = [first_block_grad_norm(n, dim=16, heads=2) for n in depths]
    large = [first_block_grad_norm(n, residual=False, norm=False, gain=3.0, dim=16, heads=2) for n in depths]
    assert all(later < earlier for earlier, later in zip(plain, plain[1:])), plain  # shrinks with every block
    assert plain[-1] / plain[0] < 1e-4, plain
    assert max(skips) / min(skips) < 3, skips
    assert all(later > earlier for earlier, later in zip(large, large[1:])), large  # larger weights: it grows
    assert first_block_grad_norm(3, seed=5, dim=16, heads=2) == first_block_grad_norm(
        3, seed=5, dim=16, heads=2
    )


def test_first_block_grad_norm_is_the_gradient_of_the_first_blocks_parameters():
    """Against autograd on the same stack, rebuilt from the same seed: the function measures what it says."""
    from attn_edu.blocks import first_block_grad_norm

    dim, heads, depth, seed = 16, 2, 3, 4
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(4, 16, dim, generator=generator).double()
    upstream = torch.randn(4, 16, dim, generator=generator).double()
    torch.manual_seed(seed)
    stack = nn.Sequential(
        *[
            PreNormEncoderBlock(
                MultiHeadAttention(dim, heads),
                FeedForward(dim, 4 * dim, activation="gelu"),
                nn.LayerNorm(dim),
                nn.LayerNorm(dim),
            )
            for _ in range(depth)
        ]
    ).double()
    grads = torch.autograd.grad((stack(x) * upstream).sum(), list(stack[0].parameters()))
    expected = torch.cat([g.flatten() for g in grads]).norm().item()
    assert first_block_grad_norm(depth, dim=dim, heads=heads, seed=seed) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"depth": 0}, "depth"), ({"depth": 2, "gain": 0.0}, "gain"), ({"depth": 2, "heads": 0}, "heads")],
)
def test_first_block_grad_norm_rejects_bad_input(kwargs, match):
    from attn_edu.blocks import first_block_grad_norm

    depth = kwargs.pop("depth")
    with pytest.raises(ValueError, match=match):
        first_block_grad_norm(depth, **kwargs)


@pytest.mark.parametrize("block_type", [PreNormDecoderBlock, PostNormDecoderBlock])
def test_toy_decoder_is_its_parts_in_order_and_causal(block_type):
    from attn_edu.models import ToyDecoder

    torch.manual_seed(0)
    model = ToyDecoder(block_type, vocab_size=11, dim=C, heads=H, depth=2, max_len=9)
    input_ids = torch.randint(0, 11, (2, 7), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        x = model.token_embedding(input_ids) + model.position_embedding(torch.arange(7))
        for block in model.blocks:
            x = block(x)
        torch.testing.assert_close(model(input_ids), model.lm_head(model.final_norm(x)))
        torch.testing.assert_close(model(input_ids)[:, :4], model(input_ids[:, :4]), **TOL)  # no future leaks
    assert isinstance(model.final_norm, nn.Identity) == (block_type is PostNormDecoderBlock)
    assert all(isinstance(block, block_type) for block in model.blocks)


def test_toy_decoder_builds_blocks_without_skips_or_norms_when_asked():
    from attn_edu.models import ToyDecoder

    model = ToyDecoder(
        PreNormDecoderBlock, vocab_size=5, depth=3, residual=False, norm=lambda dim: nn.Identity()
    )
    assert [block.residual for block in model.blocks] == [False] * 3
    assert not any(isinstance(m, nn.LayerNorm) for m in model.modules())
    torch.manual_seed(3)
    pre = ToyDecoder(PreNormDecoderBlock, vocab_size=5)
    torch.manual_seed(3)
    post = ToyDecoder(PostNormDecoderBlock, vocab_size=5)
    torch.testing.assert_close(
        pre.token_embedding.weight, post.token_embedding.weight
    )  # same seed, same start
    with pytest.raises(ValueError, match=r"max_len=16"):
        pre(torch.zeros(1, 17, dtype=torch.long))
    with pytest.raises(ValueError, match="vocab_size"):
        ToyDecoder(PreNormDecoderBlock, vocab_size=0)
