"""``dphypo account`` and ``dphypo calibrate``: privacy of a whole search, and the σ that meets a budget.

Both account a DP-SGD candidate run exactly as ``dphypo tune`` does (:mod:`dphypo.privacy.dpsgd_run`: the
training, plus the Gaussian release of its score when ``--score-noise``/``--score-noise-accuracy`` is given), with
tune's defaults (a uniform search unless ``--C``/``--c`` say otherwise), so the three commands print one number.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer

from dphypo.cli.common import (
    AdaptiveTheoremOpt,
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
    split_rule_option,
)
from dphypo.privacy import (
    PrivacyAccounting,
    PrivacyReport,
    RepeatAndSelect,
    account_pure,
    calibrate_dpsgd_sigma,
    pure_dp_rdp,
)
from dphypo.privacy.dpsgd_run import dpsgd_run_profile_or_skip, dpsgd_run_rdp
from dphypo.privacy.split import SplitRule
from dphypo.privacy.split_account import SUM_BOUND, split_parts
from dphypo.privacy.validation import check_non_negative, check_positive, check_positive_int

#: ``dphypo account --help``.
ACCOUNT_HELP = "Total (ε, δ) of a private hyperparameter search, with its breakdown (the smallest valid bound)."
#: ``dphypo calibrate --help``.
CALIBRATE_HELP = ("Smallest DP-SGD noise multiplier σ whose whole search meets a total (ε, δ) (what dphypo tune "
                  "calibrates).")

ScoreNoiseAccuracyOpt = Annotated[
    float | None,
    typer.Option("--score-noise-accuracy", help="Std of the Gaussian noise on each run's released validation "
                 "accuracy (as dphypo tune's option; needs --n-val). Default: no score release."),
]
NValOpt = Annotated[
    int | None, typer.Option("--n-val", help="Validation-set size that turns --score-noise-accuracy into counts.")
]
ScoreNoiseOpt = Annotated[
    float | None,
    typer.Option("--score-noise", help="Std of the Gaussian noise on each run's released score count "
                 "(sensitivity 1), i.e. --score-noise-accuracy × --n-val."),
]
DataSplitOpt = Annotated[
    str,
    typer.Option("--data-split", help="How the runs' records were split into train / validation: permutation "
                 "(default; each run charged the sum of its DP-SGD and score parts) or per-record (each record's side "
                 "decided by that record alone, as dphypo tune --data-split per-record: the worse of the training "
                 "and validation sides, docs/proofs/split.md Theorem S; needs a score noise)."),
]
MaxLostOpt = Annotated[
    int, typer.Option("--max-lost", help="Lost attempts charged up front, as dphypo tune --max-lost (default 0).")
]
_SCORE_NAMES = {"score_noise": "--score-noise", "n_val": "--n-val", "max_lost": "--max-lost",
                "adaptive_theorem": "--adaptive-theorem", "delta": "--delta", "data_split": "--data-split"}


def _named(report: PrivacyReport, rule: SplitRule | None, count_noise: float | None) -> PrivacyReport:
    """The report with the bound it used named (release and table): Theorem S's max, or the sum of the two parts."""
    if rule is not None:
        assert report.split is not None
        return dataclasses.replace(report, split={**report.split, "rule": "per-record"})
    if count_noise is not None:
        return dataclasses.replace(report, bound=SUM_BOUND)
    return report


def _bound_rows(report: PrivacyReport) -> dict[str, str]:
    """The printed rows naming the bound (and, under a split, each side's ε)."""
    if report.bound is None:
        return {}
    rows = {"bound": report.bound}
    if report.split is not None:
        rows["  ε by side"] = (f"training {report.split['training_epsilon']:.4g}, validation "
                               f"{report.split['validation_epsilon']:.4g} (the worse is used)")
    return rows


def score_noise_counts(accuracy: float | None, n_val: int | None, counts: float | None) -> float | None:
    """The score noise in counts (the mechanism's unit) from ``--score-noise-accuracy``/``--n-val``/``--score-noise``.

    ``tune`` releases ``(correct + N(0, s²)) / n_val`` with ``s = accuracy × n_val``; ``None`` means no score is
    released (a public validation set, or accounting DP-SGD alone).

    Raises:
        ValueError: Both forms given, an accuracy without ``--n-val`` (or the reverse), or invalid values.
    """
    if counts is not None and (accuracy is not None or n_val is not None):
        raise ValueError("give the score noise once: --score-noise (counts) or --score-noise-accuracy with --n-val")
    if counts is not None:
        check_positive("--score-noise", counts)
        return float(counts)
    if accuracy is None and n_val is None:
        return None
    if accuracy is None or n_val is None:
        raise ValueError("--score-noise-accuracy and --n-val go together (the noise in counts is their product)")
    check_non_negative("--score-noise-accuracy", accuracy)
    check_positive_int("--n-val", n_val)
    return accuracy * n_val if accuracy > 0 else None  # tune's conversion, exactly (0: a public score)


@app.command("account", help=ACCOUNT_HELP)
@naming_options(sigma="--sigma", sample_rate="--sample-rate", steps="--steps", epsilon="--pure-epsilon",
                **_SCORE_NAMES)
def account_command(
    runs: RunsOpt,
    sigma: Annotated[float | None, typer.Option("--sigma", help="DP-SGD noise multiplier σ > 0.")] = None,
    sample_rate: Annotated[
        float | None, typer.Option("--sample-rate", help="Poisson sampling rate q ∈ (0,1].")
    ] = None,
    steps: Annotated[int | None, typer.Option("--steps", help="DP-SGD steps per run (≥ 1).")] = None,
    pure_epsilon: Annotated[
        float | None,
        typer.Option("--pure-epsilon", help="Each run is ε-DP (pure); reports the pure-DP bound (Theorem A∞ for "
                     "C > c, docs/proofs/adaptive.md; Papernot-Steinke Corollary 3 for a uniform search)."),
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
    score_noise_accuracy: ScoreNoiseAccuracyOpt = None,
    n_val: NValOpt = None,
    score_noise: ScoreNoiseOpt = None,
    max_lost: MaxLostOpt = 0,
    as_json: JsonOpt = False,
    adaptive_theorem: AdaptiveTheoremOpt = "B",
    data_split: DataSplitOpt = "permutation",
) -> None:
    """``dphypo account`` (help: :data:`ACCOUNT_HELP`).

    Typer declares one parameter per option; the body only builds the search and the score noise, accounts the
    pure-DP or the DP-SGD runs and renders the report.
    """
    search = _search(runs, theta, gamma, mean, C, c, max_runs)
    count_noise = score_noise_counts(score_noise_accuracy, n_val, score_noise)
    if pure_epsilon is not None:
        if any(v is not None for v in (sigma, sample_rate, steps, count_noise)) or max_lost:
            raise ValueError("--pure-epsilon cannot be combined with --sigma/--sample-rate/--steps, a score noise "
                             "or --max-lost")
        if data_split != "permutation":
            raise ValueError("--data-split per-record needs DP-SGD runs with a score noise (--sigma, --sample-rate, "
                             "--steps, --score-noise), not --pure-epsilon")
        report = _pure_report(search, pure_epsilon, delta, adaptive_theorem)
    else:
        rule = split_rule_option(data_split, count_noise)
        report = _named(_dpsgd_report(search, sigma, sample_rate, steps, count_noise, delta, max_lost,
                                      adaptive_theorem, rule), rule, count_noise)
    _emit(report.to_dict(), _report_table(report, "Privacy of the whole search", _bound_rows(report)), as_json)


def _pure_report(search: RepeatAndSelect, pure_epsilon: float, delta: float | None,
                 adaptive_theorem: str) -> PrivacyReport:
    """The search of ε-DP runs: pure DP without ``--delta``, else the (ε, δ) of their RDP curve."""
    if delta is None:
        return account_pure(pure_epsilon, search, adaptive_theorem=adaptive_theorem)
    return PrivacyAccounting(search, pure_dp_rdp(pure_epsilon), delta, adaptive_theorem=adaptive_theorem).account()


def _dpsgd_report(search: RepeatAndSelect, sigma: float | None, sample_rate: float | None, steps: int | None,
                  count_noise: float | None, delta: float | None, max_lost: int, adaptive_theorem: str,
                  rule: SplitRule | None = None) -> PrivacyReport:
    """The search of DP-SGD runs, each releasing its score with ``count_noise`` (``dphypo tune``'s accounting).

    Under a per-record split (``rule``) each part (training, score) with its own PLD, the worse side (Theorem S).

    Raises:
        ValueError: ``--sigma``, ``--sample-rate`` or ``--steps`` missing, or out of range.
    """
    if sigma is None or sample_rate is None or steps is None:
        missing = [n for n, v in (("--sigma", sigma), ("--sample-rate", sample_rate), ("--steps", steps))
                   if v is None]
        raise ValueError(f"missing {', '.join(missing)} (or give --pure-epsilon)")
    # The run's privacy profile (PLD, both neighbouring directions) adds the profile bounds of a uniform search;
    # none is proven for an adaptive one, so its PLD is not even built. A PLD over the size cap is skipped (RDP
    # only, the report's profile_skipped says why), so that every input finishes in seconds.
    curve = dpsgd_run_rdp(sigma, sample_rate, steps, score_noise=count_noise)
    if rule is not None:
        parts = split_parts(sigma, sample_rate, steps, score_noise=count_noise, rule=rule,
                            profiles=not search.adaptive)
        return PrivacyAccounting(search, curve, 1e-5 if delta is None else delta, max_lost=max_lost,
                                 adaptive_theorem=adaptive_theorem, split=parts).account()
    profile = None if search.adaptive else dpsgd_run_profile_or_skip(sigma, sample_rate, steps,
                                                                     score_noise=count_noise)
    return PrivacyAccounting(search, curve, 1e-5 if delta is None else delta, profile=profile, max_lost=max_lost,
                             adaptive_theorem=adaptive_theorem).account()


@app.command("calibrate", help=CALIBRATE_HELP)
@naming_options(epsilon="--epsilon", target_epsilon="--epsilon", sample_rate="--sample-rate", steps="--steps",
                **_SCORE_NAMES)
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
    score_noise_accuracy: ScoreNoiseAccuracyOpt = None,
    n_val: NValOpt = None,
    score_noise: ScoreNoiseOpt = None,
    max_lost: MaxLostOpt = 0,
    as_json: JsonOpt = False,
    adaptive_theorem: AdaptiveTheoremOpt = "B",
    data_split: DataSplitOpt = "permutation",
) -> None:
    """``dphypo calibrate`` (help: :data:`CALIBRATE_HELP`).

    Typer declares one parameter per option; the body only builds the search and the score noise, calibrates σ
    and renders the report.
    """
    search = _search(runs, theta, gamma, mean, C, c, max_runs)
    count_noise = score_noise_counts(score_noise_accuracy, n_val, score_noise)
    rule = split_rule_option(data_split, count_noise)
    result = calibrate_dpsgd_sigma(epsilon, delta, sample_rate, steps, search, score_noise=count_noise,
                                   max_lost=max_lost, adaptive_theorem=adaptive_theorem, split_rule=rule)
    report = _named(result.report, rule, count_noise)
    payload = {
        **report.to_dict(),
        "sigma": result.sigma,
        "sigma_tolerance": result.sigma_tolerance,
        "target_epsilon": epsilon,
    }
    extra = {"σ (noise multiplier)": f"[bold]{result.sigma:.5g}[/] (within +{result.sigma_tolerance:.1g})",
             **_bound_rows(report)}
    table = _report_table(report, f"Calibrated for ε ≤ {epsilon:g}", extra)
    _emit(payload, table, as_json)
