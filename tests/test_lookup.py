"""Key-value lookup: the task holds what it claims, the one-head model scales its scores as stated, and
training records one loss and one entropy per step."""

from __future__ import annotations

import math

import pytest
import torch

from attn_edu.attention import attention_entropy
from attn_edu.data import key_value_lookup
from attn_edu.models.lookup import KeyValueLookup, LookupConfig, lookup_loss, train_lookup
from attn_edu.qk_norm import QKNorm

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def test_every_query_is_one_stored_key_and_the_target_is_its_value():
    batch = key_value_lookup(200, 6, num_keys=9, num_values=4, generator=torch.Generator().manual_seed(0))
    assert batch.keys.shape == batch.values.shape == (200, 6)
    assert batch.query.shape == batch.target.shape == (200,)
    for keys, values, query, target in zip(batch.keys, batch.values, batch.query, batch.target):
        assert len(set(keys.tolist())) == 6  # distinct keys: one match per query
        (where,) = (keys == query).nonzero()[:, 0].tolist()
        assert values[where] == target
    assert batch.keys.min() >= 0 and batch.keys.max() < 9 and batch.values.max() < 4
    asked = torch.stack([(k == q).nonzero()[0, 0] for k, q in zip(batch.keys, batch.query)])
    assert len(set(asked.tolist())) == 6  # every slot of the table gets asked for


def test_lookups_repeat_with_the_seed():
    a = key_value_lookup(4, 3, num_keys=8, num_values=5, generator=torch.Generator().manual_seed(3))
    b = key_value_lookup(4, 3, num_keys=8, num_values=5, generator=torch.Generator().manual_seed(3))
    assert all(torch.equal(x, y) for x, y in zip(vars(a).values(), vars(b).values()))


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((0, 3), r"batch_size"),
        ((2, 9), r"num_pairs: distinct keys need num_pairs <= num_keys=8, got 9"),
    ],
)
def test_bad_lookup_sizes_are_refused(args, match):
    with pytest.raises(ValueError, match=match):
        key_value_lookup(*args, num_keys=8, num_values=5)


def q_and_k(model: KeyValueLookup, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The queries and keys of the given key tokens, computed from the model's parts by hand."""
    x = model.key_norm(model.key_embedding(ids))  # (N, C)
    q, k = model.attn.q_proj(x), model.attn.k_proj(x)  # (N, D)
    if model.attn.qk_norm is not None:
        q, k = model.attn.qk_norm(q, k)
    return q, k


@pytest.mark.parametrize(
    "config",
    [
        LookupConfig(embed_dim=8, head_dim=16),
        LookupConfig(embed_dim=8, head_dim=16, scale=1.0),
        LookupConfig(embed_dim=8, head_dim=16, scale=1 / 16),
        LookupConfig(embed_dim=8, head_dim=16, scale=1.0, qk_norm="layer", qk_gain=0.5),
        LookupConfig(embed_dim=8, head_dim=16, scale=0.3, qk_norm="rms"),
    ],
)
def test_weights_are_the_softmax_of_the_scaled_scores_as_stated(config):
    torch.manual_seed(0)
    model = KeyValueLookup(config)
    batch = key_value_lookup(5, 7, num_keys=64, num_values=64, generator=torch.Generator().manual_seed(1))
    logits, weights = model(batch.keys, batch.values, batch.query, need_weights=True)
    q, _ = q_and_k(model, batch.query)  # (B, D)
    _, k = q_and_k(model, batch.keys.flatten())  # (B·S, D)
    k = k.view(5, 7, -1)  # (B, S, D)
    scale = 1 / math.sqrt(config.head_dim) if config.scale is None else config.scale
    by_hand = torch.softmax(scale * torch.einsum("bd,bsd->bs", q, k), dim=-1)  # (B, S)
    torch.testing.assert_close(weights, by_hand, atol=1e-6, rtol=1e-5)
    memory = model.attn.v_proj(model.value_embedding(batch.values))  # (B, S, D)
    read = torch.einsum("bs,bsd->bd", by_hand, memory)  # (B, D)
    torch.testing.assert_close(logits, model.unembed(model.attn.out_proj(read)), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(
        lookup_loss(model, batch), torch.nn.functional.cross_entropy(logits, batch.target)
    )


def test_q_and_k_start_with_unit_variance_coordinates_so_unscaled_scores_have_std_sqrt_d():
    torch.manual_seed(0)
    model = KeyValueLookup(LookupConfig(scale=1.0))  # C = 32, D = 256
    q, k = q_and_k(model, torch.arange(64))  # every key token: (64, 256) each
    assert abs(q.var().item() - 1) < 0.1 and abs(k.var().item() - 1) < 0.1
    scores = q @ k.T  # (64, 64)
    assert abs(scores.std().item() / 16 - 1) < 0.1


def test_the_model_reads_the_table_by_content_not_by_position():
    torch.manual_seed(0)
    model = KeyValueLookup(LookupConfig(embed_dim=8, head_dim=16))
    batch = key_value_lookup(3, 5, num_keys=64, num_values=64, generator=torch.Generator().manual_seed(2))
    order = torch.randperm(5)
    logits = model(batch.keys, batch.values, batch.query)
    shuffled = model(batch.keys[:, order], batch.values[:, order], batch.query)
    torch.testing.assert_close(shuffled, logits, atol=1e-6, rtol=1e-5)  # no positions: order is irrelevant


def test_qk_norm_config_builds_a_qk_norm_with_its_gain():
    model = KeyValueLookup(LookupConfig(head_dim=16, qk_norm="rms", qk_gain=0.25))
    assert isinstance(model.attn.qk_norm, QKNorm) and model.attn.qk_norm.kind == "rms"
    assert torch.equal(model.attn.qk_norm.q_norm.weight, torch.full((16,), 0.25))
    assert KeyValueLookup(LookupConfig()).attn.qk_norm is None


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"head_dim": 0}, r"head_dim"),
        ({"scale": -1.0}, r"scale: expected a finite number > 0"),
        ({"qk_norm": "batch"}, r"qk_norm: expected None, 'layer' or 'rms'"),
    ],
)
def test_bad_configs_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LookupConfig(**kwargs)


def test_bad_ids_name_the_argument():
    model = KeyValueLookup(LookupConfig(num_keys=10, num_values=5, embed_dim=8, head_dim=16))
    keys, values = torch.tensor([[1, 2]]), torch.tensor([[0, 4]])
    with pytest.raises(ValueError, match=r"values: expected ids in 0 \.\. 4"):
        model(keys, torch.tensor([[0, 5]]), torch.tensor([1]))
    with pytest.raises(ValueError, match=r"query: expected ids in 0 \.\. 9"):
        model(keys, values, torch.tensor([10]))
    with pytest.raises(ValueError, match=r"query: expected shape \(B\) with B=1"):
        model(keys, values, torch.tensor([1, 2]))


def test_training_records_one_loss_and_entropy_per_step_and_repeats_with_the_seed():
    config = LookupConfig(embed_dim=16, head_dim=32)
    run = train_lookup(config, seed=3, steps=40, batch_size=16, num_pairs=8)
    assert len(run.losses) == len(run.entropies) == 40 and run.seconds > 0
    assert all(0 <= h <= math.log(8) + 1e-5 for h in run.entropies)
    again = train_lookup(config, seed=3, steps=40, batch_size=16, num_pairs=8)
    assert again.losses == run.losses and again.entropies == run.entropies
    assert run.final(10) == (sum(run.losses[-10:]) / 10, sum(run.entropies[-10:]) / 10)


def test_the_first_recorded_entropy_is_that_of_the_initial_model():
    config = LookupConfig(embed_dim=16, head_dim=32, scale=1 / 32)
    run = train_lookup(config, seed=5, steps=1, batch_size=16, num_pairs=8)
    torch.manual_seed(5)
    model = KeyValueLookup(config)
    batch = key_value_lookup(16, 8, num_keys=64, num_values=64, generator=torch.Generator().manual_seed(5))
    _, weights = model(batch.keys, batch.values, batch.query, need_weights=True)
    assert run.entropies[0] == pytest.approx(attention_entropy(weights).mean().item(), abs=1e-6)


def test_a_scaled_model_learns_the_lookup():
    run = train_lookup(LookupConfig(embed_dim=16, head_dim=64), seed=0, steps=80, batch_size=32, num_pairs=8)
    assert run.final(10)[0] < 0.1 * run.losses[0], f"loss {run.losses[0]:.2f} -> {run.final(10)[0]:.2f}"


@pytest.mark.parametrize("window", [1, 3, 10])
def test_first_step_below_reads_the_running_mean(window):
    from attn_edu.models.lookup import LookupRun

    g = torch.Generator().manual_seed(0)
    losses = (torch.linspace(4, 0, 60) + torch.rand(60, generator=g)).tolist()
    run = LookupRun(losses=losses, entropies=[0.0] * 60, seconds=0.0)
    padded = torch.tensor(losses).cumsum(0)
    counts = torch.arange(1, 61).clamp(max=window)
    running = (padded - torch.cat([torch.zeros(window), padded[:-window]])[:60]) / counts  # windowed means
    for level in (3.0, 1.0, 0.5, -1.0):
        below = (running < level).nonzero()
        expected = int(below[0]) if len(below) else None
        assert run.first_step_below(level, window=window) == expected
    assert run.first_step_below(0.5, curve="entropies") == 0
    with pytest.raises(ValueError, match=r"curve: expected 'losses' or 'entropies'"):
        run.first_step_below(1.0, curve="loss")
