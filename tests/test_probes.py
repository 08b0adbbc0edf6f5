"""Probes: the residual streams are the model's own, the control task is a fixed random function of the token
type, and a linear probe reads what is linearly there and nothing that is not."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attn_edu.interp import head_ablation
from attn_edu.models.attention_only import AttentionOnlyConfig, AttentionOnlyTransformer
from attn_edu.probes import control_labels, fit_probe, probe_accuracy, readout_error, residual_streams


@pytest.fixture(scope="module")
def model() -> AttentionOnlyTransformer:
    torch.manual_seed(0)
    return AttentionOnlyTransformer(
        AttentionOnlyConfig(vocab_size=20, embed_dim=16, num_heads=2, num_layers=2)
    ).eval()


def test_the_streams_are_the_embeddings_then_each_layer_added_and_the_logits_read_the_last(model) -> None:
    ids = torch.randint(20, (3, 7), generator=torch.Generator().manual_seed(1))
    streams = residual_streams(model, ids)
    assert len(streams) == 3
    embeddings = model.token_embedding(ids) + model.position_embedding(7)
    torch.testing.assert_close(streams[0], embeddings)
    for layer, (before, after) in enumerate(zip(streams, streams[1:])):
        torch.testing.assert_close(
            after - before, model.layers[layer](before, is_causal=True), atol=1e-6, rtol=1e-5
        )
    with torch.no_grad():
        torch.testing.assert_close(model.unembed(streams[-1]), model(ids))
    with head_ablation(model, [(0, 0), (0, 1)]):  # layer 0's heads switched off: it adds only W^O's bias
        ablated = residual_streams(model, ids)
    bias = model.layers[0].out_proj.bias
    torch.testing.assert_close(
        ablated[1] - ablated[0], bias.detach().expand_as(ablated[0]), atol=1e-6, rtol=1e-5
    )
    with pytest.raises(ValueError, match="model"):
        residual_streams(torch.nn.Linear(2, 2), ids)


def test_the_control_task_gives_each_type_one_random_label() -> None:
    ids = torch.randint(50, (40, 30), generator=torch.Generator().manual_seed(2))
    labels = control_labels(ids, 5, seed=3)
    for token in ids.unique().tolist():
        assert labels[ids == token].unique().numel() == 1
    assert torch.equal(labels, control_labels(ids, 5, seed=3)) and not torch.equal(
        labels, control_labels(ids, 5, seed=4)
    )
    assert labels.unique().tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="token_ids"):
        control_labels(torch.tensor([-1, 2]), 3)
    with pytest.raises(ValueError, match="num_classes"):
        control_labels(ids, 0)


def test_a_linear_probe_reads_a_linear_property_and_not_noise() -> None:
    g = torch.Generator().manual_seed(5)
    features = torch.randn(800, 12, generator=g)
    direction = torch.randn(12, generator=g)
    labels = (features @ direction > 0).long()  # linearly separable
    probe = fit_probe(features[:400], labels[:400], 2)
    assert probe_accuracy(probe, features[400:], labels[400:]) > 0.95
    noise = torch.randint(2, (800,), generator=g)  # unrelated to the features
    probe = fit_probe(features[:400], noise[:400], 2)
    assert abs(probe_accuracy(probe, features[400:], noise[400:]) - 0.5) < 0.1
    with pytest.raises(ValueError, match="labels"):
        fit_probe(features, labels, 1)
    with pytest.raises(ValueError, match="labels"):
        fit_probe(features, labels[:10], 2)


def test_readout_error_recovers_a_linear_target_and_agrees_with_numpy_least_squares() -> None:
    g = torch.Generator().manual_seed(0)
    features = torch.randn(4, 50, 5, generator=g, dtype=torch.float64)  # (B, T, F): rows are flattened
    linear = features @ torch.randn(5, 3, generator=g, dtype=torch.float64) - 2.0  # affine in the features
    assert readout_error(features, linear) < 1e-20
    assert readout_error(features, features) < 1e-20
    target = torch.randn(4, 50, 3, generator=g, dtype=torch.float64)
    f = np.c_[features.reshape(-1, 5).numpy(), np.ones(200)]
    y = target.reshape(-1, 3).numpy()
    residual = y - f @ np.linalg.lstsq(f, y, rcond=None)[0]
    assert readout_error(features, target) == pytest.approx((residual**2).sum() / (y**2).sum(), rel=1e-9)
    assert 0.0 < readout_error(features, target) <= 1.0


def test_readout_error_never_grows_with_more_features_and_names_a_mismatch() -> None:
    g = torch.Generator().manual_seed(1)
    features, target = torch.randn(300, 2, generator=g), torch.randn(300, 4, generator=g)
    more = torch.cat([features, torch.randn(300, 3, generator=g)], dim=-1)
    assert readout_error(more, target) <= readout_error(features, target) + 1e-6
    half_sum = features[:, :1] + features[:, 1:]  # one average of two vectors: neither comes back alone
    assert readout_error(half_sum, features[:, :1]) > 0.3
    with pytest.raises(ValueError, match=r"target: expected the leading dimensions"):
        readout_error(features, target[:10])
