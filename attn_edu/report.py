"""Print measured numbers so that they read the same on every CPU.

Two float32 computations of the same thing agree only up to their last bits, and *which* last bits depends on
the CPU: AVX-512, AVX2 and ARM kernels add in different orders, and MKL picks its code path by processor. A
notebook that prints ``max |ours - torch| = 2.4e-07`` prints ``1.2e-07`` on the next machine. Print what does
not move instead:

* a measured number beside the **bound** that it is claimed to keep, and the verdict, in one line:
  ``claim("max |ours - torch|", err, below=1e-6)`` prints ``max |ours - torch| = 2.4e-07  ✓ below 1e-06`` and
  fails loudly if the bound does not hold. The learner sees the real magnitude; the notebook tests compare
  only the bound and the verdict (the digits before ``✓`` are masked by ``tests/nbval_sanitize.cfg``);
* the same bound as text, ``below(err, 1e-6)`` returns ``"< 1e-06"``, where a sentence needs it;
* the result of a tiny training run as a **spread over seeds**, ``spread([0.96, 1.02, 1.08])``, or as a claim
  checked for every seed (a single run's last digits are chaotic: training amplifies the last bits).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable

import torch


def _as_float(name: str, value: float | torch.Tensor) -> float:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(
                f"{name}: expected a number or a one-element tensor, got shape {tuple(value.shape)}"
            )
        value = value.item()
    if not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected a number, got {type(value).__name__}")
    return float(value)


def below(value: float | torch.Tensor, bound: float, *, fmt: str = ".0e") -> str:
    """Check ``value < bound`` and return ``"< bound"`` for printing; raise ``AssertionError`` otherwise.

    Use it for the size of a float difference, whose digits differ from CPU to CPU while the bound holds on all
    of them, or for a score whose claim is a bound (``fmt="g"`` prints ``0.4`` rather than ``4e-01``). A NaN
    never passes.

    Example:
        >>> err = abs(0.1 + 0.2 - 0.3)
        >>> f"max |a - b| {below(err, 1e-12)}"
        'max |a - b| < 1e-12'
        >>> below(torch.tensor(3e-7), 1e-6)
        '< 1e-06'
        >>> below(0.36, 0.4, fmt="g")
        '< 0.4'
        >>> below(2e-3, 1e-6)
        Traceback (most recent call last):
        ...
        AssertionError: 0.002 is not below the bound 1e-06
    """
    value = _as_float("value", value)
    bound = _as_float("bound", bound)
    if not bound > 0:
        raise ValueError(f"bound: expected a number > 0, got {bound!r}")
    if not value < bound:  # also False for NaN
        raise AssertionError(f"{value:.3g} is not below the bound {bound:{fmt}}")
    return f"< {bound:{fmt}}"


CHECK_MARK = "✓"


def claim(
    what: str,
    value: float | torch.Tensor,
    *,
    below: float | None = None,
    above: float | None = None,
    fmt: str = ".3g",
) -> None:
    """Print ``what = value  ✓ below b`` (or ``above a``, or ``between a and b``) after checking the claim.

    The line a learner reads holds the measured number, the bound it is claimed to keep and the verdict; a
    claim that does not hold raises ``AssertionError`` naming ``what``, the value and the bound, so a notebook
    never goes on past a broken claim. A NaN never passes. Give ``below``, ``above`` or both; the bounds print
    with ``:g``, the value with ``fmt``.

    Example:
        >>> claim("max |ours - torch|", 2.4e-7, below=1e-5)
        max |ours - torch| = 2.4e-07  ✓ below 1e-05
        >>> claim("loss ratio", torch.tensor(1.96), above=1.5)
        loss ratio = 1.96  ✓ above 1.5
        >>> claim("share on the first key", 0.312, above=0.2, below=0.4, fmt=".2f")
        share on the first key = 0.31  ✓ between 0.2 and 0.4
        >>> claim("error", 2e-3, below=1e-6)
        Traceback (most recent call last):
        ...
        AssertionError: error = 0.002 does not hold: it must be below 1e-06
    """
    if not isinstance(what, str) or not what:
        raise TypeError(f"what: expected a non-empty str naming the measured quantity, got {what!r}")
    number = _as_float("value", value)
    if below is None and above is None:
        raise ValueError("claim: give the bound it keeps, below=..., above=... or both")
    low = None if above is None else _as_float("above", above)
    high = None if below is None else _as_float("below", below)
    if low is not None and high is not None:
        if not low < high:
            raise ValueError(f"above={low:g} must be less than below={high:g}")
        bound = f"between {low:g} and {high:g}"
    elif high is not None:
        bound = f"below {high:g}"
    else:
        bound = f"above {low:g}"
    holds = not math.isnan(number) and (low is None or number > low) and (high is None or number < high)
    shown = f"{number:{fmt}}"
    if not holds:
        raise AssertionError(f"{what} = {shown} does not hold: it must be {bound}")
    print(f"{what} = {shown}  {CHECK_MARK} {bound}")


def spread(values: Iterable[float | torch.Tensor], digits: int = 3) -> str:
    """``"min–max (median m, n runs)"``: how far a measurement moves from seed to seed.

    Example:
        >>> spread([1.02, 0.96, 1.08])
        '0.960–1.080 (median 1.020, 3 runs)'
        >>> spread([0.5], digits=1)
        '0.5–0.5 (median 0.5, 1 run)'
    """
    numbers = [_as_float("values", v) for v in values]
    if not numbers:
        raise ValueError("values: expected at least one number, got none")
    if any(math.isnan(x) for x in numbers):
        raise ValueError(f"values: expected numbers, got a NaN in {numbers}")
    if not isinstance(digits, int) or digits < 0:
        raise ValueError(f"digits: expected an int >= 0, got {digits!r}")
    runs = f"{len(numbers)} run" + ("s" if len(numbers) != 1 else "")
    low, high, mid = min(numbers), max(numbers), statistics.median(numbers)
    return f"{low:.{digits}f}–{high:.{digits}f} (median {mid:.{digits}f}, {runs})"
