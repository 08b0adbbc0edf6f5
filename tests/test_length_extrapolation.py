"""The lag-task experiment of notebook 06: the model is causal, each scheme's forward pass equals torch's SDPA
(or Shaw's equations written as loops), the loss and the accuracy score what they say, and the bag-of-words
limit equals a count done by hand."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attn_edu.experiments.length_extrapolation import (
    SCHEMES,
    LagConfig,
    LagModel,
    accuracy_by_position,
    bag_of_words_accuracy,
    lag_batch,
    lag_loss,
    run_length_test,
    train_lag_model,
)
from attn_edu.positional import alibi_bias, sinusoidal_encoding


def random_ids(B: int, T: int, seed: int = 0, V: int = 16) -> torch.Tensor:
    return lag_batch(torch.Generator().manual_seed(seed), T, B, vocab_size=V)  # (B, T)


def model_for(scheme: str, seed: int = 0) -> LagModel:
    torch.manual_seed(seed)
    model = LagModel(scheme).eval()
    for parameter in model.parameters():  # larger weights than at init, so that every term matters
        nn.init.normal_(parameter, std=0.5)
    return model


def heads(x: torch.Tensor, H: int) -> torch.Tensor:
    B, T, C = x.shape
    return x.view(B, T, H, C // H).transpose(1, 2)  # (B, H, T, D)


# ---------------------------------------------------------------- the model


@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_scheme_is_causal(scheme):
    model = model_for(scheme)
    ids = random_ids(3, 16)
    changed = ids.clone()
    changed[:, 9:] = (changed[:, 9:] + 1) % 16  # change every token from position 9 on
    with torch.no_grad():
        before, after = model(ids), model(changed)  # (B, T, V)
    torch.testing.assert_close(before[:, :9], after[:, :9])
    assert (before[:, 9:] - after[:, 9:]).abs().max() > 1e-3


@pytest.mark.parametrize("scheme", ["nope", "sinusoidal", "learned", "t5", "alibi"])
def test_forward_equals_torch_sdpa_with_the_scheme_written_out(scheme):
    model = model_for(scheme)
    config = model.config
    B, T, H, C = 2, 16 if scheme == "learned" else 21, config.num_heads, config.embed_dim
    ids = random_ids(B, T, seed=1)
    with torch.no_grad():
        x = model.tokens(ids)  # (B, T, C)
        if scheme == "sinusoidal":
            x = x + sinusoidal_encoding(T, C)
        if scheme == "learned":
            x = x + model.positions.embedding.weight[:T]
        q, k, v = heads(model.q_proj(x), H), heads(model.k_proj(x), H), heads(model.v_proj(x), H)
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        bias = torch.zeros(H, T, T)
        if scheme == "alibi":
            bias = alibi_bias(H, T)
        if scheme == "t5":
            bias = model.relative(T, T)[0]  # (H, T, S)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.masked_fill(~causal, -math.inf))
        expected = model.readout(out.transpose(1, 2).reshape(B, T, C))  # (B, T, V)
        torch.testing.assert_close(model(ids), expected, rtol=1e-5, atol=1e-5)


def test_shaw_forward_equals_the_papers_equations_as_loops():
    model = model_for("shaw")
    H, C = model.config.num_heads, model.config.embed_dim
    D, k_max = C // H, model.config.shaw_max_distance
    ids = random_ids(1, 9, seed=2)
    with torch.no_grad():
        x = model.tokens(ids)[0]  # (T, C)
        q, k, v = model.q_proj(x), model.k_proj(x), model.v_proj(x)  # (T, C)
        a_k, a_v = model.relative.key_embedding.weight, model.relative.value_embedding.weight  # (2k + 1, D)
        z = torch.zeros(9, C)
        for h in range(H):
            cols = slice(h * D, (h + 1) * D)
            for i in range(9):
                clip = [max(-k_max, min(k_max, j - i)) + k_max for j in range(i + 1)]
                e = torch.stack([q[i, cols] @ (k[j, cols] + a_k[clip[j]]) for j in range(i + 1)]) / math.sqrt(
                    D
                )
                w = torch.softmax(e, dim=0)
                z[i, cols] = sum(w[j] * (v[j, cols] + a_v[clip[j]]) for j in range(i + 1))
        torch.testing.assert_close(model(ids)[0], model.readout(z), rtol=1e-5, atol=1e-5)


def test_nope_sees_the_earlier_tokens_as_a_bag():
    ids = random_ids(4, 12, seed=3)
    shuffled = torch.cat(
        [ids[:, :-1][:, torch.randperm(11, generator=torch.Generator().manual_seed(0))], ids[:, -1:]], 1
    )
    with torch.no_grad():
        nope, sinusoidal = model_for("nope"), model_for("sinusoidal")
        torch.testing.assert_close(nope(ids)[:, -1], nope(shuffled)[:, -1])  # the last query cannot tell
        assert (sinusoidal(ids)[:, -1] - sinusoidal(shuffled)[:, -1]).abs().max() > 1e-3


def test_learned_positions_stop_at_the_training_length_and_others_run_past_it():
    ids = random_ids(1, 17)
    with pytest.raises(ValueError, match="past max_len=16"):
        LagModel("learned")(ids)
    for scheme in ("nope", "sinusoidal", "shaw", "t5", "alibi"):
        assert LagModel(scheme)(random_ids(1, 70)).shape == (1, 70, 16)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="scheme: expected one of"):
        LagModel("rope")
    with pytest.raises(ValueError, match="embed_dim: expected a multiple of num_heads=3"):
        LagConfig(num_heads=3)
    with pytest.raises(ValueError, match="lag: expected fewer than train_length=16"):
        LagConfig(lag=16)
    with pytest.raises(ValueError, match=r"ids: expected ids in 0 .. 15"):
        LagModel("nope")(torch.tensor([[3, 16]]))
    with pytest.raises(ValueError, match="length"):
        lag_batch(torch.Generator(), 0)


# ---------------------------------------------------------------- loss, accuracy and the bag-of-words limit


class Oracle(nn.Module):
    """Logits that put everything on the token ``lag`` back (or on token 0 where there is none)."""

    def __init__(self, config: LagConfig, wrong: bool = False) -> None:
        super().__init__()
        self.config, self.wrong = config, wrong

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        answer = torch.cat(
            [torch.zeros_like(ids[:, : self.config.lag]), ids[:, : -self.config.lag]], 1
        )  # (B, T)
        answer = (answer + 1) % self.config.vocab_size if self.wrong else answer
        return 50.0 * F.one_hot(answer, self.config.vocab_size).float()  # (B, T, V)


def test_the_loss_is_zero_for_the_right_answer_and_log_v_for_uniform_logits():
    config = LagConfig()
    ids = random_ids(8, 16)
    assert lag_loss(Oracle(config), ids).item() < 1e-6
    assert lag_loss(Oracle(config, wrong=True), ids).item() > 40
    uniform = LagModel("nope")
    with torch.no_grad():
        for parameter in uniform.readout.parameters():
            parameter.zero_()  # every logit 0
    assert lag_loss(uniform, ids).item() == pytest.approx(math.log(16))


def test_accuracy_by_position_scores_each_position_and_leaves_the_first_lag_empty():
    config = LagConfig()
    right = accuracy_by_position(Oracle(config), 40)
    assert right[:3].isnan().all() and (right[3:] == 1).all()
    assert (accuracy_by_position(Oracle(config, wrong=True), 40)[3:] == 0).all()
    always_zero = LagModel("nope")
    with torch.no_grad():
        always_zero.readout.weight.zero_()
        always_zero.readout.bias.copy_(torch.arange(16.0).flip(0))  # token 0 has the largest logit
    ids = lag_batch(torch.Generator().manual_seed(1234), 40, 256)  # the fixed test batch
    torch.testing.assert_close(
        accuracy_by_position(always_zero, 40)[3:], (ids[:, :-3] == 0).float().mean(0)
    )  # how often the answer happens to be 0


def test_bag_of_words_accuracy_equals_a_count_by_hand():
    ids = random_ids(50, 20, seed=4, V=5)
    expected = [
        sum(Counter(row[:t]).most_common(1)[0][1] / t for row in ids.tolist()) / 50 for t in range(2, 20)
    ]
    result = bag_of_words_accuracy(ids, lag=2, vocab_size=5)
    assert result[:2].isnan().all()
    torch.testing.assert_close(result[2:], torch.tensor(expected, dtype=torch.float64))
    with pytest.raises(ValueError, match="ids: expected integer token ids"):
        bag_of_words_accuracy(ids.float(), lag=2, vocab_size=5)


# ---------------------------------------------------------------- training


def test_training_is_repeatable_and_shaw_learns_the_lag_for_every_length():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in the notebook: one thread is faster for tensors this small
    try:
        model, result = train_lag_model("shaw", seed=0)
        again, _ = train_lag_model("shaw", seed=0)
    finally:
        torch.set_num_threads(threads)
    for a, b in zip(model.parameters(), again.parameters()):
        assert torch.equal(a, b)
    assert result.steps == 150 and not model.training
    assert accuracy_by_position(model, 64)[3:].min() > 0.9  # trained on 16 tokens, right on 64


def test_run_length_test_equals_each_scheme_trained_and_scored_alone():
    config = LagConfig(train_length=8, embed_dim=8, num_heads=2)
    threads = torch.get_num_threads()
    models, accuracy = run_length_test((0, 3), config=config, steps=3, test_factor=2)
    assert torch.get_num_threads() == threads  # the thread count is restored
    assert set(models) == {(scheme, seed) for scheme in SCHEMES for seed in (0, 3)}
    torch.set_num_threads(1)
    try:
        for scheme in SCHEMES:
            length = 8 if scheme == "learned" else 16  # no rows past the training length in a learned table
            assert accuracy[scheme].shape == (2, length)
            for row, seed in enumerate((0, 3)):
                alone, _ = train_lag_model(scheme, seed=seed, steps=3, config=config)
                for a, b in zip(alone.parameters(), models[scheme, seed].parameters()):
                    assert torch.equal(a, b)
                expected = accuracy_by_position(alone, length)
                assert torch.equal(accuracy[scheme][row].isnan(), expected.isnan())
                assert torch.equal(accuracy[scheme][row][3:], expected[3:])
    finally:
        torch.set_num_threads(threads)


def test_run_length_test_rejects_no_seeds_and_a_bad_factor():
    with pytest.raises(ValueError, match="seeds"):
        run_length_test(())
    with pytest.raises(ValueError, match="test_factor"):
        run_length_test((0,), test_factor=0)


def test_the_shipped_models_are_runs_of_the_recipe_and_score_as_recorded():
    """Notebook 06 loads these 18 models instead of training them: each is what `run_length_test`'s recipe
    trains (one retrained here, weight for weight), and they score what the record says."""
    from attn_edu.experiments import length_extrapolation as le

    models, accuracy = le.load_length_test()
    record = le.shipped.read_record(le.NAME)
    assert set(models) == {(scheme, seed) for scheme in SCHEMES for seed in le.SEEDS}
    assert (record["seeds"], record["steps"], record["test_factor"]) == (
        list(le.SEEDS),
        le.STEPS,
        le.TEST_FACTOR,
    )
    live = le.summary(accuracy, LagConfig())
    for scheme, recorded in record["accuracy"].items():
        for where in ("inside", "beyond"):
            assert live[scheme][where] == pytest.approx(recorded[where], abs=2 / 256)  # a sequence or two
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the recipe trains
    try:
        again, _ = train_lag_model("t5", seed=1, steps=le.STEPS)
    finally:
        torch.set_num_threads(threads)
    for name, tensor in again.state_dict().items():
        torch.testing.assert_close(models["t5", 1].state_dict()[name], tensor, rtol=1e-4, atol=1e-5)


def test_the_command_trains_writes_and_reports(tmp_path, capsys):
    from attn_edu.experiments import length_extrapolation as le

    assert le.main(["train", "--seeds", "5", "--steps", "2", "--out", str(tmp_path)]) == 0
    assert le.main(["report", "--dir", str(tmp_path)]) == 0
    report = capsys.readouterr().out.splitlines()[-7:]
    assert report[0].startswith("scheme") and [line.split()[0] for line in report[1:]] == list(SCHEMES)
    models, accuracy = le.load_length_test(tmp_path)
    assert set(models) == {(scheme, 5) for scheme in SCHEMES} and accuracy["shaw"].shape == (1, 64)
