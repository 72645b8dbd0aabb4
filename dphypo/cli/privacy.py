"""``dphypo account`` and ``dphypo calibrate``: privacy of a whole search, and the σ that meets a budget."""

from __future__ import annotations

from typing import Annotated

import typer

from dphypo.cli.common import (
    GammaOpt,
    JsonOpt,
    MaxRunsOpt,
    MeanOpt,
    RunsOpt,
    SearchLowerOpt,
    SearchUpperOpt,
    ThetaOpt,
    _emit,
    _report_table,
    _search,
    app,
    naming_options,
)
from dphypo.privacy import account, account_pure, calibrate_dpsgd_sigma, dpsgd_rdp, pure_dp_rdp
from dphypo.privacy.profiles import dpsgd_profile_or_skip


@app.command("account")
@naming_options(sigma="--sigma", sample_rate="--sample-rate", steps="--steps", epsilon="--pure-epsilon",
                delta="--delta", adaptive_theorem="--adaptive-theorem")
def account_command(
    runs: RunsOpt,
    sigma: Annotated[float | None, typer.Option("--sigma", help="DP-SGD noise multiplier σ > 0.")] = None,
    sample_rate: Annotated[
        float | None, typer.Option("--sample-rate", help="Poisson sampling rate q ∈ (0,1].")
    ] = None,
    steps: Annotated[int | None, typer.Option("--steps", help="DP-SGD steps per run (≥ 1).")] = None,
    pure_epsilon: Annotated[
        float | None,
        typer.Option("--pure-epsilon", help="Each run is ε-DP (pure); reports DP-HyPO Theorem 2."),
    ] = None,
    theta: ThetaOpt = None,
    gamma: GammaOpt = None,
    mean: MeanOpt = None,
    C: SearchUpperOpt = None,
    c: SearchLowerOpt = None,
    max_runs: MaxRunsOpt = None,
    delta: Annotated[
        float | None, typer.Option("--delta", help="δ ∈ (0,1) (default 1e-5; pure mode: 0 unless given).")
    ] = None,
    as_json: JsonOpt = False,
    adaptive_theorem: Annotated[
        str,
        typer.Option(
            "--adaptive-theorem",
            help="Bound for C > c: A (default; proven, docs/proofs/adaptive.md), B (proven, numerical, tighter) or "
            "published (DP-HyPO Theorem 1/2 as printed; proof has a known gap; implied by Theorem A).",
        ),
    ] = "A",
) -> None:
    """Total (ε, δ) of a private hyperparameter search, with its breakdown (the smallest valid bound)."""
    search = _search(runs, theta, gamma, mean, C, c, max_runs)
    if pure_epsilon is not None:
        if any(v is not None for v in (sigma, sample_rate, steps)):
            raise ValueError("--pure-epsilon cannot be combined with --sigma/--sample-rate/--steps")
        report = (
            account_pure(pure_epsilon, search, adaptive_theorem=adaptive_theorem)
            if delta is None
            else account(pure_dp_rdp(pure_epsilon), search, delta, adaptive_theorem=adaptive_theorem)
        )
    else:
        if sigma is None or sample_rate is None or steps is None:
            missing = [
                n
                for n, v in (("--sigma", sigma), ("--sample-rate", sample_rate), ("--steps", steps))
                if v is None
            ]
            raise ValueError(f"missing {', '.join(missing)} (or give --pure-epsilon)")
        # The DP-SGD run's privacy profile (PLD, both neighbouring directions) adds the profile bounds of a
        # uniform search; the report uses the smallest valid bound. A PLD over the size cap is skipped (RDP only,
        # the report's profile_skipped says why) so that every input finishes in seconds.
        report = account(dpsgd_rdp(sigma, sample_rate, steps), search, 1e-5 if delta is None else delta,
                         profile=dpsgd_profile_or_skip(sigma, sample_rate, steps), adaptive_theorem=adaptive_theorem)
    _emit(report.to_dict(), _report_table(report, "Privacy of the whole search"), as_json)


@app.command("calibrate")
@naming_options(epsilon="--epsilon", target_epsilon="--epsilon", sample_rate="--sample-rate", steps="--steps",
                delta="--delta")
def calibrate_command(
    epsilon: Annotated[float, typer.Option("--epsilon", help="Target total ε of the search.")],
    sample_rate: Annotated[float, typer.Option("--sample-rate", help="Poisson sampling rate q ∈ (0,1].")],
    steps: Annotated[int, typer.Option("--steps", help="DP-SGD steps per run (≥ 1).")],
    runs: RunsOpt,
    delta: Annotated[float, typer.Option("--delta", help="δ ∈ (0,1).")] = 1e-5,
    theta: ThetaOpt = None,
    gamma: GammaOpt = None,
    mean: MeanOpt = None,
    C: SearchUpperOpt = None,
    c: SearchLowerOpt = None,
    max_runs: MaxRunsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Smallest DP-SGD noise multiplier σ whose whole search meets a total (ε, δ)."""
    search = _search(runs, theta, gamma, mean, C, c, max_runs)
    result = calibrate_dpsgd_sigma(epsilon, delta, sample_rate, steps, search)
    payload = {
        **result.report.to_dict(),
        "sigma": result.sigma,
        "sigma_tolerance": result.sigma_tolerance,
        "target_epsilon": epsilon,
    }
    extra = {"σ (noise multiplier)": f"[bold]{result.sigma:.5g}[/] (within +{result.sigma_tolerance:.1g})"}
    table = _report_table(result.report, f"Calibrated for ε ≤ {epsilon:g}", extra)
    _emit(payload, table, as_json)
