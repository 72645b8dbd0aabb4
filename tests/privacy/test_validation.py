"""The shared argument checks: what each accepts, what it refuses, and the one wording of its message."""

from __future__ import annotations

import math
import re
from fractions import Fraction

import numpy as np
import pytest

from dphypo.privacy.validation import (
    check_delta,
    check_int_at_least,
    check_non_negative,
    check_non_negative_int,
    check_positive,
    check_positive_int,
    check_probability,
    check_theta,
    is_integer,
    is_real,
)

HUGE = 10**400  # an int no float can hold


def test_is_integer_and_is_real_take_python_and_numpy_numbers_but_no_bool() -> None:
    assert all(is_integer(v) for v in (0, -3, np.int64(2), np.uint8(1), HUGE))
    assert not any(is_integer(v) for v in (True, False, np.bool_(True), 1.0, "1", None, np.array(1)))
    assert all(is_real(v) for v in (0, 1.5, np.float32(0.5), np.int32(3), math.nan, -math.inf, Fraction(1, 3)))
    assert not any(is_real(v) for v in (True, np.bool_(False), "1.0", None, 1j, np.array([1.0])))


@pytest.mark.parametrize("value", [1, 7, np.int64(3), HUGE])
def test_check_positive_int_accepts_integers_from_one(value: object) -> None:
    check_positive_int("repeats", value)


@pytest.mark.parametrize("value", [0, -1, 1.0, 2.5, True, "3", None, np.float64(2.0)])
def test_check_positive_int_refuses_with_the_name_and_the_value(value: object) -> None:
    with pytest.raises(ValueError, match=re.escape(f"repeats must be a positive integer, got {value!r}")):
        check_positive_int("repeats", value)


def test_optional_checks_take_none_and_say_so_when_refusing() -> None:
    for check in (check_positive_int, check_non_negative_int, check_positive, check_non_negative):
        check("x", None, optional=True)
    with pytest.raises(ValueError, match=re.escape("workers must be a positive integer or None, got 0")):
        check_positive_int("workers", 0, optional=True)
    with pytest.raises(ValueError, match=re.escape("seed must be a non-negative integer or None, got -1")):
        check_non_negative_int("seed", -1, optional=True)
    with pytest.raises(ValueError, match=re.escape("score_noise must be a finite number > 0 or None, got 0.0")):
        check_positive("score_noise", 0.0, optional=True)
    with pytest.raises(ValueError, match=re.escape("pure_epsilon must be a finite number >= 0 or None, got -1.0")):
        check_non_negative("pure_epsilon", -1.0, optional=True)


def test_check_non_negative_int_takes_zero_and_refuses_negatives_and_bools() -> None:
    check_non_negative_int("seed", 0)
    check_non_negative_int("seed", np.int32(5))
    for bad in (-1, False, 0.0, "0"):
        with pytest.raises(ValueError, match=re.escape(f"seed must be a non-negative integer, got {bad!r}")):
            check_non_negative_int("seed", bad)


def test_check_int_at_least_names_its_minimum() -> None:
    check_int_at_least("grid", 10, 10)
    check_int_at_least("steps", np.int64(1), 1)
    with pytest.raises(ValueError, match=re.escape("grid must be an integer >= 10, got 9")):
        check_int_at_least("grid", 9, 10)
    with pytest.raises(ValueError, match=re.escape("steps must be an integer >= 1, got True")):
        check_int_at_least("steps", True, 1)
    with pytest.raises(ValueError, match=re.escape("max_points must be an integer >= 1024, got 2048.0")):
        check_int_at_least("max_points", 2048.0, 1024)


@pytest.mark.parametrize("value", [1e-300, 0.5, 3, np.float32(2.0), np.int64(4), Fraction(1, 7)])
def test_check_positive_accepts_finite_numbers_above_zero(value: object) -> None:
    check_positive("sigma", value)


@pytest.mark.parametrize("value", [0, 0.0, -1.5, math.inf, math.nan, True, "1", None, HUGE])
def test_check_positive_refuses_zero_infinite_nan_and_non_numbers(value: object) -> None:
    with pytest.raises(ValueError, match=re.escape(f"sigma must be a finite number > 0, got {value!r}")):
        check_positive("sigma", value)


def test_check_non_negative_takes_zero_but_not_infinity() -> None:
    check_non_negative("epsilon", 0.0)
    check_non_negative("epsilon", np.float64(2.5))
    for bad in (-1e-12, math.inf, math.nan, False):
        with pytest.raises(ValueError, match=re.escape(f"epsilon must be a finite number >= 0, got {bad!r}")):
            check_non_negative("epsilon", bad)


def test_check_probability_is_the_open_interval_unless_one_is_allowed() -> None:
    check_probability("gamma", 0.5)
    check_probability("gamma", np.float32(1e-6))
    for bad in (0.0, 1.0, 1, -0.1, math.nan, True, "0.5", HUGE, -HUGE):
        with pytest.raises(ValueError, match=re.escape(f"gamma must be in (0, 1), got {bad!r}")):
            check_probability("gamma", bad)
    check_probability("sample_rate", 1.0, allow_one=True)
    check_probability("sample_rate", 1, allow_one=True)
    for bad in (0.0, 1.0000001, math.inf):
        with pytest.raises(ValueError, match=re.escape(f"sample_rate must be in (0, 1], got {bad!r}")):
            check_probability("sample_rate", bad, allow_one=True)


def test_check_delta_and_check_theta_keep_the_accountants_wording() -> None:
    check_delta(1e-5)
    with pytest.raises(ValueError, match=re.escape("delta must be in (0, 1), got 1.0")):
        check_delta(1.0)
    check_theta(-0.5)
    check_theta(np.float64(3.0))
    for bad in (-1.0, -2, math.inf, math.nan, True, None):
        with pytest.raises(ValueError, match=re.escape(f"theta must be a finite number > -1, got {bad!r}")):
            check_theta(bad)


def test_the_accountants_entry_points_refuse_with_the_shared_wording() -> None:
    """The checks that were copied across the privacy modules now raise one message, wherever they are called."""
    from dphypo.privacy import RepeatAndSelect, TruncatedNegativeBinomial, dpsgd_rdp, gaussian_rdp, geometric
    from dphypo.privacy.accounting import PrivacyAccounting
    from dphypo.privacy.profiles import dpsgd_profile
    from dphypo.privacy.transfer import check_variant, nominal_set_sizes

    cases = [
        (lambda: dpsgd_rdp(1.0, 0.01, True), "steps must be an integer >= 1, got True"),
        (lambda: dpsgd_rdp(1.0, 1.5, 10), "sample_rate must be in (0, 1], got 1.5"),
        (lambda: gaussian_rdp(1.0).repeated(0), "count must be a positive integer, got 0"),
        (lambda: TruncatedNegativeBinomial(-1.0, 0.1), "theta must be a finite number > -1, got -1.0"),
        (lambda: TruncatedNegativeBinomial(1.0, 1.0), "gamma must be in (0, 1), got 1.0"),
        (lambda: PrivacyAccounting(RepeatAndSelect(geometric(0.1)), gaussian_rdp(1.0), 1e-5, max_lost=-1),
         "max_lost must be a non-negative integer, got -1"),
        (lambda: nominal_set_sizes(100.0, 1.0, 1), "tuning_rate must be in (0, 1), got 1.0"),
        (lambda: nominal_set_sizes(100.0, 0.5, 3), "variant must be 1 or 2, got 3"),
        (lambda: check_variant(0), "variant must be 1 or 2, got 0"),
        (lambda: check_variant(True) and check_variant(2.5), "variant must be 1 or 2, got 2.5"),
        (lambda: dpsgd_profile(1.0, 0.0, 10), "sample_rate must be in (0, 1], got 0.0"),
        (lambda: dpsgd_profile(1e-200, 0.1, 10), "sigma must be >= 1e-100"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=re.escape(message)):
            call()
