"""Privacy-profile accounting benchmark: ε by method for uniform searches, and timings (one core).

For each DP-SGD setting (MNIST q = 256/60000 with 10 epochs ≈ 2344 steps at σ ∈ {0.64, 1.0}; the KRW 2024
Fig. 6 MNIST setting; De et al.'s CIFAR setting of KRW Fig. 7; the KK 2023 Fig. 1 base) and each run-count law
with E[T] = 10 (plus the other means given with --means), prints ε at δ = 1e-5 for:

* ``rdp``: the existing accountant (`account`: P&S Theorem 2 for TNB T, Theorem 6 for Poisson T);
* ``profile-*``: Koskela-Redberg-Wang 2024 Theorem 5.2 (TNB), Corollary 5.8 (Poisson), Theorem 5.7 (binomial);
* ``rdp-poisson-pld``: P&S Theorem 6 with δ̂ from the PLD profile;

and the minimum. Then timings: PLD build (cold), each bound on a built PLD, `account`, the PLD discretisation
effect (1e-3 vs 1e-4), and Koskela-Kulkarni subsampled tuning (q = 0.1) next to full-data tuning.

Run: OMP_NUM_THREADS=1 python benchmarks/profiles.py [--means 10 3 30] [--delta 1e-5]
"""

from __future__ import annotations

import argparse
import math
import time

SETTINGS = [  # (name, sigma, sample rate, steps)
    ("MNIST 10ep s=0.64", 0.64, 256 / 60000, 2344),
    ("MNIST 10ep s=1.0", 1.0, 256 / 60000, 2344),
    ("KRW Fig6 s=1.1 60ep", 1.1, 256 / 60000, 14063),
    ("De et al. s=21.1", 21.1, 16384 / 50000, 250),
    ("KK Fig1 s=2 q=.01", 2.0, 0.01, 5000),
]


def _laws(mean: float):
    from dphypo.privacy import Poisson, TruncatedNegativeBinomial
    from dphypo.privacy.run_counts import Binomial

    laws = [
        ("geometric", TruncatedNegativeBinomial.from_mean(1.0, mean)),
        ("logarithmic", TruncatedNegativeBinomial.from_mean(0.0, mean)),
        ("poisson", Poisson(mean)),
        (f"Bin({round(2 * mean)},1/2)", Binomial.from_mean(round(2 * mean), mean)),
        (f"Bin({round(10 * mean)},1/10)", Binomial.from_mean(round(10 * mean), mean)),
    ]
    return laws


def _fmt(x: float | None) -> str:
    if x is None:
        return "    -  "
    return f"{x:7.3f}" if math.isfinite(x) else "    inf"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--means", type=float, nargs="+", default=[10.0])
    parser.add_argument("--delta", type=float, default=1e-5)
    args = parser.parse_args()

    t0 = time.perf_counter()
    from dphypo.privacy import RepeatAndSelect, account, dpsgd_rdp
    from dphypo.privacy.profile_tuning import PROFILE_METHODS, profile_bounds
    from dphypo.privacy.profiles import dpsgd_profile
    from dphypo.privacy.run_counts import Binomial

    print(f"imports: {time.perf_counter() - t0:.2f} s")
    columns = ["rdp", *PROFILE_METHODS]
    header = f"{'setting':22s} {'T law':13s} " + " ".join(f"{c:>16s}" for c in columns) + "   min (method)"
    timings: dict[str, list[float]] = {"bound": [], "rdp_account": []}
    wins: dict[str, int] = {}
    print("PLD build (cold, discretisation 1e-4), one DP-SGD run:")
    for name, sigma, q, steps in SETTINGS:
        t = time.perf_counter()
        dpsgd_profile(sigma, q, steps)
        print(f"  {name:22s} {time.perf_counter() - t:.2f} s")
    for mean in args.means:
        print(f"\nepsilon at delta={args.delta:g}, uniform search, E[T]={mean:g}")
        print(header)
        for name, sigma, q, steps in SETTINGS:
            profile = dpsgd_profile(sigma, q, steps)  # cached above
            base = dpsgd_rdp(sigma, q, steps)
            print(
                f"{name:22s} {'one run':13s} {'':>16s} base ε: RDP {account_single(base, args.delta):.3f}, "
                f"PLD {profile.epsilon(args.delta):.3f}"
            )
            for law_name, law in _laws(mean):
                search = RepeatAndSelect(law)
                row: dict[str, float | None] = dict.fromkeys(columns)
                if not isinstance(law, Binomial):
                    t = time.perf_counter()
                    row["rdp"] = account(base, search, args.delta).epsilon
                    timings["rdp_account"].append(time.perf_counter() - t)
                t = time.perf_counter()
                bounds = profile_bounds(profile, search, args.delta, base_rdp=base)
                timings["bound"].append((time.perf_counter() - t) / max(1, len(bounds)))
                row.update({k: b.epsilon for k, b in bounds.items()})
                valid = {k: v for k, v in row.items() if v is not None}
                best = min(valid, key=valid.get)
                wins[best] = wins.get(best, 0) + 1
                cells = " ".join(f"{_fmt(row[c]):>16s}" for c in columns)
                print(f"{'':22s} {law_name:13s} {cells}   {valid[best]:.3f} ({best})")
    print("\nwinner counts:", wins)
    print("\ntimings (one core):")
    for key, values in timings.items():
        print(
            f"  {key:12s} median {sorted(values)[len(values) // 2]:.3f} s, "
            f"max {max(values):.3f} s, n={len(values)}"
        )
    print("\nPLD discretisation (profile-tnb, geometric E[T]=10; 1e-3 time = cold build + bound):")
    from dphypo.privacy import geometric
    from dphypo.privacy.profile_tuning import tnb_profile_bound

    for name, sigma, q, steps in SETTINGS:
        values = []
        for disc in (1e-3, 1e-4):
            t = time.perf_counter()
            eps = tnb_profile_bound(
                dpsgd_profile(sigma, q, steps, discretization=disc), RepeatAndSelect(geometric(0.1)), args.delta
            ).epsilon
            values.append((disc, eps, time.perf_counter() - t))
        (d3, e3, s3), (d4, e4, _) = values
        print(
            f"  {name:22s} {d3:g}: ε={e3:.4f} ({s3:.2f} s)   {d4:g}: ε={e4:.4f}   difference {e3 - e4:+.4f}"
        )
    subsampled_section(args.delta)


def subsampled_section(delta: float) -> None:
    """KK 2023 subsampled tuning (RDP only) next to full-data tuning, E[T] = 10, q = 0.1."""
    from dphypo.privacy import Poisson, RepeatAndSelect, geometric
    from dphypo.privacy.subsampled import dpsgd_subsampled_tuning

    print(f"\nsubsampled tuning (Koskela-Kulkarni 2023), q=0.1, E[T]=10, delta={delta:g}")
    print(f"{'setting':22s} {'T law':10s} {'full data':>10s} {'variant 1':>10s} {'variant 2':>10s}   time")
    for name, sigma, q, steps in SETTINGS[:2]:
        for law_name, law in (("geometric", geometric(0.1)), ("poisson", Poisson(10.0))):
            t = time.perf_counter()
            v1 = dpsgd_subsampled_tuning(sigma, q, steps, RepeatAndSelect(law), 0.1, 1, delta)
            v2 = dpsgd_subsampled_tuning(sigma, q, steps, RepeatAndSelect(law), 0.1, 2, delta)
            secs = time.perf_counter() - t
            print(
                f"{name:22s} {law_name:10s} {v1.full_data_epsilon:10.3f} {v1.epsilon:10.3f} "
                f"{v2.epsilon:10.3f} {secs:6.2f}s"
            )


def account_single(base, delta: float) -> float:
    from dphypo.privacy import epsilon_from_rdp

    return epsilon_from_rdp(base.orders, base.epsilons, delta)[0]


if __name__ == "__main__":
    main()
