"""The course's one timer: the fastest run, the right clock, torch's thread count left as it was."""

from __future__ import annotations

import time

import pytest
import torch

from attn_edu.bench import timing
from attn_edu.bench.timing import best_time, best_time_and_result, times_and_result


class FakeClock:
    """A clock that only moves when a timed call says so: durations are exact, whatever the machine."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def run_for(self, seconds: float) -> float:
        self.now += seconds
        return seconds


@pytest.fixture
def fake_clock(monkeypatch) -> FakeClock:
    clock = FakeClock()
    monkeypatch.setitem(timing.CLOCKS, "wall", clock)
    return clock


# Durations that are sums of powers of two: the fake clock adds them up exactly.
@pytest.mark.parametrize("durations", [[3.0, 2.0, 1.0], [1.0, 3.0, 2.0], [2.0, 2.0, 5.0, 0.25, 4.0]])
def test_returns_the_fastest_run(fake_clock, durations):
    remaining = list(durations)
    seconds = best_time(lambda: fake_clock.run_for(remaining.pop(0)), repeats=len(durations))
    assert seconds == min(durations)
    assert remaining == []  # every repetition ran


def test_passes_arguments_and_returns_the_last_result(fake_clock):
    calls = []

    def fn(a, b, *, c):
        calls.append((a, b, c))
        fake_clock.run_for(0.1 * len(calls))
        return len(calls)

    seconds, result = best_time_and_result(fn, 1, 2, c=3, repeats=4)
    assert calls == [(1, 2, 3)] * 4
    assert result == 4 and seconds == pytest.approx(0.1)  # the first, shortest run


def test_every_run_is_kept_in_order(fake_clock):
    durations = [2.0, 0.5, 4.0, 1.0]
    remaining = list(durations)
    times, result = times_and_result(lambda: fake_clock.run_for(remaining.pop(0)), repeats=4)
    assert times == durations and result == 1.0  # every run, in order; the last run's result
    times, _ = times_and_result(lambda: fake_clock.run_for(3.0), repeats=5, slow_run_s=2.0)
    assert times == [3.0]  # a slow run is not repeated here either


def test_a_slow_run_is_not_repeated(fake_clock):
    runs = []
    seconds = best_time(lambda: runs.append(fake_clock.run_for(5.0)), repeats=3, slow_run_s=2.0)
    assert len(runs) == 1 and seconds == 5.0


def test_real_wall_clock_is_never_below_the_shortest_sleep():
    lengths = [0.03, 0.02, 0.01]  # decreasing: the last run is the fastest
    remaining = list(lengths)
    seconds = best_time(lambda: time.sleep(remaining.pop(0)), repeats=3)
    assert min(lengths) - 1e-4 <= seconds < max(lengths) + 0.5  # a busy machine only adds time


def test_cpu_clock_does_not_count_waiting():
    wall = best_time(time.sleep, 0.05, repeats=1)
    cpu = best_time(time.sleep, 0.05, repeats=1, clock="cpu")
    assert wall >= 0.05 and cpu < 0.02  # sleeping uses no CPU time of this thread


def test_threads_are_set_during_the_runs_and_restored():
    before = torch.get_num_threads()
    wanted = 1 if before > 1 else 2
    seen = []
    best_time(lambda: seen.append(torch.get_num_threads()), repeats=2, threads=wanted)
    assert seen == [wanted, wanted]
    assert torch.get_num_threads() == before


def test_threads_are_restored_when_fn_raises():
    before = torch.get_num_threads()
    wanted = 1 if before > 1 else 2

    def fails():
        assert torch.get_num_threads() == wanted
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        best_time(fails, threads=wanted)
    assert torch.get_num_threads() == before


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"repeats": 0}, r"repeats: expected an integer >= 1, got 0"),
        ({"repeats": 2.5}, r"repeats: expected an integer >= 1, got 2.5"),
        ({"repeats": True}, r"repeats: expected an integer >= 1, got True"),
        ({"clock": "gpu"}, r"clock: expected one of 'wall', 'cpu', got 'gpu'"),
        ({"threads": 0}, r"threads: expected None or an integer >= 1, got 0"),
        ({"slow_run_s": 0}, r"slow_run_s: expected None or a number of seconds > 0, got 0"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs, match):
    calls = []
    with pytest.raises(ValueError, match=match):
        best_time(calls.append, 1, **kwargs)
    assert calls == []  # refused before running anything


# ---------------------------------------------------------------------------------------------------
# slower_from: where one curve of times overtakes another
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("a", "b"), [(1.0, 100.0), (2e-9, 3e-6), (0.5, 7.0)])
def test_slower_from_finds_where_two_power_laws_cross(a, b):
    sizes = [2**k for k in range(1, 14)]
    quadratic, linear = [a * n * n for n in sizes], [b * n for n in sizes]  # equal at n = b / a
    assert timing.slower_from(sizes, quadratic, than=linear) == pytest.approx(b / a, rel=1e-9)
    # the other way round: the linear curve is the slower one only below the crossing, never at the end
    assert timing.slower_from(sizes, linear, than=quadratic) == float("inf")


def test_slower_from_counts_only_the_trailing_run_where_a_curve_is_slower():
    sizes = [1, 2, 4, 8, 16]
    times = [3.0, 1.0, 1.0, 3.0, 3.0]  # slower at the first size, faster, then slower again from 4 to 8
    than = [2.0, 2.0, 2.0, 2.0, 2.0]
    crossing = timing.slower_from(sizes, times, than=than)
    assert 4 < crossing < 8
    assert timing.slower_from(sizes, [5.0] * 5, than=than) == 1.0  # slower at every size


@pytest.mark.parametrize(
    ("sizes", "times", "than", "match"),
    [
        ([1, 2], [1.0], [1.0, 2.0], "equal non-empty lengths"),
        ([], [], [], "equal non-empty lengths"),
        ([1, 2], [1.0, 0.0], [1.0, 2.0], "positive numbers"),
        ([2, 1], [1.0, 2.0], [1.0, 2.0], "increasing sizes"),
    ],
)
def test_slower_from_rejects_bad_input(sizes, times, than, match):
    with pytest.raises(ValueError, match=match):
        timing.slower_from(sizes, times, than=than)
