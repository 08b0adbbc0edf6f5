"""attn_edu.sinks: the first-token mass and the residual stream's size, checked against independent computations."""

from __future__ import annotations

import pytest
import torch

from attn_edu.gating import SinkAttention
from attn_edu.interp import attention_maps
from attn_edu.models import GPT, GPTConfig
from attn_edu.sinks import first_token_mass, sink_profile

CONFIG = GPTConfig(vocab_size=12, max_seq_len=16, embed_dim=16, num_heads=2, num_layers=3, ffn_dim=32)


def _model(seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(CONFIG).eval()


def test_the_mass_is_each_layers_weight_on_the_first_key_without_the_first_query() -> None:
    model, ids = _model(), torch.randint(12, (3, 16), generator=torch.Generator().manual_seed(1))
    profile = sink_profile(model, ids)
    maps = attention_maps(model, ids)  # L x (B, H, T, S)
    expected = torch.stack([w[:, :, 1:, 0].mean(dim=(0, 2)) for w in maps])  # (L, H)
    torch.testing.assert_close(profile["mass"], expected)
    assert ((profile["mass"] > 0) & (profile["mass"] < 1)).all()


def test_a_learned_sink_that_takes_everything_leaves_no_mass_on_the_first_token() -> None:
    model = _model()
    for block in model.blocks:  # every head's sink logit far above any score: the rows go to the sink
        block.attn.attention_fn = SinkAttention(CONFIG.num_heads, init=30.0)
    profile = sink_profile(model, torch.randint(12, (2, 16), generator=torch.Generator().manual_seed(2)))
    assert profile["mass"].max() < 1e-6


def test_blocks_that_write_nothing_leave_the_residual_norms_unchanged() -> None:
    model = _model()
    with torch.no_grad():
        for name, parameter in model.blocks.named_parameters():
            if "out_proj" in name or "down_proj" in name:  # what each sublayer adds to the stream
                parameter.zero_()
    norms = sink_profile(model, torch.randint(12, (2, 16), generator=torch.Generator().manual_seed(3)))[
        "norms"
    ]
    assert norms.shape == (CONFIG.num_layers + 1, 16)
    torch.testing.assert_close(norms, norms[:1].expand_as(norms))  # every row: the embedding's norms
    assert (norms > 0).all()


def test_bad_inputs_are_named() -> None:
    with pytest.raises(ValueError, match="weights: expected at least 2 queries"):
        first_token_mass(torch.ones(1, 2, 1, 3))
    with pytest.raises(ValueError, match="model: expected a model with its layers in `model.blocks`"):
        sink_profile(torch.nn.Linear(2, 2), torch.ones(1, 2))


def test_a_differential_model_is_measured_on_its_difference_maps() -> None:
    from attn_edu.differential import DifferentialAttention
    from attn_edu.models import Llama, LlamaConfig

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=12, embed_dim=16, num_layers=2, num_heads=4, num_kv_heads=2, ffn_dim=32)
    model = Llama(config).eval()
    for i, block in enumerate(model.blocks):
        block.attn = DifferentialAttention(16, 4, num_kv_heads=2, layer=i, rotary=model.rotary)
    ids = torch.randint(12, (2, 9), generator=torch.Generator().manual_seed(3))
    profile = sink_profile(model, ids)
    assert profile["mass"].shape == (2, 2) and profile["norms"].shape == (3, 9)  # (L, H/2), (L + 1, T)
    x = model.token_embedding(ids)  # the first block's attention input, normalised as the block does
    with torch.no_grad():
        _, maps = model.blocks[0].attn(model.blocks[0].attn_norm(x), is_causal=True, need_weights=True)
    torch.testing.assert_close(profile["mass"][0], first_token_mass(maps))
