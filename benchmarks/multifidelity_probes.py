"""Two-fidelity released probes with a multi-fidelity GP against today's default (issue #31 item 6).

Run: ``OMP_NUM_THREADS=1 python benchmarks/multifidelity_probes.py --family digits --epsilon 8 --repeats 200
--seed 0 --variant 15:1 --variant 10:2`` (one JSON object on stdout; docs/studies/multifidelity_probes_*.log).

The default: 20 released cheap (2-epoch) probes placed by GP qLogNEI, the committed point the GP's posterior-mean
argmax among the probes, one full (10-epoch) final run; σ of both from :func:`calibrate_design` (split 0.5),
exactly what ``benchmarks/gp_placement.py`` simulates as ``gp-log-nei + gp-mean``.

A variant ``c:e``: ``c`` cheap probes placed the same way, then ``e`` full-fidelity probes at the ``e`` best
distinct probed points by the cheap GP's posterior mean, then a BoTorch ``SingleTaskMultiFidelityGP`` over
(lr, clip, fidelity) (``data_fidelities``; fidelity = epochs / 10) fitted on all ``c + e`` released probes; the
committed point is the argmax of its posterior mean at fidelity 1 among the probed points. Compute: a cheap probe
costs ``cost`` run-equivalents, a full one 1, so ``c · cost + e + 1 ≤ 20 · cost + 1``.

Privacy: every released probe composes (add/remove PLD, dp_accounting ``PLDAccountant``): a probe is
``SelfComposed(PoissonSampled(q, Gaussian(σ)), steps)`` then ``Gaussian(score_noise)``; the final run the same at
its σ. The σ ratios of the variant are fixed (cheap probe : full probe : final = σ_p : σ_p·r : σ_f, σ_p and σ_f the
default's, ``r`` = ``--full-probe-ratio``) and the smallest common factor whose composed ε meets the total is found
by bisection. The default's pair is re-accounted by the same code (sanity check printed).

Values: a probe's released score is the family member at its σ (interpolated as :meth:`LandscapeFamily.at` does)
plus its std times a standard normal (common random numbers across arms: the i-th probe of search r gets the same
normal); a committed point's value is its true (mean) value at the final σ of its arm.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import numpy as np
from gp_placement import FAMILIES, files  # benchmarks/ is sys.path[0] when run as a script

from dphypo.cli.two_stage import two_stage_design
from dphypo.privacy.two_stage import FinalRun
from dphypo.simulation.equal_epsilon import metadata_mechanism
from dphypo.simulation.family import load_family
from dphypo.simulation.simulate import mean_ci95
from dphypo.simulation.two_stage import _NOISE, _PLACE, _member_at, calibrate_design, probe_noise_landscape
from dphypo.strategies.gp.placement import ProbePlacement, place_probes
from dphypo.strategies.recommend import Recommendation, recommend
from dphypo.strategies.released import ReleasedProbes

DISCRETIZATION = 1e-4  # the project's RUN_PROFILE_DISCRETIZATION


def run_event(q: float, steps: int, sigma: float, score_noise: float):
    """One released run: DP-SGD (Poisson-subsampled Gaussian, self-composed) then its Gaussian score."""
    import dp_accounting as dpa

    step = dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(sigma))
    return dpa.ComposedDpEvent([dpa.SelfComposedDpEvent(step, steps), dpa.GaussianDpEvent(score_noise)])


def composed_epsilon(kinds: list[tuple[object, int]], delta: float) -> float:
    """ε at δ of the composition of ``count`` runs of every (event, count) kind, PLD (add/remove, pessimistic)."""
    import dp_accounting as dpa

    acc = dpa.pld.PLDAccountant(value_discretization_interval=DISCRETIZATION)
    for event, count in kinds:
        if count:
            acc.compose(event, count)
    return float(acc.get_epsilon(delta))


def design_epsilon(cheap_mech, full_mech, c: int, e: int, sigmas: tuple[float, float, float], delta: float) -> float:
    """ε of ``c`` cheap probes, ``e`` full probes and one final run at σ = (cheap, full probe, final)."""
    ev = [(run_event(cheap_mech.sample_rate, cheap_mech.steps, sigmas[0], cheap_mech.score_noise), c),
          (run_event(full_mech.sample_rate, full_mech.steps, sigmas[1], full_mech.score_noise), e),
          (run_event(full_mech.sample_rate, full_mech.steps, sigmas[2], full_mech.score_noise), 1)]
    return composed_epsilon(ev, delta)


def calibrate_factor(eps_at, epsilon: float, lo: float = 0.8, hi: float = 1.25, tol: float = 1e-3) -> float:
    """Smallest common factor k in [lo, hi] (to ``tol`` relative, on the safe side) with ``eps_at(k) <= epsilon``."""
    if eps_at(hi) > epsilon:
        raise RuntimeError(f"no factor up to {hi} meets epsilon {epsilon}")
    if eps_at(lo) <= epsilon:
        raise RuntimeError(f"factor {lo} already meets epsilon {epsilon}: widen the bracket")
    while hi / lo > 1 + tol:
        mid = np.sqrt(lo * hi)
        if eps_at(mid) <= epsilon:
            hi = mid
        else:
            lo = mid
    return float(hi)


def mf_gp_commit(space, indices: np.ndarray, scores: np.ndarray, fid: np.ndarray, chunk: int = 50
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Argmax of a SingleTaskMultiFidelityGP's posterior mean at fidelity 1 among each search's probed points.

    Args:
        space: The grid (``unit_coordinates``).
        indices: Probed grid points, shape ``(B, n)``.
        scores: Released scores, shape ``(B, n)`` (maximised).
        fid: Fidelity of each probe in (0, 1], shape ``(B, n)``.
        chunk: Searches per batched fit.

    Returns:
        Committed grid indices ``(B,)`` and a ``(B,)`` mask of searches whose fit failed (NaN index -1 there).
    """
    import torch
    from botorch.fit import fit_gpytorch_mll
    from botorch.models import SingleTaskMultiFidelityGP
    from botorch.models.transforms.outcome import Standardize
    from gpytorch.mlls import ExactMarginalLogLikelihood

    coords = np.asarray(space.unit_coordinates, dtype=np.float64)
    B = indices.shape[0]
    out = np.full(B, -1, dtype=np.int64)
    failed = np.zeros(B, dtype=bool)
    for s in range(0, B, chunk):
        sl = slice(s, min(B, s + chunk))
        X = torch.as_tensor(np.concatenate([coords[indices[sl]], fid[sl][..., None]], axis=-1))
        Y = torch.as_tensor(scores[sl][..., None])
        b = X.shape[0]
        try:
            torch.manual_seed(s)
            model = SingleTaskMultiFidelityGP(X, Y, data_fidelities=[2],
                                              outcome_transform=Standardize(m=1, batch_shape=torch.Size([b])))
            fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
            Xc = X.clone()
            Xc[..., 2] = 1.0
            with torch.no_grad():
                mean = model.posterior(Xc).mean[..., 0].numpy()
            ok = np.isfinite(mean).all(axis=1)
        except Exception as exc:
            print(f"mf-gp fit failed on chunk {s}: {exc!r}", file=sys.stderr, flush=True)
            mean, ok = np.zeros((b, indices.shape[1])), np.zeros(b, dtype=bool)
        best = np.take_along_axis(indices[sl], np.argmax(mean, axis=1)[:, None], axis=1)[:, 0]
        out[sl] = np.where(ok, best, -1)
        failed[sl] = ~ok
    return out, failed


def summary(v: np.ndarray, base: np.ndarray | None) -> dict:
    """Mean, CI, paired difference vs ``base``, worst-5 % mean."""
    k = max(1, round(0.05 * v.size))
    m, ci = mean_ci95(v)
    out = {"mean": m, "ci95": list(ci), "worst5pct_mean": float(np.sort(v)[:k].mean()),
           "p05": float(np.quantile(v, 0.05))}
    if base is not None:
        d, dci = mean_ci95(v - base)
        out["difference_vs_default"] = {"mean": d, "ci95": list(dci)}
        out["worst5pct_difference"] = float(np.sort(v)[:k].mean() - np.sort(base)[:k].mean())
    out["values"] = [round(float(x), 5) for x in v]
    return out


def main() -> None:
    """Simulate the default and every variant with shared streams and print the JSON."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--family", required=True, choices=["digits", "mnist"])
    ap.add_argument("--epsilon", type=float, default=8.0)
    ap.add_argument("--delta", type=float, default=1e-5)
    ap.add_argument("--probes", type=int, default=20)
    ap.add_argument("--split", type=float, default=0.5)
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--variant", action="append", required=True, help="c:e cheap:full probes")
    ap.add_argument("--full-probe-ratio", type=float, default=1.0,
                    help="full probe sigma / cheap probe sigma before the common factor")
    ap.add_argument("--factor", action="append", default=[],
                    help="c:e=k: use common factor k for variant c:e (certified once) instead of the bisection")
    ap.add_argument("--skip-default-factor", action="store_true",
                    help="skip the sanity bisection of the default's own common factor")
    a = ap.parse_args()
    given = {f.split("=")[0]: float(f.split("=")[1]) for f in a.factor}
    final_pat, probe_pat, cost = FAMILIES[a.family]
    family, cheap_family = load_family(files(final_pat)), load_family(files(probe_pat))
    design = two_stage_design(a.probes, "release", a.split, 1, None)
    assert isinstance(design.stage2, FinalRun)
    t0 = time.process_time()
    cal = calibrate_design(design, a.epsilon, a.delta, family.mechanism_metadata, cheap_family.mechanism_metadata)
    sp, sf = float(cal.probe_sigma), float(cal.final_sigma)
    cheap_mech = metadata_mechanism(cheap_family.mechanism_metadata)
    full_mech = metadata_mechanism(family.mechanism_metadata)
    eps_default = design_epsilon(cheap_mech, full_mech, a.probes, 0, (sp, sp, sf), a.delta)
    f_default = None if a.skip_default_factor else calibrate_factor(
        lambda k: design_epsilon(cheap_mech, full_mech, a.probes, 0, (k * sp, k * sp, k * sf), a.delta), a.epsilon,
        lo=0.9, hi=1.1)
    log = {"family": a.family, "epsilon": a.epsilon, "delta": a.delta, "repeats": a.repeats, "seed": a.seed,
           "probe_cost_run_equivalents": cost, "full_probe_ratio": a.full_probe_ratio,
           "default": {"cheap_probes": a.probes, "probe_sigma": sp, "final_sigma": sf,
                       "accounted_epsilon_project": float(cal.report.epsilon),
                       "accounted_epsilon_this_script": eps_default,
                       "this_script_factor_for_epsilon": f_default,
                       "run_equivalents": a.probes * cost + 1},
           "git_diff_stat": subprocess.run(["git", "diff", "--stat"], capture_output=True, text=True).stdout,
           "arms": {}}
    print(f"default sigma probe {sp:.4f} final {sf:.4f}; eps project {cal.report.epsilon:.4f}, this script "
          f"{eps_default:.4f} (common factor for eps exactly: {f_default})", file=sys.stderr, flush=True)
    variants = []
    for v in a.variant:
        c, e = (int(x) for x in v.split(":"))
        if c * cost + e + 1 > a.probes * cost + 1 + 1e-9:
            raise SystemExit(f"--variant {v}: {c * cost + e + 1:g} run-equivalents > {a.probes * cost + 1:g}")
        r = a.full_probe_ratio
        k = given.get(v) or calibrate_factor(lambda k, c=c, e=e, r=r: design_epsilon(
            cheap_mech, full_mech, c, e, (k * sp, k * r * sp, k * sf), a.delta), a.epsilon)
        sig = (k * sp, k * r * sp, k * sf)
        eps = design_epsilon(cheap_mech, full_mech, c, e, sig, a.delta)
        if eps > a.epsilon:
            raise SystemExit(f"--factor {v}={k:g}: accounted epsilon {eps:.4f} > {a.epsilon:g}")
        variants.append((c, e, sig, eps))
        print(f"variant {c}:{e}: factor {k:.4f} sigma cheap {sig[0]:.4f} full probe {sig[1]:.4f} final {sig[2]:.4f}"
              f" eps {eps:.4f}", file=sys.stderr, flush=True)
    log["cpu_s_accounting"] = time.process_time() - t0

    R = a.repeats
    placement = ProbePlacement("gp", "log-nei")
    n_noise = max(a.probes, *(c + e for c, e, _, _ in variants))
    noise = np.random.default_rng(np.random.SeedSequence(a.seed, spawn_key=(_NOISE,))).standard_normal((R, n_noise))
    built = float(cheap_family.mechanism_metadata.get("score_noise", 0.0))
    target_noise = float(family.mechanism_metadata.get("score_noise", 0.0))

    def cheap_stage(sigma: float, n: int) -> tuple[object, ReleasedProbes]:
        land = probe_noise_landscape(_member_at(cheap_family, sigma, "probe", design, a.epsilon), built, target_noise)
        mean, std = land.mean.ravel(), land.std.ravel()

        def score(indices: np.ndarray, first: int) -> np.ndarray:
            return mean[indices] + std[indices] * noise[:, first: first + indices.shape[1]]

        rng = np.random.default_rng(np.random.SeedSequence(a.seed, spawn_key=(_PLACE,)))
        if land.direction != "maximize":
            raise SystemExit(f"the multi-fidelity commit maximises, got direction {land.direction!r}")
        return land, place_probes(placement, land.space, n, R, score, rng, land.direction)

    # the default
    t1 = time.process_time()
    land, rel = cheap_stage(sp, a.probes)
    chosen = recommend(Recommendation("gp-mean"), land.space, rel, land.direction, top_k=1, seed=a.seed)
    final = _member_at(family, sf, "final", design, a.epsilon)
    base = np.where(chosen.available > 0, final.true_values(chosen.indices[:, 0]), final.worst_value)
    log["arms"]["default 20 cheap + gp-mean"] = {"cpu_s": time.process_time() - t1, **summary(base, None)}
    log["best_grid_value_default_final_sigma"] = float(final.mean.max())
    print(f"default: {base.mean():.4f} ({time.process_time() - t1:.0f} cpu s)", file=sys.stderr, flush=True)

    for c, e, sig, eps in variants:
        t1 = time.process_time()
        land, rel = cheap_stage(sig[0], c)
        final_v = _member_at(family, sig[2], "final", design, a.epsilon)
        full_p = _member_at(family, sig[1], "full probe", design, a.epsilon)
        cheap_gp = recommend(Recommendation("gp-mean"), land.space, rel, land.direction, top_k=e, seed=a.seed)
        top = cheap_gp.indices  # (R, e): the cheap GP's best distinct probed points (padded with the best)
        full_scores = full_p.mean.ravel()[top] + full_p.std.ravel()[top] * noise[:, c: c + e]
        idx = np.concatenate([rel.indices, top], axis=1)
        sc = np.concatenate([rel.scores, full_scores], axis=1)
        fid = np.concatenate([np.full(rel.indices.shape, cheap_mech.epochs / full_mech.epochs),
                              np.ones(top.shape)], axis=1)
        t2 = time.process_time()
        mf, failed = mf_gp_commit(land.space, idx, sc, fid)
        t_mf = time.process_time() - t2
        mf = np.where(failed, top[:, 0], mf)  # a failed fit commits the cheap GP's choice (counted)
        rules = {
            "mf-gp-mean": mf,
            "cheap-gp-mean (ignores full probes)": top[:, 0],
            "best full probe (noisy score)": np.take_along_axis(top, np.argmax(full_scores, 1)[:, None], 1)[:, 0],
        }
        for rule, pts in rules.items():
            vals = final_v.true_values(pts)
            label = f"{c} cheap + {e} full + {rule}"
            log["arms"][label] = {
                "cheap_probes": c, "full_probes": e, "sigma_cheap_probe": sig[0], "sigma_full_probe": sig[1],
                "sigma_final": sig[2], "accounted_epsilon": eps, "run_equivalents": c * cost + e + 1,
                "mf_fit_failed": int(failed.sum()), "cpu_s": time.process_time() - t1, "cpu_s_mf_fit": t_mf,
                **summary(vals, base)}
            d = log["arms"][label]["difference_vs_default"]
            print(f"{label}: {vals.mean():.4f} diff {d['mean']:+.4f} [{d['ci95'][0]:+.4f}, {d['ci95'][1]:+.4f}]"
                  f" worst5 {log['arms'][label]['worst5pct_mean']:.4f}", file=sys.stderr, flush=True)
    log["cpu_s_total"] = time.process_time() - t0
    print(json.dumps(log))


if __name__ == "__main__":
    main()
