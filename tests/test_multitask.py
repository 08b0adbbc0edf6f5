"""The three toy tasks told by a prefix (T5) and by examples (in context): the data say what they should,
the shipped models score what their record says, and the claims of notebook 09 hold for every seed."""

from __future__ import annotations

import json

import pytest
import torch

from attn_edu.experiments import multitask
from attn_edu.experiments.multitask import (
    ICL_LENGTH,
    ICL_VOCAB,
    T5_LENGTH,
    T5_VOCAB,
    TASKS,
    answer_start,
    apply_task,
    few_shot_accuracy,
    few_shot_batch,
    load_models,
    read_record,
    save_models,
    text_to_text_batch,
    text_to_text_inputs,
    train_model,
)


def test_the_tasks_copy_reverse_and_sort_every_row() -> None:
    x = torch.randint(10, (30, 5), generator=torch.Generator().manual_seed(0))
    task = torch.arange(30) % 3
    out = apply_task(task, x)
    for row, t in enumerate(task.tolist()):
        expected = {
            "copy": x[row].tolist(),
            "reverse": x[row].tolist()[::-1],
            "sort": sorted(x[row].tolist()),
        }
        assert out[row].tolist() == expected[TASKS[t]]


@pytest.mark.parametrize(
    ("task", "x", "message"),
    [
        (torch.tensor([0, 1]), torch.zeros(3, 4, dtype=torch.long), "task, x"),
        (torch.tensor([3]), torch.zeros(1, 4, dtype=torch.long), "task"),
    ],
)
def test_bad_tasks_are_refused_by_name(task, x, message) -> None:
    with pytest.raises(ValueError, match=message):
        apply_task(task, x)


def test_a_text_to_text_batch_is_prefix_input_eos_and_a_shifted_target() -> None:
    batch = text_to_text_batch(torch.Generator().manual_seed(1), 64)
    prefixes = [T5_VOCAB.special_id(p) for p in multitask.PREFIXES]
    assert batch.source.shape == (64, T5_LENGTH + 2)
    assert batch.source[:, 0].tolist() == [prefixes[t] for t in batch.task.tolist()]
    assert (batch.source[:, -1] == T5_VOCAB.special_id("<eos>")).all()
    assert torch.equal(
        batch.target,
        T5_VOCAB.symbol_id(apply_task(batch.task, batch.source[:, 1:-1] - T5_VOCAB.symbol_id(0))),
    )
    assert (batch.decoder_input[:, 0] == T5_VOCAB.bos_id).all()
    assert torch.equal(batch.decoder_input[:, 1:], batch.target[:, :-1])
    assert set(batch.task.tolist()) == {0, 1, 2}
    with pytest.raises(ValueError, match="task"):
        text_to_text_inputs(torch.zeros(1, 6, dtype=torch.long), "rotate")
    with pytest.raises(ValueError, match="x"):
        text_to_text_inputs(torch.full((1, 6), 32), "copy")


def test_a_few_shot_sequence_holds_solved_examples_of_one_task_and_scores_only_the_answers() -> None:
    batch = few_shot_batch(torch.Generator().manual_seed(2), 16, examples=3)
    block = 2 * ICL_LENGTH + 2
    assert batch.input_ids.shape == (16, 1 + 3 * block)
    for k in range(3):
        start = 1 + k * block
        x = batch.input_ids[:, start : start + ICL_LENGTH] - ICL_VOCAB.symbol_id(0)
        answer = batch.input_ids[:, answer_start(k) : answer_start(k) + ICL_LENGTH]
        assert answer_start(k) == start + ICL_LENGTH + 1
        assert (batch.input_ids[:, answer_start(k) - 1] == ICL_VOCAB.sep_id).all()
        assert torch.equal(answer, ICL_VOCAB.symbol_id(apply_task(batch.task, x)))
    scored = batch.labels != -100
    assert scored.sum() == 16 * 3 * ICL_LENGTH
    assert torch.equal(batch.labels[scored], batch.input_ids[scored])


def test_training_is_seeded_and_a_saved_model_loads_as_its_float16_rounding(tmp_path) -> None:
    first, run = train_model("t5", 0, steps=3)
    again, rerun = train_model("t5", 0, steps=3)
    assert run.losses == rerun.losses
    path = save_models("t5", {0: first}, {"note": "test"}, tmp_path)
    assert path.name == "multitask_t5.safetensors"
    loaded = load_models("t5", tmp_path)[0]
    for (name, ours), theirs in zip(first.state_dict().items(), loaded.state_dict().values()):
        torch.testing.assert_close(theirs, ours.half().float(), rtol=0, atol=0, msg=name)
    assert read_record("t5", tmp_path)["note"] == "test"
    with pytest.raises(ValueError, match="kind"):
        train_model("bert", 0, steps=1)


@pytest.fixture(scope="module", params=["t5", "icl"])
def shipped(request):
    return request.param, load_models(request.param), read_record(request.param)


@pytest.mark.slow
def test_the_shipped_models_score_what_their_record_says(shipped) -> None:
    kind, models, record = shipped
    assert sorted(models) == [0, 1, 2] == record["seeds"]
    for seed, model in models.items():
        measured = json.loads(
            json.dumps(multitask.accuracy(kind, model))
        )  # int keys become strings, as stored
        stored = record["runs"][str(seed)]["accuracy"]
        assert _flat(measured).keys() == _flat(stored).keys()
        for key, value in _flat(stored).items():
            assert abs(_flat(measured)[key] - value) <= 0.01, (seed, key)


def _flat(scores: dict) -> dict:
    """{task: accuracy} as it is, {shots: {task: accuracy}} as {(shots, task): accuracy}."""
    return (
        {(k, t): v for k, row in scores.items() for t, v in row.items()}
        if isinstance(next(iter(scores.values())), dict)
        else scores
    )


def test_the_text_to_text_model_writes_every_task_right_from_its_prefix_for_every_seed() -> None:
    batch = text_to_text_batch(torch.Generator().manual_seed(77), 192)
    for seed, model in load_models("t5").items():
        scores = multitask.text_to_text_accuracy(model, batch)
        assert min(scores.values()) >= 0.95, (seed, scores)


def test_in_context_one_example_takes_the_model_from_a_guess_to_nearly_every_answer() -> None:
    batch = few_shot_batch(torch.Generator().manual_seed(78), 192)
    for seed, model in load_models("icl").items():
        by_shots = few_shot_accuracy(model, batch)
        assert 0.2 < by_shots[0]["all"] < 0.5, (seed, by_shots[0])  # about one task in three, guessed
        assert all(by_shots[k]["all"] > 0.9 for k in (1, 2, 3)), (seed, by_shots)
