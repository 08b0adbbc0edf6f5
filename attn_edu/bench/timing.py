"""One timer for the course: the fastest of a few runs of a function (or every run's time, for a spread).

Why the fastest, not the mean: on a shared machine other work only ever *adds* time, so the
minimum is the closest to what the code itself costs. Two clocks:

- ``clock="wall"`` (:func:`time.perf_counter`): elapsed time, what a user waits for.
- ``clock="cpu"`` (:func:`time.thread_time`): CPU seconds of the calling thread only, so other
  programs on the machine do not count, and neither does sleeping or waiting. Work that torch hands
  to its other threads does not count either: pass ``threads=1`` with it.

``threads=N`` runs every repetition on ``N`` torch threads and restores the caller's thread count
afterwards, even when the function raises.

The notebooks and the CPU benchmarks use this module; GPU timings use ``triton.testing.do_bench``
(:func:`attn_edu.bench.flash.time_ms`), which synchronises the device and clears the cache itself.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

CLOCKS: dict[str, Callable[[], float]] = {
    "wall": time.perf_counter,  # elapsed seconds
    "cpu": time.thread_time,  # CPU seconds of the calling thread
}


def best_time_and_result(
    fn: Callable[..., Any],
    *args: Any,
    repeats: int = 3,
    clock: Literal["wall", "cpu"] = "wall",
    threads: int | None = None,
    slow_run_s: float | None = None,
    **kwargs: Any,
) -> tuple[float, Any]:
    """:func:`best_time`, and the result of the last run of ``fn`` (to check what was timed).

    ``slow_run_s``: a run that takes longer than this many seconds is not repeated (a long run is
    already a steady measurement, and repeating it costs the most).

    Example:
        >>> seconds, total = best_time_and_result(sum, range(1000), repeats=2)
        >>> total, seconds >= 0
        (499500, True)
    """
    times, result = times_and_result(
        fn, *args, repeats=repeats, clock=clock, threads=threads, slow_run_s=slow_run_s, **kwargs
    )
    return min(times), result


def times_and_result(
    fn: Callable[..., Any],
    *args: Any,
    repeats: int = 3,
    clock: Literal["wall", "cpu"] = "wall",
    threads: int | None = None,
    slow_run_s: float | None = None,
    **kwargs: Any,
) -> tuple[list[float], Any]:
    """Seconds of every run, in order, and the result of the last: for a median and a spread.

    Arguments as :func:`best_time`.

    Example:
        >>> times, total = times_and_result(sum, range(1000), repeats=3)
        >>> len(times), total, min(times) >= 0
        (3, 499500, True)
    """
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats: expected an integer >= 1, got {repeats!r}")
    if clock not in CLOCKS:
        raise ValueError(f"clock: expected one of {', '.join(map(repr, CLOCKS))}, got {clock!r}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ValueError(f"threads: expected None or an integer >= 1, got {threads!r}")
    if slow_run_s is not None and not slow_run_s > 0:
        raise ValueError(f"slow_run_s: expected None or a number of seconds > 0, got {slow_run_s!r}")
    now = CLOCKS[clock]

    previous_threads = None
    if threads is not None:
        import torch  # only when asked: the timer itself needs no torch

        previous_threads = torch.get_num_threads()
        torch.set_num_threads(threads)
    try:
        times: list[float] = []
        result = None
        for _ in range(repeats):
            start = now()
            result = fn(*args, **kwargs)
            times.append(now() - start)
            if slow_run_s is not None and times[-1] > slow_run_s:
                break
    finally:
        if previous_threads is not None:
            torch.set_num_threads(previous_threads)  # the caller's setting, whatever happened
    return times, result


def best_time(
    fn: Callable[..., Any],
    *args: Any,
    repeats: int = 3,
    clock: Literal["wall", "cpu"] = "wall",
    threads: int | None = None,
    slow_run_s: float | None = None,
    **kwargs: Any,
) -> float:
    """Seconds taken by the fastest of ``repeats`` runs of ``fn(*args, **kwargs)``.

    Args:
        fn: the function to time; ``args`` and ``kwargs`` are passed to it (so ``fn`` itself cannot
            take keyword arguments named ``repeats``, ``clock``, ``threads`` or ``slow_run_s``).
        repeats: how many runs, at least 1.
        clock: ``"wall"`` (elapsed time) or ``"cpu"`` (CPU time of the calling thread; combine with
            ``threads=1``, since torch's other threads are not counted).
        threads: torch threads during the runs (``None``: leave the setting alone); the caller's
            count is restored afterwards, also when ``fn`` raises.
        slow_run_s: stop repeating after a run slower than this many seconds.

    A bad argument raises a ``ValueError`` that names it. To keep the result as well, use
    :func:`best_time_and_result`.

    Example:
        >>> seconds = best_time(sorted, list(range(1000, 0, -1)), repeats=5, clock="cpu")
        >>> 0 <= seconds < 1
        True
        >>> best_time(sorted, [], clock="gpu")
        Traceback (most recent call last):
        ...
        ValueError: clock: expected one of 'wall', 'cpu', got 'gpu'
    """
    return best_time_and_result(
        fn, *args, repeats=repeats, clock=clock, threads=threads, slow_run_s=slow_run_s, **kwargs
    )[0]


def slower_from(sizes: Sequence[float], times: Sequence[float], *, than: Sequence[float]) -> float:
    """The size from which ``times`` exceed ``than`` at every larger size measured: where one curve overtakes.

    Both are times measured at the same increasing ``sizes``. Between the last size where ``times`` was not
    the slower and the next, the crossing is interpolated on log-log axes, where a power law (``a n²``
    against ``b n``) is a straight line, so two power laws cross exactly where the result says. Returns
    ``sizes[0]`` when ``times`` is the slower at every size, and ``math.inf`` when it is not the slower at the
    largest size (it never overtook, as far as was measured).

    Example:
        >>> n = [16, 32, 64, 128, 256]
        >>> slower_from(n, [x * x for x in n], than=[100 * x for x in n])    # n² passes 100 n at n = 100
        100.0
        >>> slower_from(n, [1.0] * 5, than=[2.0] * 5)
        inf
    """
    if not (len(sizes) == len(times) == len(than)) or not sizes:
        raise ValueError(
            "sizes, times, than: expected equal non-empty lengths, "
            f"got {len(sizes)}, {len(times)}, {len(than)}"
        )
    if any(not (value > 0) for value in (*sizes, *times, *than)):
        raise ValueError("sizes, times, than: expected positive numbers (they are compared on log axes)")
    if any(b <= a for a, b in zip(sizes, sizes[1:])):
        raise ValueError(f"sizes: expected increasing sizes, got {list(sizes)}")
    j = len(sizes)
    while j > 0 and times[j - 1] > than[j - 1]:
        j -= 1  # sizes[j:] are the trailing run where `times` is the slower
    if j == len(sizes):
        return math.inf
    if j == 0:
        return float(sizes[0])
    below = math.log(than[j - 1] / times[j - 1])  # >= 0: how far `times` was under at sizes[j - 1]
    above = math.log(times[j] / than[j])  # > 0: how far over at sizes[j]
    step = math.log(sizes[j] / sizes[j - 1])
    return float(sizes[j - 1] * math.exp(step * below / (below + above)))


__all__ = ["CLOCKS", "best_time", "best_time_and_result", "slower_from", "times_and_result"]
