"""Exact audit of DP-HyPO Theorems 1 and 2 on random small instances, plus a local search for bad rules.

Run with one thread, e.g.::

    OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/audit.py --instances 1000 --seed 0

1. ``--instances`` random instances (:func:`dphypo.testing.audit.random_instance`): counts of
   ok / inconclusive / violation, the worst ratio exact/bound (conservative: upper bound on the exact
   divergence over the theorem's bound, worst over orders, both directions and Theorem 2) with the
   instance, the ratio distribution for uniform (C = c) and adaptive (C > c) instances, the worst ratio
   per rule family.
2. ``--climbs`` hill climbs: for a random (base, T, C > c) the densities of a bounded-memory lookup table rule
   (state = best, last output, min(j, 2)) are mutated among the vertices of S_{C,c} (and π⁽⁰⁾) to maximise the
   ratio; in Framework 1 (same rule on D and D′) and in the *oracle* relaxation (rule may differ between D and
   D′: not Framework 1, but what the proof's per-step suprema bound).
3. Lemma A.5's first display (the paper's ``A(o) ≤ f(P⁺(≤o)) − f(P⁺(<o))`` and its infimum twin) checked
   pointwise on the random instances: how often it is refuted, and whether the corrected bounds always hold.
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections import Counter, defaultdict

import numpy as np

from dphypo.testing.audit import (
    AuditInstance,
    AuditResult,
    UpdateRule,
    audit_instance,
    lemma_a5_check,
    lookup_table_rule,
    random_instance,
    vertex_density,
)


def _family(result: AuditResult) -> str:
    return result.instance.rule.name.split("[")[0]


def _percentiles(values: list[float]) -> str:
    if not values:
        return "n=0"
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return f"n={len(values)} median={p50:.4f} p90={p90:.4f} p99={p99:.4f} max={max(values):.4f}"


def _worst_at(results: list[AuditResult], alpha: float) -> float:
    """Largest upper-bound ratio exact/bound at order ``alpha`` (both directions) over ``results``."""
    worst = 0.0
    for r in results:
        at = r.orders == alpha
        worst = max(worst, float(np.max(r.rdp_upper[:, at] / r.rdp_bound[at])))
    return worst


def _report_worst(result: AuditResult) -> None:
    print(
        f"  ratio {result.ratio:.4f} (lower-bound ratio {result.ratio_lower:.4f}); "
        f"RDP {result.ratio_rdp:.4f} at alpha={result.worst_order:g}, pure {result.ratio_pure:.4f} "
        f"(exact D_inf in [{result.pure_lower:.5f}, {result.pure_upper:.5f}] vs {result.pure_bound:.5f})"
    )
    print(f"  {result.instance.describe()}; t_max={result.t_max} tail<={result.tail:.1e}")


def run_random(n: int, seed: int, lemma: bool) -> None:
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    results: list[AuditResult] = []
    refuted = corrected_ok = 0
    for _ in range(n):
        inst = random_instance(rng)
        results.append(audit_instance(inst))
        if lemma:
            check = lemma_a5_check(inst.rule, inst.base.probs, inst.prior, inst.run_count, inst.C, inst.c)
            refuted += check.paper_refuted
            corrected_ok += check.corrected_holds
    elapsed = time.perf_counter() - start
    verdicts = Counter(r.verdict for r in results)
    print(f"== {n} random instances (seed {seed}) in {elapsed:.1f} s ({1e3 * elapsed / n:.1f} ms each)")
    print(
        f"checked={n} ok={verdicts['ok']} inconclusive={verdicts['inconclusive']} "
        f"violations={verdicts['violation']}"
    )
    print(f"max t_max={max(r.t_max for r in results)}, max tail bound={max(r.tail for r in results):.1e}, "
          f"max joint states={max(r.n_joint_states for r in results)}")
    print("worst instance:")
    _report_worst(max(results, key=lambda r: r.ratio))
    uniform = [r.ratio for r in results if r.instance.c == r.instance.C]
    adaptive = [r for r in results if r.instance.c < r.instance.C]
    print(f"ratio, all:            {_percentiles([r.ratio for r in results])}")
    print(f"ratio, uniform (C=c):  {_percentiles(uniform)}")
    print(f"ratio, adaptive (C>c): {_percentiles([r.ratio for r in adaptive])}")
    print(f"  adaptive, Thm 1 (RDP) only: {_percentiles([r.ratio_rdp for r in adaptive])}")
    print(f"  adaptive, Thm 2 (pure) only: {_percentiles([r.ratio_pure for r in adaptive])}")
    if adaptive:
        print("worst adaptive instance:")
        _report_worst(max(adaptive, key=lambda r: r.ratio))
    by_family: dict[str, list[float]] = defaultdict(list)
    for r in adaptive:
        by_family[_family(r)].append(r.ratio)
    print("adaptive, worst ratio per rule family: "
          + ", ".join(f"{k} {max(v):.4f} (n={len(v)})" for k, v in sorted(by_family.items())))
    orders = Counter(r.worst_order for r in results)
    print(f"order of the worst RDP ratio (top 3): {orders.most_common(3)}")
    uniform_results = [r for r in results if r.instance.c == r.instance.C]
    for kind, subset in (("uniform", uniform_results), ("adaptive", adaptive)):
        per_order = [f"{alpha:g}: {_worst_at(subset, alpha):.3f}" for alpha in (1.5, 2.0, 5.0, 10.0, 50.0)]
        print(f"{kind}, worst RDP ratio at fixed orders: " + ", ".join(per_order))
    if lemma:
        print(f"Lemma A.5 first display refuted on {refuted}/{n} instances (dataset D); "
              f"corrected bounds held on {corrected_ok}/{n}")


def _vertices(prior: np.ndarray, C: float, c: float) -> np.ndarray:
    orders = itertools.permutations(range(prior.size))
    verts = {tuple(vertex_density(np.array(order), prior, C, c)) for order in orders}
    return np.array([*sorted(verts), tuple(prior)])


def climb(rng: np.random.Generator, iterations: int, oracle: bool) -> AuditResult:
    """Hill climb on a lookup-table rule's densities (vertices of S_{C,c} or π⁽⁰⁾) to maximise the ratio."""
    inst = random_instance(rng, max_candidates=3, max_scores=3, max_outputs=9)
    C, c = (inst.C, inst.c) if inst.c < inst.C else (2.0, 0.5)
    n_scores = inst.base.n_scores
    skeleton = lookup_table_rule(rng, inst.prior, C, c, n_scores, memory=("best", "last", "step"), horizon=2)
    verts = _vertices(inst.prior, C, c)

    def rule(choice: np.ndarray) -> UpdateRule:
        dens = verts[choice]
        dens[skeleton.initial] = inst.prior
        name = f"climb[{'oracle' if oracle else 'F1'}]"
        return UpdateRule(dens, skeleton.transitions, skeleton.initial, name)

    def evaluate(choice: np.ndarray, choice_p: np.ndarray) -> AuditResult:
        candidate = AuditInstance(
            inst.prior, inst.base, rule(choice), inst.run_count, C, c,
            rule_prime=rule(choice_p) if oracle else None,
        )
        return audit_instance(candidate)

    choice = rng.integers(len(verts), size=skeleton.n_states)
    choice_p = rng.integers(len(verts), size=skeleton.n_states) if oracle else choice
    best = evaluate(choice, choice_p)
    for _ in range(iterations):
        new, new_p = choice.copy(), choice_p.copy()
        for _ in range(int(rng.integers(1, 4))):
            target = new_p if oracle and rng.random() < 0.5 else new
            target[rng.integers(skeleton.n_states)] = rng.integers(len(verts))
        if not oracle:
            new_p = new
        result = evaluate(new, new_p)
        if result.ratio_lower >= best.ratio_lower:
            best, choice, choice_p = result, new, new_p
    return best


def run_climbs(n: int, iterations: int, seed: int) -> None:
    for oracle in (False, True):
        rng = np.random.default_rng(seed + 1 + oracle)
        start = time.perf_counter()
        results = [climb(rng, iterations, oracle) for _ in range(n)]
        label = "oracle relaxation (not Framework 1)" if oracle else "Framework 1 rules"
        verdicts = Counter(r.verdict for r in results)
        print(f"== {n} hill climbs x {iterations} steps, {label}: {time.perf_counter() - start:.1f} s")
        print(f"ok={verdicts['ok']} inconclusive={verdicts['inconclusive']} "
              f"violations={verdicts['violation']}; ratios {_percentiles([r.ratio for r in results])}")
        print("best climb:")
        _report_worst(max(results, key=lambda r: r.ratio))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--instances", type=int, default=1000, help="random instances to audit")
    parser.add_argument("--seed", type=int, default=0, help="seed of every random choice")
    parser.add_argument("--climbs", type=int, default=20, help="hill climbs per mode (0 to skip)")
    parser.add_argument("--climb-steps", type=int, default=150, help="mutations per hill climb")
    parser.add_argument("--no-lemma", action="store_true", help="skip the Lemma A.5 pointwise check")
    args = parser.parse_args()
    if args.instances < 1:
        parser.error(f"--instances must be >= 1, got {args.instances}")
    start = time.perf_counter()
    run_random(args.instances, args.seed, not args.no_lemma)
    if args.climbs > 0:
        run_climbs(args.climbs, args.climb_steps, args.seed)
    print(f"total runtime {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
