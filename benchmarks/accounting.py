"""Accounting benchmark: time of `account` and `calibrate` in the paper's MNIST setting (one core).

Goals (issue 2): account < 0.5 s, calibrate < 5 s. Cold = first call in the process (includes dp_accounting's
import and the per-step RDP computation); warm = a new σ on an already-imported accountant. Also runs the exact
audit (`dphypo.testing.audit`) on a sample and prints its count and worst ratio exact/bound.

Run: OMP_NUM_THREADS=1 python benchmarks/accounting.py [--audit-instances N]
"""

from __future__ import annotations

import argparse
import statistics
import time

Q, STEPS, DELTA = 256 / 60000, 2344, 1e-5


def _timed(fn, repeats: int = 1) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--audit-instances", type=int, default=200)
    args = parser.parse_args()

    t0 = time.perf_counter()
    from dphypo.privacy import RepeatAndSelect, account, calibrate_dpsgd_sigma, dpsgd_rdp, geometric

    search = RepeatAndSelect(geometric(0.01), 2.0, 0.75)
    report = account(dpsgd_rdp(0.71, Q, STEPS), search, DELTA)
    cold = time.perf_counter() - t0
    print(f"account, cold (import + RDP curve + Theorem 1): {cold:.3f} s -> epsilon={report.epsilon:.4f}")

    sigmas = iter([0.70 + 0.001 * i for i in range(1, 100)])
    warm_new_sigma, _ = _timed(lambda: account(dpsgd_rdp(next(sigmas), Q, STEPS), search, DELTA), repeats=9)
    print(f"account, warm, new sigma (RDP curve + Theorem 1): {warm_new_sigma:.3f} s")
    cached, _ = _timed(lambda: account(dpsgd_rdp(0.71, Q, STEPS), search, DELTA), repeats=9)
    print(f"account, cached curve (Theorem 1 + conversion only): {cached * 1e3:.2f} ms")

    for name, s in [("GP (C=2, c=0.75)", search), ("uniform", search.uniform())]:
        secs, cal = _timed(lambda s=s: calibrate_dpsgd_sigma(8.0, DELTA, Q, STEPS, s), repeats=1)
        print(
            f"calibrate eps=8 {name}: {secs:.2f} s, sigma={cal.sigma:.5f}, eps={cal.report.epsilon:.5f}, "
            f"{cal.evaluations} accountant evaluations"
        )
    print(
        f"goals: account < 0.5 s ({'met' if max(cold, warm_new_sigma) < 0.5 else 'MISSED'} cold),"
        " calibrate < 5 s"
    )

    if args.audit_instances <= 0:
        return
    try:
        from dphypo.privacy import audit
    except ImportError:
        print("audit: dphypo.testing.audit not available")
        return
    import numpy as np

    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    results = [audit.audit_instance(audit.random_instance(rng)) for _ in range(args.audit_instances)]
    ratios = [r.worst_ratio for r in results]
    violations = sum(r.violation for r in results)
    print(
        f"audit: {len(results)} random instances in {time.perf_counter() - t0:.1f} s, violations={violations}, "
        f"worst ratio exact/bound={max(ratios):.4f} (full audit: python benchmarks/audit.py)"
    )


if __name__ == "__main__":
    main()
