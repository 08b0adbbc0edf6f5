"""Notebook 13's findings hold for every seed, not only for the one run the notebook shows.

``course/13_interpretability.ipynb`` trains one ``AttentionOnlyTransformer`` (seed 0) and reads its findings off
that run: the loss plateaus and then drops; on 16 tokens repeated once the second copy is copied; on 24 the last
predictions fail, because the previous-token line stops at query 20; layer 0 holds previous-token heads and
layer 1 induction heads; the layer-1 heads are dispensable one by one and indispensable together; a less sharp
layer-0 head matters most, because layer 1's keys are built from what it writes; greedy pruning stays at or
below a fixed ranking. One run
is an anecdote, and its exact numbers even move with the CPU (training amplifies the last bits of float sums).
Here every finding is checked on five runs of the notebook's recipe, with the margins the notebook asserts:
seeds 0 to 2 are the runs the course ships (``attn_edu.experiments.interp_seeds``; tests/test_interp_seeds.py
proves each one a run of the recipe), seeds 3 and 4 are trained here, on this machine's CPU. The ranges the
notebook's text quotes come from these runs, measured natively and under ``ATEN_CPU_CAPABILITY=default``,
``MKL_CBWR=COMPATIBLE`` (and both), and ``ATEN_CPU_CAPABILITY=avx2``.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from attn_edu.circuits import (
    composition_scores,
    copying_score,
    head_circuits,
    patch_head_outputs,
    random_composition_baseline,
)
from attn_edu.data import repeated_sequences
from attn_edu.experiments import interp_seeds
from attn_edu.interp import (
    ablation_effects,
    head_ablation,
    induction_score,
    kendall_tau,
    previous_token_score,
)
from attn_edu.masks import causal_mask
from attn_edu.models.attention_only import AttentionOnlyTransformer
from attn_edu.objectives import causal_lm_loss
from attn_edu.train import TrainResult, lm_loss, steepest_fall

pytestmark = pytest.mark.slow

SEEDS = (0, 1, 2, 3, 4)
TRAINED_HERE = tuple(seed for seed in SEEDS if seed not in interp_seeds.SEEDS)  # (3, 4): the others ship
V, P, EDGE = 64, 16, 24  # vocabulary; period of the evaluation sequences; the longest training length
LOG_V = math.log(V)  # the loss of a uniform guess


def chance_induction() -> float:
    """The induction score of uniform causal attention over the 2P evaluation tokens."""
    uniform = causal_mask(2 * P).float()  # (T, S)
    return induction_score((uniform / uniform.sum(-1, keepdim=True))[None, None], P).item()


def loss_without(model, batch, removed: list[int]) -> float:
    """Loss on the scored tokens with the heads ``removed`` (flat indices layer * 4 + head) switched off."""
    mask = torch.ones(8)  # (L*H,)
    mask[removed] = 0.0
    return causal_lm_loss(model(batch.input_ids, head_mask=mask.view(2, 4)), batch.labels).item()


def pruning_curve(model, batch, order: list[int]) -> list[float]:
    """Loss after removing 0, 1, ..., 8 heads in ``order``."""
    return [loss_without(model, batch, order[:k]) for k in range(9)]


def greedy_order(model, batch) -> list[int]:
    """Remove, at each step, the head whose removal (given those already gone) raises the loss least."""
    order: list[int] = []
    for _ in range(8):
        left = [i for i in range(8) if i not in order]
        order.append(min(left, key=lambda i: loss_without(model, batch, [*order, i])))
    return order


def measure(model: AttentionOnlyTransformer, result: TrainResult) -> SimpleNamespace:
    """What the notebook's claims rest on, measured on one run of its recipe (``model`` trained, ``result`` its
    losses)."""
    batch = repeated_sequences(32, P, vocab_size=V, generator=torch.Generator().manual_seed(1))
    edge = repeated_sequences(32, EDGE, vocab_size=V, generator=torch.Generator().manual_seed(1)).input_ids
    short = repeated_sequences(32, 10, vocab_size=V, generator=torch.Generator().manual_seed(2))
    ids = batch.input_ids  # (B, 2P)
    with torch.no_grad():
        logits, (w0, w1) = model(ids, need_weights=True)  # (B, T, V), two layers of (B, H, T, S)
        first_copy = F.cross_entropy(logits[:, : P - 1].transpose(1, 2), ids[:, 1:P])  # predictions 0..P-2
        edge_logits, (edge_w0, _) = model(edge, need_weights=True)
        edge_loss = F.cross_entropy(
            edge_logits[:, :-1].transpose(1, 2), edge[:, 1:], reduction="none"
        )  # (B, 47)
        on_previous = edge_w0.diagonal(offset=-1, dim1=-2, dim2=-1).mean(0)  # (H, 47): query t on key t - 1
        sharpness = torch.stack([w0.amax(-1).mean((0, 2)), w1.amax(-1).mean((0, 2))])  # (L, H)
        previous = torch.stack([previous_token_score(w0), previous_token_score(w1)])  # (L, H)
        effects = ablation_effects(model, batch, lm_loss)  # (L, H)
        key_head = divmod(int(effects.argmax()), 4)
        previous_heads = [(0, h) for h in range(4) if previous[0, h] > 0.25]
        with head_ablation(model, [key_head]):
            _, (_, w1_without_key) = model(ids, need_weights=True)
            short_without_key = lm_loss(model, short).item()
        with head_ablation(model, previous_heads):
            _, (_, w1_without_previous) = model(ids, need_weights=True)
        with head_ablation(model, [(1, h) for h in range(4)]):
            without_layer_1 = lm_loss(model, batch).item()
        second_copy_loss = lm_loss(model, batch).item()
        g = torch.Generator().manual_seed(0)
        random_orders = [torch.randperm(8, generator=g).tolist() for _ in range(6)]
        curves = {
            "by effect": pruning_curve(model, batch, torch.argsort(effects.flatten(), stable=True).tolist()),
            "by looks": pruning_curve(model, batch, torch.argsort(sharpness.flatten(), stable=True).tolist()),
            "random": torch.tensor([pruning_curve(model, batch, o) for o in random_orders]).mean(0).tolist(),
            "greedy": pruning_curve(model, batch, greedy_order(model, batch)),
        }
        composition = composition_scores(*model.layers)  # from the weights alone
        full_ov = torch.stack(
            [
                model.token_embedding.weight @ head_circuits(layer)[1] @ model.unembed.weight.T
                for layer in model.layers
            ]
        )  # (L, H, V, V)
        corrupted = ids.clone()
        corrupted[:, :P] = torch.randint(V, (ids.shape[0], P), generator=torch.Generator().manual_seed(5))

        def second_copy_log_prob(logits: torch.Tensor) -> float:
            return logits[:, P:-1].log_softmax(-1).gather(-1, ids[:, P + 1 :, None]).mean().item()

        patched = patch_head_outputs(model, ids, corrupted, second_copy_log_prob)
        return SimpleNamespace(
            composition=composition,
            copying=copying_score(full_ov),  # (L, H)
            own_logit_top=(full_ov.argmax(-1) == torch.arange(V)).float().mean(-1),  # (L, H)
            recovered=patched["recovered"],
            losses=result.losses,
            final_loss=result.final_loss(),
            first_steps=sum(result.losses[:10]) / 10,
            fall=steepest_fall(result.losses, window=10, span=20)[1],
            edge_middle=edge_loss[:, 25:40].mean().item(),  # positions 26 to 40
            edge_end=edge_loss[:, -3:].mean().item(),  # positions 45 to 47
            previous_line=on_previous[:, 1:19].amax(0).mean().item(),  # queries 2 to 19, the best head
            previous_after=on_previous[:, 21:].max().item(),  # queries 22 to 47, any head
            clean_minus_corrupted=patched["clean"] - patched["corrupted"],
            first_copy_loss=first_copy.item(),
            second_copy_loss=second_copy_loss,
            second_copy_accuracy=(logits[:, P:-1].argmax(-1) == ids[:, P + 1 :]).float().mean().item(),
            induction=torch.stack([induction_score(w0, P), induction_score(w1, P)]),  # (L, H)
            previous=previous,
            previous_heads=previous_heads,
            sharpness=sharpness,
            effects=effects,
            without_layer_1=without_layer_1,
            key_head=key_head,
            key_on_first=previous_token_score(w0[:, :, :P, :P])[key_head[1]].item(),
            key_on_second=previous_token_score(w0[:, :, P:, :])[key_head[1]].item(),
            induction_without_key=induction_score(w1_without_key, P),
            induction_without_previous=induction_score(w1_without_previous, P),
            short_loss=lm_loss(model, short).item(),
            short_without_key=short_without_key,
            curves=curves,
        )


@pytest.fixture(scope="module")
def runs(one_thread) -> dict[int, SimpleNamespace]:
    trained = {**interp_seeds.load_seeds(), **{seed: interp_seeds.train_seed(seed) for seed in TRAINED_HERE}}
    assert sorted(trained) == list(SEEDS)
    return {seed: measure(*trained[seed]) for seed in SEEDS}


def per_seed(runs, value) -> dict[int, float]:
    """``{seed: value(run)}``, rounded, for failure messages."""
    return {seed: round(float(value(r)), 3) for seed, r in runs.items()}


# ----------------------------------------------------------------------------- section 1: training


def test_the_loss_plateaus_near_guessing_then_drops_suddenly(runs):
    for seed, r in runs.items():
        window = [sum(r.losses[i : i + 10]) / 10 for i in range(len(r.losses) - 9)]  # means of 10 steps
        plateau = sum(r.losses[20:60]) / 40
        fall = max(window[i] - window[i + 20] for i in range(len(window) - 20))
        assert plateau > 3.8 and fall > 1.5 and fall == pytest.approx(r.fall), (seed, plateau, fall)
        assert r.final_loss < 1 and r.first_steps > 4, (seed, r.final_loss, r.first_steps)


# ----------------------------------------------------------------------------- section 2: induction signature


def test_the_second_copy_is_predicted_and_the_first_is_not(runs):
    assert all(r.second_copy_loss < 0.5 for r in runs.values()), per_seed(runs, lambda r: r.second_copy_loss)
    assert all(r.second_copy_accuracy > 0.9 for r in runs.values()), per_seed(
        runs, lambda r: r.second_copy_accuracy
    )
    assert all(r.first_copy_loss > LOG_V for r in runs.values()), per_seed(runs, lambda r: r.first_copy_loss)


# ----------------------------------------------------------------------------- section 4: the edge of training


def test_at_the_longest_training_length_the_last_copies_fail_where_the_previous_token_line_stops(runs):
    for seed, r in runs.items():
        assert r.edge_middle < 0.5 and r.edge_end > LOG_V, (seed, r.edge_middle, r.edge_end)
        assert r.previous_line > 0.7 and r.previous_after < 0.2, (seed, r.previous_line, r.previous_after)


# ----------------------------------------------------------------------------- section 4: head scores


def test_layer_1_holds_the_induction_heads_and_layer_0_the_previous_token_heads(runs):
    chance = chance_induction()  # 0.042
    for seed, r in runs.items():
        assert (r.induction[1] > 0.3).all() and r.induction[1].min() > 5 * chance, (seed, r.induction)
        assert r.induction[0].max() < 5 * chance, (seed, r.induction)  # no shortcut inside layer 0
        assert r.previous_heads, (seed, r.previous)
    # How many layer-0 heads pass 0.25 is not a finding: it moves from seed to seed.
    assert len({len(r.previous_heads) for r in runs.values()}) > 1, per_seed(
        runs, lambda r: len(r.previous_heads)
    )


# ----------------------------------------------------------------------------- sections 5 and 6(a): ablation


def test_the_layer_1_heads_are_dispensable_one_by_one_and_indispensable_together(runs):
    for seed, r in runs.items():
        assert r.sharpness[1].min() > r.sharpness[0].max(), (
            seed,
            r.sharpness,
        )  # the 4 sharpest are layer 1's
        assert r.effects[1].abs().max() < 0.25, (seed, r.effects)  # one at a time
        # Together (they are all the induction heads): back near guessing.
        assert r.without_layer_1 > r.second_copy_loss + 3, (seed, r.second_copy_loss, r.without_layer_1)
        assert abs(r.without_layer_1 - LOG_V) < 0.5, (seed, r.without_layer_1)


# ----------------------------------------------------------------------------- section 6(b): the keystone head


def test_a_less_striking_layer_0_head_is_the_most_important_one(runs):
    for seed, r in runs.items():
        layer, h = r.key_head
        assert layer == 0, (seed, r.effects)
        assert r.sharpness[0, h] < r.sharpness[1].min(), (seed, r.sharpness)
        assert r.key_on_first > 0.9 and r.key_on_second < 0.4, (seed, r.key_on_first, r.key_on_second)
        assert r.effects[0, h] > 3 * r.effects[1].abs().max(), (seed, r.effects)
        assert r.short_without_key > r.short_loss + 0.2, (
            seed,
            r.short_loss,
            r.short_without_key,
        )  # the widget


def test_the_induction_heads_attention_depends_on_layer_0(runs):
    for seed, r in runs.items():
        before = r.induction[1].mean()
        assert r.induction_without_key.mean() < 0.9 * before, (seed, before, r.induction_without_key)
        assert r.induction_without_previous.mean() < 0.3 * before, (
            seed,
            before,
            r.induction_without_previous,
        )


# ---------------------------------------------------- going deeper: pruning heads in four orders


def test_greedy_pruning_beats_a_fixed_ranking_and_looks_lose(runs):
    for seed, r in runs.items():
        c = r.curves
        assert c["by looks"][4] > LOG_V, (seed, c["by looks"])
        assert sum(c["by effect"]) < sum(c["by looks"]), (seed, c)
        assert c["greedy"][4] < 1 and c["random"][4] > c["greedy"][4] + 0.4, (seed, c)
        assert all(g <= e + 1e-6 for g, e in zip(c["greedy"], c["by effect"])), (seed, c)


# --------------------------------- going deeper: the induction circuit, read from the weights


def test_k_composition_from_the_weights_ranks_the_previous_token_heads(runs):
    """Read from the weights alone, the layer-0 heads that key the induction heads are the previous-token heads."""
    baseline = random_composition_baseline(64, 16, generator=torch.Generator().manual_seed(0))  # 0.126
    taus = {}
    for seed, r in runs.items():
        k_into_layer_1 = r.composition["K"].mean(dim=1)  # (H,): each layer-0 head, averaged over layer 1
        taus[seed] = kendall_tau(k_into_layer_1, r.previous[0]).item()
        assert int(k_into_layer_1.argmin()) == int(r.previous[0].argmin()), (seed, k_into_layer_1, r.previous)
        # K-composition stands out; Q and V sit below what random matrices of the same shapes give.
        assert r.composition["K"].mean() > 1.8 * max(r.composition["Q"].mean(), r.composition["V"].mean()), (
            seed
        )
        assert k_into_layer_1.max() > 1.5 * baseline > 1.5 * r.composition["V"].mean(), (seed, k_into_layer_1)
    assert min(taus.values()) > 0.6 and sorted(taus.values())[1] == 1.0, (
        taus
    )  # the notebook says: 1 on all five


def test_patching_puts_the_behaviour_in_the_layer_1_heads(runs):
    for seed, r in runs.items():
        assert (r.recovered[1] > 0.33).all(), (seed, r.recovered)  # each alone brings back a third or more
        assert r.recovered[0].abs().max() < 0.33, (seed, r.recovered)  # a layer-0 head alone: less
        assert r.clean_minus_corrupted > 5, (seed, r.clean_minus_corrupted)


def test_the_induction_heads_copy_by_their_weights(runs):
    for seed, r in runs.items():
        assert (r.copying[1] > 0.95).all() and (r.own_logit_top[1] > 0.9).all(), (
            seed,
            r.copying,
            r.own_logit_top,
        )
        assert r.own_logit_top[1].min() > r.own_logit_top[0].max(), (seed, r.own_logit_top)
