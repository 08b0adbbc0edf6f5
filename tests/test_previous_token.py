"""attn_edu.experiments.previous_token: separate maps learn the previous-token pattern, no tied map gets its loss
below the circulant optimum (itself above log 3), and the optimum is what tied training reaches."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attn_edu.attention import attention_weights
from attn_edu.experiments.previous_token import (
    best_tied_run,
    circulant,
    previous_token_loss,
    train_previous_token,
)

T, C = 6, 8


def tokens(seed: int) -> torch.Tensor:
    return torch.randn(T, C, generator=torch.Generator().manual_seed(seed))  # (T, C): distinct tokens


@pytest.fixture(scope="module")
def best():
    return best_tied_run(T)


def test_the_loss_is_the_cross_entropy_against_the_previous_token():
    scores = torch.randn(3, T, T, generator=torch.Generator().manual_seed(0))  # (B, T, T)
    previous = torch.roll(torch.arange(T), 1).expand(3, T)  # (B, T)
    by_torch = F.cross_entropy(scores.transpose(1, 2), previous, reduction="none").mean(dim=-1)  # (B,)
    torch.testing.assert_close(previous_token_loss(scores), by_torch)
    assert previous_token_loss(torch.zeros(T, T)).item() == pytest.approx(math.log(T))
    huge = torch.full((T, T), -1e4).fill_diagonal_(0.0)  # every token on itself: e^-10000 on the previous one
    assert previous_token_loss(huge).item() == pytest.approx(1e4)  # finite, though the weight underflows


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_separate_maps_learn_the_pattern_and_tied_maps_reach_the_circulant_optimum(seed, best):
    x = tokens(seed)
    separate = train_previous_token(x, tied=False)
    previous = torch.roll(torch.arange(T), 1)
    assert separate.loss < 0.01 and (separate.weights.argmax(dim=-1) == previous).all()
    tied = train_previous_token(x, tied=True)
    torch.testing.assert_close(tied.scores, tied.scores.T)  # q_t · q_s: symmetric
    assert math.log(3) < best.loss <= tied.loss < best.loss + 1e-3
    following = torch.roll(torch.arange(T), -1)
    w = tied.weights
    assert (w[torch.arange(T), previous] - w[torch.arange(T), following]).abs().max() < 0.01
    torch.testing.assert_close(w.sum(dim=-1), torch.ones(T))


def test_the_seed_fixes_the_starting_map():
    """With a learning rate of 0 the run keeps the map that the seed drew: the same W_Q for tied and separate."""
    x = tokens(3)
    q_weights = train_previous_token(x, tied=True, steps=1, lr=0.0).scores
    torch.manual_seed(1)
    w = torch.nn.Linear(C, C, bias=False)
    with torch.no_grad():
        torch.testing.assert_close(q_weights.softmax(dim=-1), attention_weights(w(x), w(x)))


def test_the_optimum_is_a_circulant_gram_matrix_with_equal_neighbours(best):
    scores = best.scores
    torch.testing.assert_close(scores, circulant(scores[0]))
    torch.testing.assert_close(scores, scores.T)
    assert torch.linalg.eigvalsh(scores).min() > -1e-9  # positive semidefinite: a tied map's scores
    w = best.weights[0]  # (T,): every row is this one, shifted
    assert w[T - 1] == pytest.approx(w[1]) and w[0] >= w[1]  # previous = next <= itself
    assert w[T - 1] <= 1 / 3


def test_no_tied_map_beats_the_optimum(best):
    """Random Gram matrices of every scale and rank, and a shrinking spiral that sends tokens 1 to 4 to their
    predecessors: each individual token may read its predecessor, the mean loss stays above the optimum."""
    generator = torch.Generator().manual_seed(0)
    for rank in (1, 2, 4, 8):
        for scale in (0.1, 1.0, 10.0, 100.0):
            g = scale * torch.randn(200, T, rank, generator=generator, dtype=torch.float64)  # (N, T, r)
            assert previous_token_loss(g @ g.transpose(1, 2)).min() >= best.loss - 1e-9
    t = torch.arange(T, dtype=torch.float64)
    spiral = (
        200 * 0.4 ** t[:, None] * torch.stack([torch.cos(t * math.pi / 3), torch.sin(t * math.pi / 3)], 1)
    )
    scores = spiral @ spiral.T / math.sqrt(2)  # (T, T)
    w = scores.softmax(dim=-1)
    previous = torch.roll(torch.arange(T), 1)
    assert (w[1:5].argmax(dim=-1) == previous[1:5]).all() and w[torch.arange(1, 5), previous[1:5]].min() > 0.9
    assert previous_token_loss(scores) > best.loss


def test_averaging_over_the_relabellings_lowers_the_loss_to_a_circulant_that_the_optimum_beats():
    """The module's argument, step by step: the average of a Gram matrix over the cyclic relabellings is a
    circulant Gram matrix whose loss is no higher (convexity), and no lower than the optimum."""
    for length in (3, 5, 8):
        best = best_tied_run(length)
        assert math.log(3) <= best.loss <= math.log(length)
        generator = torch.Generator().manual_seed(length)
        shift = torch.arange(length)
        for _ in range(100):
            g = torch.randn(length, length, generator=generator, dtype=torch.float64)
            scores = g @ g.T  # (T, T): a tied map's scores
            averaged = torch.stack(
                [scores[(shift + k)[:, None] % length, (shift + k)[None, :] % length] for k in range(length)]
            ).mean(dim=0)  # (T, T): the mean over the T relabellings
            torch.testing.assert_close(averaged, circulant(averaged[0]))
            assert previous_token_loss(scores) >= previous_token_loss(averaged) - 1e-12
            assert previous_token_loss(averaged) >= best.loss - 1e-9


def test_circulant_shifts_each_row():
    assert circulant(torch.arange(4)).tolist() == [[0, 1, 2, 3], [3, 0, 1, 2], [2, 3, 0, 1], [1, 2, 3, 0]]


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: previous_token_loss(torch.zeros(3, 4)), r"scores: expected a square"),
        (lambda: train_previous_token(torch.zeros(6), tied=True), r"x: expected shape \(T, C\)"),
        (lambda: train_previous_token(tokens(0), tied=True, steps=0), r"steps"),
        (lambda: best_tied_run(2), r"T: expected at least 3"),
    ],
)
def test_bad_input_is_refused_by_name(call, match):
    with pytest.raises(ValueError, match=match):
        call()
