"""--budget parsing: bytes, decimal and binary units, percentages; one-line errors."""

from __future__ import annotations

import pytest

from hgraph.common.errors import HGraphError
from hgraph.common.formatting import format_bytes
from planner.budget import Budget, parse_budget


@pytest.mark.parametrize("text, expected", [
    ("4000000000", 4_000_000_000), ("1e9", 10**9), ("2.5e9", 2_500_000_000),
    ("1.5GB", 1_500_000_000), ("1.5 gb", 1_500_000_000), ("800MB", 800_000_000),
    ("800MiB", 800 * 2**20), ("2GiB", 2 * 2**30), ("64kB", 64_000), ("512KiB", 512 * 1024),
    ("3TB", 3 * 10**12), ("1.1GB", 1_100_000_000), ("100B", 100), ("1", 1), (12345, 12345),
])
def test_absolute_budgets(text, expected):
    assert parse_budget(text) == expected


def test_percentages_need_and_use_the_baseline():
    assert parse_budget("60%", baseline=1000) == 600
    assert parse_budget("33.3%", baseline=1000) == 333
    assert parse_budget("150%", baseline=10) == 15
    b = Budget.parse("60%")
    assert b.is_relative and not Budget.parse("1GB").is_relative
    with pytest.raises(HGraphError, match="baseline"):
        b.resolve(None)


def test_budgets_resolve_exactly_as_fractions_read_them():
    """The budget's arithmetic is exact decimal arithmetic (no float rounding), done without
    importing fractions: every value agrees with Fraction's, exponents and odd digits included."""
    import random
    from fractions import Fraction

    rng = random.Random(7)
    texts = ["1.1", ".5", "2.5e-3", "7e+2", "1234567.891", "33.3", "1E9"]
    texts += [repr(rng.uniform(1e-9, 1e6)) for _ in range(300)]
    for text in texts:
        baseline = rng.randint(0, 10**13)
        want = int(baseline * Fraction(repr(float(text))) / 100)   # a percentage is a float
        assert parse_budget(f"{text}%", baseline=baseline) == want, text
        assert parse_budget(f"{text}GiB") == int(Fraction(text) * 2**30), text


@pytest.mark.parametrize("text, fragment", [
    ("", "expected bytes"), ("abc", "expected bytes"), ("-5", "cannot be negative"),
    ("1.5XB", "unknown unit 'XB'"), ("0%", "must be positive"), ("-10%", "cannot be negative"),
    ("-5GB", "cannot be negative"), ("0.5", "did you mean 50%?"), ("0.25", "did you mean 25%?"),
    ("1e-1", "did you mean 10%?"), ("0", "0 bytes fits nothing"),
    ("1e400", "finite"), ("10 %%", "expected bytes"), ("1e30", "2^63"), (True, "expected bytes"),
    ("GB", "expected bytes"), ("1.2.3GB", "expected bytes"),
])
def test_bad_budgets_are_one_line_errors(text, fragment):
    with pytest.raises(HGraphError) as info:
        parse_budget(text, baseline=100)
    message = str(info.value)
    assert fragment in message and "\n" not in message and "--budget" in message


def test_format_bytes():
    assert format_bytes(3 * 2**30) == "3.00 GiB"
    assert format_bytes(512) == "512 B"
