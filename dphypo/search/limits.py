"""Sizes a search accepts, checked before anything is drawn, allocated or trained.

A search whose expected number of runs is astronomically large can neither finish nor even draw its T in
bounded time (inverse-CDF sampling walks the support), so it is refused in one line instead of hanging.
"""

from __future__ import annotations

from dphypo.privacy import RunCountDistribution

__all__ = ["MAX_EXPECTED_RUNS", "MAX_RUNS", "check_expected_runs", "check_runs"]

#: Largest E[T] of a search dphypo runs or simulates (drawing T then takes well under a second).
MAX_EXPECTED_RUNS = 1_000_000
#: Largest fixed number of runs of one simulated search (its arrays are (repeats, T)).
MAX_RUNS = 100_000


def check_expected_runs(run_count: RunCountDistribution, name: str = "mean") -> None:
    """Refuse a run-count law whose E[T] exceeds :data:`MAX_EXPECTED_RUNS`.

    Args:
        run_count: T's distribution.
        name: How the caller names E[T] (an option such as ``"--mean"``), for the message.

    Raises:
        ValueError: One line naming ``name``.
    """
    if not run_count.mean <= MAX_EXPECTED_RUNS:
        raise ValueError(
            f"{name} must be at most {MAX_EXPECTED_RUNS:,} expected runs for a search that trains or simulates "
            f"(got E[T] = {run_count.mean:.4g}); `dphypo account` accounts any E[T]"
        )


def check_runs(runs: int, name: str = "T") -> None:
    """Refuse a fixed number of runs above :data:`MAX_RUNS`.

    Raises:
        ValueError: One line naming ``name``.
    """
    if runs > MAX_RUNS:
        raise ValueError(f"{name} must be at most {MAX_RUNS:,} runs per simulated search, got {runs:,}")
