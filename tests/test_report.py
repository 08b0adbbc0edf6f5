"""attn_edu.report: bounds and spreads that print the same on every CPU."""

import math

import pytest
import torch

from attn_edu.report import below, spread


def test_below_prints_the_bound_not_the_value():
    # Two values that differ in their last digits print the same text.
    assert below(2.4e-7, 1e-6) == below(1.2e-7, 1e-6) == below(0.0, 1e-6) == "< 1e-06"
    assert below(torch.tensor(3e-14, dtype=torch.float64), 1e-12) == "< 1e-12"
    assert below(0.36475, 0.4, fmt="g") == below(0.1, 0.4, fmt="g") == "< 0.4"  # a bound in plain notation


@pytest.mark.parametrize("value", [1e-6, 2e-3, math.inf, math.nan])
def test_below_fails_when_the_bound_does_not_hold(value):
    with pytest.raises(AssertionError, match="not below the bound 1e-06"):
        below(value, 1e-6)


def test_below_rejects_bad_arguments():
    with pytest.raises(ValueError, match="bound: expected a number > 0"):
        below(0.0, 0.0)
    with pytest.raises(
        ValueError, match=r"value: expected a number or a one-element tensor, got shape \(2,\)"
    ):
        below(torch.zeros(2), 1e-6)
    with pytest.raises(TypeError, match="value: expected a number, got str"):
        below("0.1", 1e-6)


def test_spread_orders_and_counts():
    text = spread([torch.tensor(1.08), 0.96, 1.02, 5.0], digits=2)
    assert text == "0.96–5.00 (median 1.05, 4 runs)"


def test_spread_rejects_bad_input():
    with pytest.raises(ValueError, match="at least one number"):
        spread([])
    with pytest.raises(ValueError, match="got a NaN"):
        spread([1.0, math.nan])
    with pytest.raises(ValueError, match="digits: expected an int >= 0"):
        spread([1.0], digits=-1)
