"""ε by accounting method in the paper's MNIST setting, printed as a Markdown table (for the README).

Per-candidate mechanism: one DP-SGD run, Poisson-subsampled Gaussian with rate q = 256/60000 (batch 256 of
n = 60000), 10 epochs = 2344 steps (DP-HyPO App. E), noise multiplier σ; the score is treated as public (as in
the papers' accounting comparisons), δ = 1e-5. "one run" is the tightest bound on one run alone, min(RDP, PLD),
in every row (adaptive or not: it is a bound on the single DP-SGD run). Methods (every one a valid upper bound
for its mechanism):

* ``RDP``: Theorem A (adaptive, C > c; docs/proofs/adaptive.md) / Papernot-Steinke Thm 2 (TNB) or Thm 6
  (Poisson), CKS conversion;
* ``profile``: Koskela-Redberg-Wang 2024 Thm 5.2 (TNB), Cor 5.8 (Poisson) or Thm 5.7 (binomial), and P&S Thm 6
  with a PLD δ̂ for Poisson (PLD of the run at discretisation 1e-4, pessimistic); uniform searches only;
* ``KK v1/v2 q``: Koskela-Kulkarni 2023 subsampled tuning on X₁ (rate q) plus one final run with the same
  (σ, γ, T): Thm 1 (final run on X \\ X₁) or Zhu-Wang + composition (final run on X); integer orders 2..256.
  Not comparable mechanisms: KK releases a model trained once more (on less data in variant 1), and its tuning
  runs see a q-fraction of the data. The uniform KK rows use P&S for ε_tune (RDP); adaptive rows Theorem A.

"—" = no theorem covers the combination (binomial T has no RDP theorem; profiles need C = c = 1; adaptive search
with Poisson T has none). Run: ``OMP_NUM_THREADS=1 python benchmarks/epsilon_by_method.py`` (≈ 1 min).
"""

from __future__ import annotations

import math
import time

from dphypo.privacy import Poisson, RepeatAndSelect, account, dpsgd_rdp, geometric
from dphypo.privacy.profile_tuning import PROFILE_METHODS
from dphypo.privacy.profiles import dpsgd_profile
from dphypo.privacy.run_counts import Binomial
from dphypo.privacy.subsampled import SubsampledScopeError, accounting_orders, subsampled_tuning

Q_BATCH, STEPS, DELTA = 256 / 60000, 2344, 1e-5
TUNING_RATES = (0.1, 0.25)


def _fmt(x: float | None) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{x:.3f}"


def _settings() -> list[tuple[float, str, RepeatAndSelect]]:
    rows = []
    for sigma in (1.0, 0.71):
        for mean in (10, 20, 100):
            rows.append((sigma, f"geometric, E[T]={mean}", RepeatAndSelect(geometric(1.0 / mean))))
        for mean in (10, 20):
            rows.append((sigma, f"Poisson, E[T]={mean}", RepeatAndSelect(Poisson(float(mean)))))
            rows.append((sigma, f"binomial Bin({2 * mean}, 0.5)", RepeatAndSelect(Binomial(2 * mean, 0.5))))
        for mean in (10, 20):
            rows.append((sigma, f"geometric, E[T]={mean}, GP C=2 c=0.75",
                         RepeatAndSelect(geometric(1.0 / mean), 2.0, 0.75)))
    return rows


def _row(sigma: float, label: str, search: RepeatAndSelect) -> list[str]:
    candidate = dpsgd_rdp(sigma, Q_BATCH, STEPS, orders=accounting_orders())
    # The run's profile is passed for every row: `account` uses its profile *bounds* for uniform searches only,
    # and for every row its ε of one run = min(RDP, PLD) of the run (the "one run" convention of the table).
    profile = dpsgd_profile(sigma, Q_BATCH, STEPS)
    report = account(candidate, search, DELTA, profile=profile)
    rdp = next((v for k, v in report.methods.items() if k not in PROFILE_METHODS), None)
    profile_eps = [v for k, v in report.methods.items() if k in PROFILE_METHODS]
    kk = []
    for variant in (1, 2):
        for q in TUNING_RATES:
            try:
                kk.append(subsampled_tuning(candidate, search, q, variant, DELTA).epsilon)
            except SubsampledScopeError:
                kk.append(None)
    one_run = report.base_epsilon
    best_profile = min(profile_eps) if profile_eps else None
    return [f"{sigma:g}", label, _fmt(one_run), _fmt(rdp), _fmt(best_profile), _fmt(report.epsilon),
            *(_fmt(x) for x in kk)]


def main() -> None:
    started = time.perf_counter()
    head = ["σ", "search (T)", "one run", "RDP", "profile", "min(RDP, profile)",
            *(f"KK v{v} q={q:g}" for v in (1, 2) for q in TUNING_RATES)]
    print(f"MNIST setting: q = 256/60000, {STEPS} steps (10 epochs), δ = {DELTA:g}; ε of the released output.\n")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for sigma, label, search in _settings():
        print("| " + " | ".join(_row(sigma, label, search)) + " |", flush=True)
    print(f"\n(computed in {time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
