"""Head scores, head ablation, and induction heads forming in a trained attention-only model."""

from __future__ import annotations

import pytest
import torch

from attn_edu.attention import scaled_dot_product_attention
from attn_edu.data import induction_task, repeated_sequences
from attn_edu.interp import (
    ablation_effects,
    attention_layers,
    attention_maps,
    attention_received,
    current_token_score,
    first_token_score,
    gate_heads,
    head_ablation,
    head_entropy,
    head_masks_in_order,
    induction_score,
    kendall_tau,
    key_set_score,
    leave_one_out,
    previous_token_score,
    pruning_masks,
    relative_position_score,
    replaced_attention,
    shuffled_attention,
    uniform_attention,
)
from attn_edu.kv_cache import KVCache, KVCacheLayer
from attn_edu.masks import causal_mask, key_mask, padding_mask
from attn_edu.models import BERT, T5, BertConfig, T5Config
from attn_edu.models.attention_only import AttentionOnlyConfig, AttentionOnlyTransformer
from attn_edu.multihead import MultiHeadAttention
from attn_edu.train import lm_loss, train

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def uniform_causal(B: int, H: int, T: int) -> torch.Tensor:
    allowed = causal_mask(T).float()  # (T, T)
    return (allowed / allowed.sum(-1, keepdim=True)).expand(B, H, T, T)  # (B, H, T, T)


def chance_induction(T: int, period: int) -> float:
    """What uniform causal attention puts on key t - period + 1, averaged over queries t >= period."""
    return sum(1 / (t + 1) for t in range(period, T)) / (T - period)


# ---------------------------------------------------------------------------------- attention maps


def test_attention_maps_are_the_layers_own_weights_and_update_a_cache_once():
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2, window=3).eval()
    x = torch.randn(2, 5, 8)
    _, expected = mha(x, is_causal=True, need_weights=True)  # (B, H, T, S)
    (weights,) = attention_maps(mha, x, is_causal=True)
    torch.testing.assert_close(weights, expected, rtol=0, atol=0)
    cache = KVCacheLayer()
    attention_maps(mha, x, is_causal=True, kv_cache=cache)
    assert cache.seq_len == 5  # the model ran once: its new keys entered the cache once
    (step,) = attention_maps(mha, torch.randn(2, 1, 8), is_causal=True, kv_cache=cache)
    assert step.shape == (2, 2, 1, 6)  # one new query over the 5 cached keys and its own
    assert mha.attention_fn is scaled_dot_product_attention  # put back


@pytest.mark.parametrize("use_cache", [False, True])
def test_attention_maps_see_t5s_cross_attention_and_its_padding(use_cache):
    torch.manual_seed(0)
    config = T5Config(
        vocab_size=20, embed_dim=16, num_layers=1, num_decoder_layers=2, num_heads=2, ffn_dim=32
    )
    model = T5(config).eval()
    source, target = torch.randint(20, (2, 6)), torch.randint(20, (2, 4))
    attention_mask = padding_mask([6, 3], 6).long()  # the second input has 3 real tokens
    cache = KVCache(2) if use_cache else None
    maps = attention_maps(model, source, target, attention_mask, kv_cache=cache)
    layers = attention_layers(model)
    assert len(maps) == len(layers) == 1 + 2 * 2  # encoder self; decoder self and cross, per block
    for block in model.decoder_blocks:
        cross = maps[layers.index(block.cross_attn)]  # (B, H, T, S)
        assert cross.shape == (2, 2, 4, 6)
        torch.testing.assert_close(cross.sum(-1), torch.ones(2, 2, 4))
        assert bool((cross[1, :, :, 3:] == 0).all())  # padded source positions get no weight
    if use_cache:
        assert cache.seq_len == 4 and cache.cross_layers[0].k.shape[2] == 6
    # the first block's cross-attention weights, computed by hand from its inputs (dropout is off in eval)
    memory = model.encode(source, attention_mask)
    block = model.decoder_blocks[0]
    with torch.no_grad():
        h = block.self_attn_norm(model.token_embedding(target))
        bias = model.decoder_position_bias(4, 4)
        x = model.token_embedding(target) + block.self_attn(h, is_causal=True, score_bias=bias)
        _, expected = block.cross_attn(
            block.cross_attn_norm(x), memory, mask=key_mask(attention_mask.bool()), need_weights=True
        )
    torch.testing.assert_close(maps[layers.index(block.cross_attn)], expected)


# ---------------------------------------------------------------------------------- pattern scores


def test_scores_of_exact_patterns_are_one():
    T, P = 10, 4
    prev = torch.zeros(1, 1, T, T)
    induct = torch.zeros(1, 1, T, T)
    first = torch.zeros(1, 1, T, T)
    for t in range(T):
        prev[0, 0, t, max(t - 1, 0)] = 1
        induct[0, 0, t, max(t - P + 1, 0)] = 1
        first[0, 0, t, 0] = 1
    weights = torch.cat([prev, induct, first], dim=1)  # three heads, one pattern each
    # Query 1's previous token is key 0, which the other two patterns also pick there.
    torch.testing.assert_close(previous_token_score(weights), torch.tensor([1.0, 1 / 9, 1 / 9]))
    torch.testing.assert_close(induction_score(weights, P), torch.tensor([0.0, 1.0, 0.0]))
    torch.testing.assert_close(first_token_score(weights), torch.tensor([2 / 10, 4 / 10, 1.0]))


def test_current_token_score_is_the_mean_weight_on_the_own_token():
    weights = torch.softmax(torch.randn(2, 3, 5, 7, generator=torch.Generator().manual_seed(0)), dim=-1)
    # bottom-right alignment: with S = 7 keys and T = 5 queries, query t is position 2 + t
    by_hand = torch.stack([weights[:, :, t, 2 + t] for t in range(5)], dim=-1).mean(dim=(0, 2))  # (H,)
    torch.testing.assert_close(current_token_score(weights), by_hand)
    own = torch.eye(4).expand(1, 2, 4, 4)  # all weight on the own token
    torch.testing.assert_close(current_token_score(own), torch.ones(2))
    previous = torch.zeros(1, 1, 4, 4)
    previous[0, 0, torch.arange(1, 4), torch.arange(3)] = 1.0
    assert current_token_score(previous).item() == 0.0


def test_uniform_attention_scores_chance():
    T, P = 12, 5
    w = uniform_causal(2, 3, T)
    torch.testing.assert_close(induction_score(w, P), torch.full((3,), chance_induction(T, P)))
    torch.testing.assert_close(
        previous_token_score(w), torch.full((3,), sum(1 / (t + 1) for t in range(1, T)) / (T - 1))
    )


def test_scores_with_a_cache_use_bottom_right_alignment():
    # Two queries after 4 cached keys: query t sits at absolute position 4 + t.
    w = torch.zeros(1, 1, 2, 6)
    w[0, 0, 0, 3] = w[0, 0, 1, 4] = 1.0  # each attends its previous token
    torch.testing.assert_close(previous_token_score(w), torch.tensor([1.0]))


def test_score_errors():
    with pytest.raises(ValueError, match=r"weights: expected shape \(B, H, T, S\)"):
        previous_token_score(torch.rand(3, 3))
    with pytest.raises(ValueError, match="period"):
        induction_score(torch.rand(1, 1, 4, 4), 1)
    with pytest.raises(ValueError, match="no query"):
        induction_score(torch.rand(1, 1, 4, 4), 4)


# ----------------------------------------------------------------------------------------- ablation


def test_gate_heads_equals_zeroing_a_head_inside_attention():
    torch.manual_seed(0)
    attn = MultiHeadAttention(12, 3)
    x = torch.randn(2, 5, 12)

    def without_head_1(q, k, v, mask=None, *, is_causal=False, scale=None):
        out = scaled_dot_product_attention(q, k, v, mask, is_causal=is_causal, scale=scale)  # (B, H, T, D)
        return out * torch.tensor([1.0, 0.0, 1.0]).view(1, 3, 1, 1)

    peer = MultiHeadAttention(12, 3, attention_fn=without_head_1)
    peer.load_state_dict(attn.state_dict())
    with gate_heads(attn, torch.tensor([1.0, 0.0, 1.0])):
        ablated = attn(x, is_causal=True)
    torch.testing.assert_close(ablated, peer(x, is_causal=True))
    assert not torch.allclose(ablated, attn(x, is_causal=True))  # the hook is gone after the block


def test_head_ablation_equals_head_mask_and_restores_the_model():
    torch.manual_seed(0)
    model = AttentionOnlyTransformer(AttentionOnlyConfig(vocab_size=20, embed_dim=16, num_heads=4))
    ids = torch.randint(20, (2, 7))
    before = model(ids)
    mask = torch.ones(2, 4)
    mask[0, 2] = mask[1, 0] = 0
    with head_ablation(model, [(0, 2), (1, 0)]):
        ablated = model(ids)
    torch.testing.assert_close(ablated, model(ids, head_mask=mask))
    assert (ablated - before).abs().max() > 1e-3
    torch.testing.assert_close(model(ids), before)  # hooks removed
    with pytest.raises(RuntimeError), head_ablation(model, [(1, 1)]):
        raise RuntimeError("an error inside the block")
    torch.testing.assert_close(model(ids), before)  # removed after an error too


def test_ablation_errors():
    model = AttentionOnlyTransformer(AttentionOnlyConfig(vocab_size=20, embed_dim=16, num_heads=4))
    with pytest.raises(ValueError, match="layer 2 is out of range"), head_ablation(model, [(2, 0)]):
        pass
    with pytest.raises(ValueError, match="head 4 is out of range"), head_ablation(model, [(0, 4)]):
        pass
    with pytest.raises(ValueError, match="head_mask"):
        model(torch.zeros(1, 3, dtype=torch.long), head_mask=torch.ones(3, 4))
    with pytest.raises(ValueError, match="MultiHeadAttention"):
        attention_layers(torch.nn.Linear(2, 2))


def test_ablation_effects_sees_a_dead_head_as_harmless():
    torch.manual_seed(0)
    model = AttentionOnlyTransformer(AttentionOnlyConfig(vocab_size=20, embed_dim=16, num_heads=4))
    with torch.no_grad():
        model.layers[1].out_proj.weight[:, 4:8] = 0  # head 1 of layer 1 writes nothing
    batch = repeated_sequences(4, 6, vocab_size=20, generator=torch.Generator().manual_seed(0))
    effects = ablation_effects(model, batch, lm_loss)
    assert effects.shape == (2, 4)
    assert effects[1, 1].abs() < 1e-6
    assert effects.abs().max() > 1e-4


# ----------------------------------------------------------------------------- induction heads form


@pytest.fixture(scope="module")
def trained(one_thread):
    """The setting of NOTES.md (d=64, 4 heads, vocab 64, AdamW), on repeats of 8..24 tokens."""
    torch.manual_seed(0)
    model = AttentionOnlyTransformer(AttentionOnlyConfig(vocab_size=64, embed_dim=64, num_heads=4))
    result = train(
        model,
        lambda g: induction_task(32, vocab_size=64, generator=g),
        steps=200,
        lr=1e-2,
        seed=0,
        progress=False,
    )
    return model, result


@pytest.mark.slow
def test_an_induction_head_forms_in_layer_two(trained):
    model, result = trained
    assert result.seconds < 60
    period = 24
    batch = repeated_sequences(32, period, vocab_size=64, generator=torch.Generator().manual_seed(123))
    with torch.no_grad():
        _, (w1, w2) = model(batch.input_ids, need_weights=True)
    chance = chance_induction(2 * period, period)  # ≈ 0.03: uniform attention over ~36 keys
    # An induction head puts most of its weight on one key; 0.3 is 10× chance (NOTES.md measured 0.7-0.9).
    assert induction_score(w2, period).max() > 0.3, induction_score(w2, period)
    # The circuit has two layers: layer 1 does not do it by itself (no positional shortcut), and it
    # holds a previous-token head (chance: mean 1/(t+1) over the queries, ≈ 0.09).
    assert induction_score(w1, period).max() < 3 * chance, induction_score(w1, period)
    assert previous_token_score(w1).max() > 0.2, previous_token_score(w1)


@pytest.mark.slow
def test_ablating_the_induction_heads_raises_the_loss_on_the_repeat(trained):
    model, _ = trained
    period = 24
    batch = repeated_sequences(32, period, vocab_size=64, generator=torch.Generator().manual_seed(7))
    guessing = torch.log(torch.tensor(64.0)).item()  # loss of a uniform guess: log V = 4.16
    with torch.no_grad():
        _, (w1, w2) = model(batch.input_ids, need_weights=True)
        base = lm_loss(model, batch).item()
        induction_heads = [(1, h) for h in range(4) if induction_score(w2, period)[h] > 0.3]
        with head_ablation(model, induction_heads):
            without_induction = lm_loss(model, batch).item()
    # The trained model predicts the repeat far better than guessing; without its induction heads
    # it is back near guessing (the heads share the work, so all of them are ablated together).
    assert induction_heads
    assert base < guessing / 2, base
    assert without_induction > base + 1.5, (base, without_induction)
    # The other half of the circuit: removing layer 1's best previous-token head alone hurts too.
    effects = ablation_effects(model, batch, lm_loss)  # (layers, H)
    previous_head = int(previous_token_score(w1).argmax())
    assert effects[0, previous_head] > 0.1, effects


def test_pruning_masks_remove_the_least_important_head_first():
    g = torch.Generator().manual_seed(0)
    importance = torch.randn(3, 4, generator=g)
    masks = pruning_masks(importance)
    assert masks.shape == (13, 3, 4) and bool((masks[0] == 1).all()) and bool((masks[-1] == 0).all())
    removed = (masks[:-1] - masks[1:]).flatten(1).argmax(1)  # (12,) the head switched off at each step
    assert importance.flatten()[removed].diff().ge(0).all()  # in increasing importance
    assert sorted(removed.tolist()) == list(range(12))  # each head once
    # Ties keep (layer, head) order.
    tied = pruning_masks(torch.zeros(2, 2))
    assert [int((tied[k] - tied[k + 1]).flatten().argmax()) for k in range(4)] == [0, 1, 2, 3]


def test_head_masks_in_order_refuses_bad_orders():
    assert head_masks_in_order([], 1, 3).shape == (1, 1, 3)
    for bad in ([0, 0], [4], [-1]):
        with pytest.raises(ValueError, match="order: expected distinct flat head indices in 0 .. 3"):
            head_masks_in_order(bad, 2, 2)
    with pytest.raises(ValueError, match="importance: expected shape"):
        pruning_masks(torch.zeros(4))


def _padded_weights(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([5, 3])
    mask = (torch.arange(5)[None, :] < lengths[:, None]).long()  # (B, S) 1 = real token
    scores = torch.randn(2, 3, 5, 5, generator=g).masked_fill(mask[:, None, None, :] == 0, float("-inf"))
    return scores.softmax(-1), mask  # (B, H, T, S)


@pytest.mark.parametrize("offset", [-2, -1, 1, 2])
def test_relative_position_score_by_loop_on_a_padded_batch(offset):
    weights, mask = _padded_weights()
    total, count = torch.zeros(3), 0
    for b in range(2):
        for t in range(5):
            s = t + offset
            if mask[b, t] and 0 <= s < 5 and mask[b, s]:
                total += weights[b, :, t, s]
                count += 1
    torch.testing.assert_close(relative_position_score(weights, offset, mask), total / count)
    assert relative_position_score(weights, -1, mask).equal(
        relative_position_score(weights, -1, mask)
    )  # deterministic


def test_key_set_score_and_head_entropy_by_loop_on_a_padded_batch():
    weights, mask = _padded_weights(1)
    is_key = torch.zeros(2, 5, dtype=torch.bool)
    is_key[:, 0] = True  # [CLS]
    is_key[0, 4] = is_key[1, 2] = True  # [SEP]: the last real token
    on_set, entropy, count = torch.zeros(3), torch.zeros(3), 0
    for b in range(2):
        for t in range(5):
            if mask[b, t]:
                on_set += (weights[b, :, t] * is_key[b]).sum(-1)
                p = weights[b, :, t]
                entropy += -(p * p.clamp(min=1e-30).log()).sum(-1)
                count += 1
    torch.testing.assert_close(key_set_score(weights, is_key, mask), on_set / count)
    torch.testing.assert_close(head_entropy(weights, mask), entropy / count)
    with pytest.raises(ValueError, match="is_key: expected a bool tensor"):
        key_set_score(weights, is_key.long(), mask)
    with pytest.raises(ValueError, match="offset: expected an int"):
        relative_position_score(weights, 1.0, mask)


# ------------------------------------------------------------------- attention vs importance


def test_attention_received_by_loop_on_a_padded_batch():
    weights, mask = _padded_weights(2)
    received = attention_received(weights, mask)  # (B, S)
    for b in range(2):
        real = [t for t in range(5) if mask[b, t]]
        for s in range(5):
            by_loop = sum(weights[b, h, t, s] for h in range(3) for t in real) / (3 * len(real))
            torch.testing.assert_close(received[b, s], by_loop)
    torch.testing.assert_close(received.sum(-1), torch.ones(2))  # softmax rows: each sentence's row sums to 1
    assert (received[mask == 0] == 0).all()  # padded keys get nothing


def _kendall_by_pairs(x: list[float], y: list[float]) -> float:
    """τ_b by counting pairs: concordant minus discordant over the root of the untied pair counts."""
    concordant = discordant = untied_x = untied_y = 0
    for i in range(len(x)):
        for j in range(i + 1, len(x)):
            dx, dy = x[i] - x[j], y[i] - y[j]
            untied_x += dx != 0
            untied_y += dy != 0
            concordant += dx * dy > 0
            discordant += dx * dy < 0
    return (concordant - discordant) / (untied_x * untied_y) ** 0.5


def test_kendall_tau_counts_pairs_and_sees_only_the_order():
    g = torch.Generator().manual_seed(0)
    for n in (2, 5, 9):
        for _ in range(5):
            x = torch.randint(0, 4, (n,), generator=g).float()  # small integers: ties
            y = torch.randint(0, 4, (n,), generator=g).float()
            if len(set(x.tolist())) < 2 or len(set(y.tolist())) < 2:
                continue
            tau = kendall_tau(x, y)
            assert abs(tau.item() - _kendall_by_pairs(x.tolist(), y.tolist())) < 1e-6
            torch.testing.assert_close(kendall_tau(x.exp() * 3 + 1, y), tau)  # increasing transform
            torch.testing.assert_close(kendall_tau(y, x), tau)
            torch.testing.assert_close(kendall_tau(-x, y), -tau)
    x = torch.randn(7, generator=g)
    assert kendall_tau(x, 2 * x).item() == pytest.approx(1.0)
    assert kendall_tau(x, -x).item() == pytest.approx(-1.0)
    with pytest.raises(ValueError, match="τ needs two values that differ"):
        kendall_tau(torch.ones(4), torch.arange(4.0))
    with pytest.raises(ValueError, match="y: expected shape"):
        kendall_tau(torch.arange(4.0), torch.arange(3.0))


def _tiny_bert() -> BERT:
    torch.manual_seed(0)
    return BERT(BertConfig(vocab_size=30, embed_dim=16, num_heads=2, num_layers=2, ffn_dim=32)).eval()


def _mean_embedding(model):
    def embed(ids, mask):
        hidden = model(ids, mask)  # (N, T, C)
        weights = mask[..., None].float()  # (N, T, 1)
        return (hidden * weights).sum(1) / weights.sum(1)  # (N, C)

    return embed


def test_leave_one_out_equals_hiding_each_token_by_loop():
    model = _tiny_bert()
    embed = _mean_embedding(model)
    ids = torch.tensor([[1, 5, 6, 7, 2], [1, 8, 2, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    importance = leave_one_out(embed, ids, mask, batch_size=3)  # several batches of variants
    with torch.no_grad():
        full = embed(ids, mask)
        for b in range(2):
            for t in range(5):
                if not mask[b, t]:
                    assert importance[b, t] == 0  # padding: hiding it changes nothing
                    continue
                hidden = mask[b : b + 1].clone()
                hidden[0, t] = 0
                cos = torch.nn.functional.cosine_similarity(embed(ids[b : b + 1], hidden)[0], full[b], dim=0)
                torch.testing.assert_close(importance[b, t], 1 - cos, atol=1e-6, rtol=0)
    # more padding on the right changes nothing
    wider = leave_one_out(
        embed,
        torch.cat([ids, torch.zeros(2, 2, dtype=ids.dtype)], 1),
        torch.cat([mask, torch.zeros(2, 2, dtype=mask.dtype)], 1),
    )
    torch.testing.assert_close(wider[:, :5], importance, atol=1e-6, rtol=0)


def test_leave_one_out_of_a_bag_of_words_is_deleting_the_word():
    def bag_of_words(ids, mask):
        return (torch.nn.functional.one_hot(ids, 6).float() * mask[..., None]).sum(1)  # counts (N, V)

    ids, mask = torch.tensor([[1, 3, 3, 5]]), torch.ones(1, 4, dtype=torch.long)
    importance = leave_one_out(bag_of_words, ids, mask)
    for t in range(4):
        kept = torch.cat([ids[0, :t], ids[0, t + 1 :]])
        without = torch.bincount(kept, minlength=6).float()
        full = torch.bincount(ids[0], minlength=6).float()
        cos = torch.nn.functional.cosine_similarity(without, full, dim=0)
        torch.testing.assert_close(importance[0, t], 1 - cos)
    assert importance[0, 1] == importance[0, 2]  # the same word, the same importance


def test_shuffled_and_uniform_rows_keep_their_keys():
    weights, mask = _padded_weights(3)
    allowed = (mask[:, None, None, :] == 1).expand_as(weights)  # (B, H, T, S)
    moved = shuffled_attention(weights, allowed, generator=torch.Generator().manual_seed(0))
    flat = uniform_attention(weights, allowed)
    changed = 0
    for b in range(2):
        n = int(mask[b].sum())
        for h in range(3):
            for t in range(5):
                row, new = weights[b, h, t], moved[b, h, t]
                assert sorted(new[:n].tolist()) == sorted(row[:n].tolist())  # the same numbers ...
                assert (new[n:] == 0).all()  # ... on visible keys only
                changed += not torch.equal(new, row)
                torch.testing.assert_close(flat[b, h, t, :n], torch.full((n,), 1 / n))
                assert (flat[b, h, t, n:] == 0).all()
    assert changed > 20  # rows do move (a row of 3 keys keeps its order with chance 1/6)
    again = shuffled_attention(weights, allowed, generator=torch.Generator().manual_seed(0))
    assert torch.equal(again, moved)  # seeded
    nothing = torch.zeros_like(allowed)
    assert (uniform_attention(weights, nothing) == 0).all()  # no visible key: zeros, never NaN
    with pytest.raises(ValueError, match="allowed: expected a bool tensor"):
        shuffled_attention(weights, mask)


def test_replaced_attention_mixes_values_with_the_new_weights_and_restores_the_model():
    model = _tiny_bert()
    ids = torch.tensor([[1, 5, 6, 7, 2], [1, 8, 2, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    layers = attention_layers(model)
    before = [layer.attention_fn for layer in layers]
    with torch.no_grad():
        full = model(ids, mask)
        with replaced_attention(model, lambda w, allowed: w):  # the identity
            torch.testing.assert_close(model(ids, mask), full, atol=1e-5, rtol=0)
        with replaced_attention(model, uniform_attention, layers=[1]):
            flat_last = model(ids, mask)
        with replaced_attention(model, uniform_attention):
            flat_all = model(ids, mask)
    assert [layer.attention_fn for layer in layers] == before  # put back
    assert not torch.allclose(flat_last, full) and not torch.allclose(flat_all, flat_last)
    # By hand, one layer: uniform attention reads the mean of the visible values.
    attn = layers[0]
    x = torch.randn(2, 5, 16)
    key_visible = mask.bool()[:, None, None, :]  # (B, 1, 1, S)
    with torch.no_grad(), replaced_attention(attn, uniform_attention):
        out = attn(x, mask=key_visible)
    v = attn.v_proj(x)  # (B, S, C): every head's values side by side
    for b in range(2):
        mean_value = v[b, mask[b] == 1].mean(0)  # (C,)
        expected = attn.out_proj(mean_value).expand(5, 16)
        torch.testing.assert_close(out[b], expected, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="layers: layer 2 is out of range"):
        with replaced_attention(model, uniform_attention, layers=[2]):
            pass


def test_replaced_attention_keeps_causal_masks_and_is_undone_after_an_error():
    torch.manual_seed(1)
    attn = MultiHeadAttention(8, 2)
    x = torch.randn(1, 4, 8)
    with torch.no_grad(), replaced_attention(attn, uniform_attention):
        out = attn(x, is_causal=True)
    v = attn.v_proj(x)[0]  # (T, C)
    for t in range(4):
        torch.testing.assert_close(out[0, t], attn.out_proj(v[: t + 1].mean(0)), atol=1e-5, rtol=0)
    original = attn.attention_fn
    with pytest.raises(RuntimeError, match="boom"):
        with replaced_attention(attn, uniform_attention):
            raise RuntimeError("boom")
    assert attn.attention_fn is original
    # need_weights still reports the model's own weights (the maps are recomputed from q and k)
    with torch.no_grad(), replaced_attention(attn, uniform_attention):
        _, weights = attn(x, is_causal=True, need_weights=True)
    assert not torch.allclose(weights, uniform_attention(weights, weights > 0))
