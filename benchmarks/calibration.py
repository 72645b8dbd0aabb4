"""Calibration timings before and after the coarse-to-fine search and the on-disk cache (issue #30 item 6).

Run: ``OMP_NUM_THREADS=1 python benchmarks/calibration.py [--only default planner-uniform planner-gp batch-epochs]``

Each case is timed in one process, the previous algorithm first (``before``: Brent's method at the accountant's full
precision throughout, as the code calibrated until this change), then the new one without a cache (``after, cold``),
then with a warm cache (``after, cached``: one full-precision certification, the report the caller prints anyway).
Every case prints both σ and their relative difference, and the ratio of the times. Every in-process cache (per-σ
curves and PLDs) is cleared before each timing, so ``cached`` is what a new process pays. The cache lives in a
temporary folder (``DPHYPO_CACHE_DIR``), never in ``~/.cache``.

Cases: ``default`` is ``dphypo tune``'s default two-stage design on digits (ε = 8: 20 released 2-epoch probes, one
10-epoch final run; the composed PLDs decide); ``planner-uniform`` and ``planner-gp`` are two ``dphypo plan``
candidates on the digits family (uniform search with Poisson T of mean 20, profile bounds; GP-UCB with C = 1.5 and
geometric T of mean 20, Theorem B); ``batch-epochs`` is the README's ``dphypo tune --batch-size-grid 32,64,128
--epochs-grid 5,10,20 --dry-run`` calibration (σ_ref, then every setting's dominating σ_i).

Times are CPU seconds of this process (``time.process_time``; single-threaded with OMP_NUM_THREADS=1, so on an idle
machine they are the wall time, and on a shared one they do not count other processes' turns, though they still
grow with the contention for caches and memory). Measured on the 2-core development machine (shared), 2026-11-28,
σ identical in every row (the same certified answers; the third column's σ are bit-for-bit those of the second):

================  =================  ========================  =============================================
case              coarse-to-fine +   + dp_accounting's PLD/    + screened Theorem B moments, each σ
                  cache (3c028cc)    RDP loops on arrays       accounted once, step PLD bounds sized once
                  cold / cached      cold / cached             cold / cached (before/cold in the same run)
================  =================  ========================  =============================================
default           15.8 s / 3.41 s    2.23 s / 0.47 s           2.60 s / 0.59 s (6.9 s / 2.60 s = 2.7x)
planner-uniform   4.98 s / 1.02 s    0.93 s / 0.23 s           1.40 s / 0.34 s (2.2 s / 1.40 s = 1.6x)
planner-gp        5.41 s / 0.59 s    2.90 s / 0.47 s           3.55 s / 0.48 s (5.6 s / 3.55 s = 1.6x)
batch-epochs      25.0 s             5.83 s                    4.48 s          (8.2 s / 4.48 s = 1.8x)
================  =================  ========================  =============================================

The third column was measured at load average 1.4 to 3.5 (batch-epochs: 2.8), on a machine then slower than for the
second (the rows' absolute times do not compare across columns; the ratios in one run do). Its changes, against the
code before them in interleaved runs of the same minutes (cold, two runs each): default 2.91 s, 2.97 s before and
1.93 s, 2.35 s after; planner-gp 4.09 s, 3.50 s before and 3.79 s, 3.17 s after. They are:
:class:`~dphypo.privacy.adaptive._PartnerConstraints` screens Theorem B's Bernoulli moments (``log M`` lies in
``[max(t1, t2), max(t1, t2) + log 2]``: only constraints within 1 of their cap are evaluated by ``_log_moment``;
every decision equal to the full evaluation, tests/privacy/test_theorem_b_fast.py); :func:`~dphypo.privacy.adaptive.
adaptive_rdp` skips Theorem B at C = c = 1 where the printed uniform curve cannot bind as a floor;
:func:`~dphypo.privacy.calibration.coarse_to_fine_sigma` accounts each σ once (the coarse root was accounted again
for its slope: three composed coarse PLDs of the default design); a step PLD's truncation bounds are computed once
for its sizing and its composition (:func:`~dphypo.privacy.gaussian_pld.self_convolve_bounds`). What remains of
planner-gp is Theorem B's partner bisection over 280 orders × 300 points (memory-bound numpy passes) and its
cell bounds; of default, the FFT self-compositions of the PLDs.

The fourth change (issue #30.6, "calibration in seconds"), cold, against the code before it (76e1dd0) in three
interleaved runs of the same minutes (``after`` of each case as above, one process per run and version; load average
5.9 to 6.5 on the shared 2-core machine), and this benchmark's full output right after them (its ``before`` is the
Brent search of the first column, ``cached`` the new code with a warm disk cache). Every σ is bit-for-bit the one
of 76e1dd0 in every run (default 2.0025997754653773, 0.9164944086242769; planner-uniform 1.3344874591826708;
planner-gp 1.1964198348577666):

================  ======================  ======================  ======================================
case              76e1dd0, cold (3 runs)  this change, cold       benchmark: before / after / cached
================  ======================  ======================  ======================================
default           2.17, 1.97, 1.93 s      1.91, 1.98, 2.02 s      5.7 s / 2.09 s / 0.54 s
planner-uniform   0.80, 0.87, 0.81 s      0.68, 0.70, 0.84 s      1.3 s / 0.67 s / 0.18 s
planner-gp        2.07, 1.98, 2.09 s      0.99, 1.01, 1.02 s      4.4 s / 0.96 s / 0.23 s
================  ======================  ======================  ======================================

Absolute times move with the other agents' load by ±50 %: planner-gp alone, interleaved again 20 minutes later
(load 3.3 to 3.8, but heavier memory traffic), took 2.46, 2.75, 2.56, 3.30 s before and 1.52, 1.75, 1.55, 1.65 s
after; the ratio in the same minutes (1.6x to 2.1x) is what this change buys.

It is: the coarse search of an adaptive Theorem B search is steered by Theorem B's curve alone
(:meth:`~dphypo.privacy.calibration._SearchAtSigma.guide_epsilon`: without the uniform floor and the report's breakdown,
which need a second Theorem B at C = c = 1; equal to the full ε wherever that floor does not bind, as here), and a last
fine point whose excess would close the bracket is decided by that lower bound on the full ε
(``refine_sigma(exceeds=...)``): planner-gp accounts 15 Theorem B bounds instead of 28; a reachable target no longer
evaluates the σ → ∞ floor (Theorem B of the zero curve, coarse); Theorem B's narrow bisection evaluates both directions
as one unscreened array (:meth:`~dphypo.privacy.adaptive._PartnerConstraints.bisect_window`, the same decisions);
Papernot-Steinke Theorem 6 (δ̂ from the RDP curve, and from the PLD) converts at every order's ε̂ in one array operation
(:func:`~dphypo.privacy.conversion.deltas_from_rdp`, the same numbers). default is unchanged: its time is the FFT
self-compositions of the PLDs (three fine and nine coarse accountings of the composed two-stage PLD) and the RDP curves
with dp_accounting's spot checks (about 3 ms per curve, ~50 curves): cheaper FFTs (``rfft``, a composed power) change
the last bits of the PLDs and so of the σ, and fewer spot checks weaken them, so both are left as they are. What remains
of planner-gp is five fine Theorem B bounds (three at C = 1.5, two at C = c = 1 for the floor and the breakdown) and ten
coarse ones.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

CASES = ("default", "planner-uniform", "planner-gp", "batch-epochs")


def _clear_caches() -> None:
    """Forget every in-process cache of dphypo (per-σ RDP curves, PLDs, calibrations): each timing starts cold."""
    for name, module in list(sys.modules.items()):
        if name.startswith("dphypo"):
            for value in list(vars(module).values()):
                if callable(getattr(value, "cache_clear", None)):
                    value.cache_clear()


def _timed(call: Callable[[], Any]) -> tuple[Any, float]:
    """``call()`` and its CPU seconds (single-threaded with OMP_NUM_THREADS=1, so on an idle machine that is the wall
    time; on a shared machine the wall time also counts other processes' turns, so CPU time is what compares)."""
    _clear_caches()
    start = time.process_time()
    out = call()
    return out, time.process_time() - start


def legacy_two_stage(
    probe_training: Any, training: Any, design: Any, epsilon: float, delta: float
) -> tuple[float, float]:
    """The previous two-stage calibration: RDP at full precision (Brent), then the PLD's factor to 1e-3."""
    from dphypo.api.two_stage import _report
    from dphypo.privacy.calibration import smallest_sigma
    from dphypo.privacy.two_stage import FinalRun, ProbeRelease, calibrate_two_stage

    calibration = calibrate_two_stage(epsilon, delta, design.stage1, design.stage2,
                                      lambda s: probe_training.mechanism(s).rdp(),
                                      lambda s: training.mechanism(s).rdp(), split=design.split)
    rdp_sigmas = (calibration.probe_sigma, calibration.final_sigma)
    if not (isinstance(design.stage1, ProbeRelease) and isinstance(design.stage2, FinalRun)):
        return rdp_sigmas

    def epsilon_at(factor: float) -> float:
        probe, final = probe_training.mechanism(factor * rdp_sigmas[0]), training.mechanism(factor * rdp_sigmas[1])
        return _report(probe, final, design, delta).epsilon

    factor = smallest_sigma(epsilon_at, epsilon, rtol=1e-3, sigma_bounds=(0.05, 1.0))
    return factor * rdp_sigmas[0], factor * rdp_sigmas[1]


def default_case() -> dict[str, Any]:
    """``dphypo tune``'s default two-stage design on digits at ε = 8."""
    from dphypo.api.two_stage import DEFAULT_TWO_STAGE, _calibrated_sigmas, default_probe_epochs
    from dphypo.train.data import split_sizes
    from dphypo.train.recipe import DPSGD

    n_train, n_val = split_sizes("digits")
    training = DPSGD(batch_size=64, epochs=10, n_train=n_train, n_val=n_val, score_noise=0.02 * n_val)
    probe_training = dataclasses.replace(training, epochs=default_probe_epochs(10))
    args = (probe_training, training, DEFAULT_TWO_STAGE, 8.0, 1e-5)
    return {
        "before": lambda: legacy_two_stage(*args),
        "after": lambda: _calibrated_sigmas(*args, cache=False)[0],
        "cached": lambda: _calibrated_sigmas(*args)[0],
    }


def _planner_case(C: float, run_count: Any) -> dict[str, Any]:
    from dphypo.privacy import RepeatAndSelect
    from dphypo.privacy.calibration import calibrate_sigma
    from dphypo.simulation import equal_epsilon
    from dphypo.simulation.family import load_family

    family = load_family(["landscapes/vectorized/digits_mlp_sigma1.0.npz",
                          "landscapes/vectorized/digits_mlp_sigma2.1.npz"])
    metadata = family.mechanism_metadata
    search = RepeatAndSelect(run_count, C, 1.0)
    mechanism = equal_epsilon.metadata_mechanism(metadata)

    def before() -> float:
        options: dict[str, Any] = {}
        if not search.adaptive:
            options["profile_for_sigma"] = lambda s: equal_epsilon.mechanism_profile(
                dataclasses.replace(mechanism, sigma=s))
        return calibrate_sigma(8.0, 1e-5, search, lambda s: dataclasses.replace(mechanism, sigma=s).rdp(),
                               **options).sigma

    def after(cache: bool) -> float:
        return equal_epsilon.arm_calibration(8.0, 1e-5, run_count, C, 1.0, metadata, cache=cache).sigma

    return {"before": before, "after": lambda: after(False), "cached": lambda: after(True)}


def legacy_dominating_sigma(candidate: Any, reference: Any, sigma_ref: float, *, profiles: bool = False,
                            orders: Any = None, sigma_cap: float = 100.0, rtol: float = 1e-5, split: bool = False
                            ) -> float:
    """The previous :func:`~dphypo.privacy.heterogeneous.dominating_sigma`: bisection, every check on every order.

    ``split`` (a per-record split, added to the current function later) is not part of the previous one: ``False`` only.
    """
    import numpy as np

    if split:
        raise NotImplementedError("the previous dominating_sigma had no per-record split")

    from dphypo.privacy import DEFAULT_ORDERS
    from dphypo.privacy.heterogeneous import PROFILE_SLACK, _smallest, profile_dominated, rdp_dominated

    if reference.is_candidate(candidate):
        return float(sigma_ref)
    grid = DEFAULT_ORDERS if orders is None else np.asarray(list(orders), dtype=np.float64)
    ref_curve = reference.rdp(sigma_ref, grid)

    def rdp_ok(sigma: float) -> bool:
        return rdp_dominated(reference.candidate_rdp(candidate, sigma, grid), ref_curve)

    sigma = _smallest(rdp_ok, sigma_ref, sigma_cap, rtol, candidate, "RDP")
    if not profiles:
        return sigma
    ref_profile = reference.profile(sigma_ref)

    def profile_ok(s: float) -> bool:
        return profile_dominated(reference.candidate_profile(candidate, s), ref_profile, slack=PROFILE_SLACK)

    if profile_ok(sigma):
        return sigma
    return _smallest(profile_ok, sigma, sigma_cap, rtol, candidate, "privacy profile", floor=sigma)


def batch_epochs_case() -> dict[str, Any]:
    """The README's batch/epochs dry run: σ_ref and every setting's σ_i (the previous full-precision loops first)."""
    from dphypo.api.search import plan_privacy_axes
    from dphypo.cli.tune import tune_space
    from dphypo.privacy import RepeatAndSelect, heterogeneous
    from dphypo.privacy.calibration import calibrate_dpsgd_sigma
    from dphypo.privacy.run_counts import geometric
    from dphypo.train.data import split_sizes
    from dphypo.train.recipe import DPSGD

    n_train, n_val = split_sizes("digits")
    training = DPSGD(batch_size=64, epochs=10, n_train=n_train, n_val=n_val, score_noise=0.02 * n_val)
    space = tune_space([0.01, 0.1], [1.0, 2.0], "32,64,128", "5,10,20")
    search = RepeatAndSelect(geometric(1 / 20))  # dphypo tune's default: uniform, geometric T of mean 20

    def run() -> tuple[float, ...]:
        candidates, _ = plan_privacy_axes(space, training, search, epsilon=8.0, delta=1e-5)
        return tuple(m.sigma for m in candidates.mechanisms)

    def before() -> tuple[float, ...]:
        saved = heterogeneous.dominating_sigma, heterogeneous.calibrate_dpsgd_sigma
        heterogeneous.dominating_sigma = legacy_dominating_sigma  # the previous loops, at full precision
        heterogeneous.calibrate_dpsgd_sigma = functools.partial(calibrate_dpsgd_sigma, coarse=False)
        try:
            return run()
        finally:
            heterogeneous.dominating_sigma, heterogeneous.calibrate_dpsgd_sigma = saved

    return {"before": before, "after": run}


def build(name: str) -> dict[str, Any]:
    from dphypo.privacy.run_counts import Poisson, geometric

    if name == "default":
        return default_case()
    if name == "planner-uniform":
        return _planner_case(1.0, Poisson(20.0))
    if name == "planner-gp":
        return _planner_case(1.5, geometric(1 / 20))
    return batch_epochs_case()


def _sigmas(value: Any) -> tuple[float, ...]:
    return tuple(value) if isinstance(value, tuple) else (float(value),)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="+", choices=CASES, default=list(CASES))
    args = parser.parse_args()
    os.environ["DPHYPO_CACHE_DIR"] = tempfile.mkdtemp(prefix="dphypo-calibration-bench-")
    import dphypo.privacy.profiles  # noqa: F401  (imports and dp_accounting's first use are not calibration)
    from dphypo.privacy.rdp import dpsgd_rdp

    dpsgd_rdp(1.0, 0.01, 1)
    for name in args.only:
        case = build(name)
        before, t_before = _timed(case["before"])
        after, t_after = _timed(case["after"])
        line = (f"{name:16s} before {t_before:7.1f} s   after {t_after:6.2f} s ({t_before / t_after:5.1f}x)")
        if "cached" in case:
            case["cached"]()  # fills the cache
            cached, t_cached = _timed(case["cached"])
            assert _sigmas(cached) == _sigmas(after)
            line += f"   cached {t_cached:5.2f} s ({t_before / t_cached:5.1f}x)"
        gap = max(abs(a / b - 1.0) for a, b in zip(_sigmas(after), _sigmas(before), strict=True))
        print(line, flush=True)
        print(f"{'':16s} sigma before {', '.join(f'{s:.6g}' for s in _sigmas(before))}; after "
              f"{', '.join(f'{s:.6g}' for s in _sigmas(after))}; largest relative difference {gap:.2e}", flush=True)


if __name__ == "__main__":
    main()
