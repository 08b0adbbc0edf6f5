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

import time
from collections.abc import Callable
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


__all__ = ["CLOCKS", "best_time", "best_time_and_result", "times_and_result"]
