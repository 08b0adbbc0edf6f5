"""attn_edu.report: bounds and spreads that print the same on every CPU."""

import math

import pytest
import torch

from attn_edu.report import below, claim, spread


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


def test_claim_prints_the_value_the_bound_and_the_verdict(capsys):
    claim("max |ours - torch|", torch.tensor(2.4e-7), below=1e-5)
    claim("ratio", 1.96, above=1.5, fmt=".2f")
    claim("share", 0.3125, above=0.2, below=0.4)
    assert capsys.readouterr().out.splitlines() == [
        "max |ours - torch| = 2.4e-07  ✓ below 1e-05",
        "ratio = 1.96  ✓ above 1.5",
        "share = 0.312  ✓ between 0.2 and 0.4",
    ]


@pytest.mark.parametrize(
    ("value", "bounds", "must"),
    [
        (1e-5, {"below": 1e-5}, "below 1e-05"),  # a bound is strict
        (math.nan, {"below": 1.0}, "below 1"),
        (math.nan, {"above": 0.0}, "above 0"),
        (0.5, {"above": 0.6, "below": 0.9}, "between 0.6 and 0.9"),
    ],
)
def test_claim_that_does_not_hold_raises_and_prints_nothing(capsys, value, bounds, must):
    with pytest.raises(AssertionError, match=f"err = .* does not hold: it must be {must}"):
        claim("err", value, **bounds)
    assert capsys.readouterr().out == ""


def test_claim_rejects_bad_arguments():
    with pytest.raises(ValueError, match="give the bound"):
        claim("err", 0.1)
    with pytest.raises(ValueError, match="above=2 must be less than below=1"):
        claim("err", 0.1, above=2, below=1)
    with pytest.raises(TypeError, match="what: expected a non-empty str"):
        claim("", 0.1, below=1)
    with pytest.raises(ValueError, match=r"value: expected a number or a one-element tensor"):
        claim("err", torch.zeros(3), below=1)


def test_the_notebook_sanitizer_masks_a_claims_digits_but_not_its_bound_or_verdict(capsys):
    """Two CPUs print different last digits of the measured value: the stored and the fresh line compare equal
    after nbval's sanitizer, and a changed bound or verdict does not."""
    import re
    from pathlib import Path

    from nbval.plugin import get_sanitize_patterns

    patterns = get_sanitize_patterns((Path(__file__).parent / "nbval_sanitize.cfg").read_text("utf-8"))

    def sanitized(text: str) -> str:
        for regex, replace in patterns:
            text = re.sub(regex, replace, text)
        return text

    claim("max |ours - torch|", 2.4e-7, below=1e-5)
    claim("max |ours - torch|", 1.2e-7, below=1e-5)
    claim("max |ours - torch|", 1.2e-7, below=1e-6)
    here, there, tighter = capsys.readouterr().out.splitlines()
    assert here != there and sanitized(here) == sanitized(there)
    assert sanitized(here) != sanitized(tighter)
