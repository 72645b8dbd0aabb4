"""The privacy of one DP-SGD candidate run: its training, then the noisy release of its score.

One implementation for every place that accounts a run — ``dphypo tune`` (calibration and release),
``dphypo account`` and ``dphypo calibrate``, :class:`dphypo.train.DPSGDMechanism` — so the same settings give the
same ε everywhere.

* RDP: ``ε(α) = ε_DPSGD(α) + α / (2 s²)`` — the Poisson-subsampled Gaussian composed ``steps`` times (Mironov,
  Talwar & Zhang 2019) plus the Gaussian mechanism with std ``s = score_noise`` on a sensitivity-1 count
  (Mironov 2017, Propositions 1 and 7).
* Privacy profile: the DP-SGD PLD (add/remove, pessimistic connect-the-dots, both directions;
  :func:`~dphypo.privacy.profiles.dpsgd_profile`) composed with the PLD of the same Gaussian score mechanism
  (Koskela-Redberg-Wang 2024 Sec. 6.2 use the same numerical accountant).
* Event (what both bound, :mod:`dphypo.privacy.events`): ``ComposedDpEvent([SelfComposedDpEvent(
  PoissonSampledDpEvent(q, GaussianDpEvent(σ)), steps), GaussianDpEvent(score_noise)])`` (the score count has
  sensitivity 1, so dp_accounting's noise multiplier is the std itself); the training's event alone without a score.

The sum holds whatever the split (``--data-split permutation``, subsampled tuning, and a Python ``DPSGD`` without a
split rule). Under a **per-record split** (each record's side decided by a rule that depends on that record alone,
:class:`~dphypo.privacy.split.SplitRule`; ``dphypo.train.data.PerRecordSplit``; ``dphypo tune``'s default), a record
is in training or in validation, never both, and docs/proofs/split.md (Theorem S, proven) bounds the whole search by
the worse of the two sides:

* :func:`dpsgd_run_split_rdp` / :func:`dpsgd_run_split_profile`: the per-run bound ``max(training, score)``, a valid
  per-run input to every selection theorem (Corollary S2; no ``DpEvent`` describes it, so it is never paired with
  a PLD by event);
* :func:`runs_split_rdp` / :func:`runs_split_profile`: a fixed composition of runs (released probes and a final
  run, the default two-stage design), bounded side by side: the composition of every run's DP-SGD against the
  composition of every score release (tighter than composing per-run maxima; ``bound="mixture"`` for a secret
  per-record draw).

A per-record split makes the realised split sizes data-dependent: the sampling rate, the steps and the divisor of
the score must come from the public nominal sizes fixed before the split (docs/proofs/split.md §5).

Pure numpy/scipy and dp_accounting; no torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from dphypo.privacy.profiles import (
    DEFAULT_DISCRETIZATION,
    MAX_PLD_POINTS,
    PldProfile,
    ProfileSkipped,
    dpsgd_profile,
    profile_or_skipped,
)
from dphypo.privacy.rdp import RdpCurve, compose, dpsgd_rdp, gaussian_rdp
from dphypo.privacy.split import SplitBound, SplitProfile, SplitRule, split_rdp
from dphypo.privacy.validation import check_int_at_least, check_positive

__all__ = [
    "RUN_PROFILE_DISCRETIZATION",
    "RunGroup",
    "dpsgd_run_profile",
    "dpsgd_run_profile_or_skip",
    "dpsgd_run_rdp",
    "dpsgd_run_split_profile",
    "dpsgd_run_split_profile_or_skip",
    "dpsgd_run_split_rdp",
    "runs_split_profile",
    "runs_split_rdp",
    "score_release_profile",
]

#: PLD discretisation of a candidate run's profile wherever a run is accounted (tune, account, calibrate): one
#: value, so that every command prints the same ε for the same settings.
RUN_PROFILE_DISCRETIZATION = DEFAULT_DISCRETIZATION


def _check_score_noise(score_noise: float | None) -> None:
    check_positive("score_noise", score_noise, optional=True)


def dpsgd_run_rdp(
    sigma: float, sample_rate: float, steps: int, *, score_noise: float | None = None,
    orders: Iterable[float] | None = None,
) -> RdpCurve:
    """RDP of one candidate run: DP-SGD training composed with the Gaussian release of its score count.

    Args:
        sigma: DP-SGD noise multiplier σ > 0.
        sample_rate: Poisson sampling rate q ∈ (0, 1].
        steps: Noisy gradient steps ≥ 1.
        score_noise: Std (in counts) of the Gaussian noise on the released count (sensitivity 1); ``None`` when
            no score is released privately.
        orders: RDP orders (default :data:`~dphypo.privacy.DEFAULT_ORDERS`).

    Returns:
        The curve ε(α), shape ``(K,)``; its event is the training's composed with ``GaussianDpEvent(score_noise)``.
    """
    _check_score_noise(score_noise)
    training = dpsgd_rdp(sigma, sample_rate, steps, orders=orders)
    if score_noise is None:
        return training
    return compose(training, gaussian_rdp(float(score_noise), sensitivity=1.0, orders=orders))


def dpsgd_run_profile(
    sigma: float, sample_rate: float, steps: int, *, score_noise: float | None = None,
    discretization: float = RUN_PROFILE_DISCRETIZATION, max_points: int = MAX_PLD_POINTS,
) -> PldProfile:
    """Privacy profile (PLD, both directions) of one candidate run: DP-SGD, then the Gaussian score release.

    Args:
        sigma: DP-SGD noise multiplier σ > 0.
        sample_rate: Poisson sampling rate q ∈ (0, 1].
        steps: Noisy gradient steps ≥ 1.
        score_noise: Std (in counts) of the score noise, or ``None`` (training only).
        discretization: PLD grid interval (the training PLD may coarsen it to fit ``max_points``; the score's
            PLD then uses the same interval, as composition requires).
        max_points: Cap on the grid points of one direction of the training PLD.

    Returns:
        The profile; its event equals :func:`dpsgd_run_rdp`'s for the same arguments.

    Raises:
        ProfileTooLargeError: The training PLD cannot fit ``max_points`` even at the coarsest grid.
    """
    from dphypo.privacy.events import gaussian_event
    from dphypo.privacy.profiles import gaussian_step_pld

    _check_score_noise(score_noise)
    training = dpsgd_profile(sigma, sample_rate, steps, discretization=discretization, max_points=max_points)
    if score_noise is None:
        return training
    # dp_accounting's from_gaussian_mechanism(score_noise, sensitivity 1, pessimistic, connect-the-dots, add/remove)
    # at the training PLD's interval (coarser if it was capped), dense and cached (the same for every σ).
    score = gaussian_step_pld(float(score_noise), 1.0, training.discretization)
    score_event = gaussian_event(float(score_noise), 1.0)
    return training.compose(
        PldProfile(score, f"Gaussian score count (std={float(score_noise):g}, sensitivity 1)", score_event)
    )


def dpsgd_run_profile_or_skip(
    sigma: float, sample_rate: float, steps: int, *, score_noise: float | None = None
) -> PldProfile | ProfileSkipped:
    """:func:`dpsgd_run_profile`, or a :class:`~dphypo.privacy.profiles.ProfileSkipped` naming why it is too large.

    :func:`~dphypo.privacy.profiles.profile_or_skipped` of :func:`dpsgd_run_profile`: the accountant then reports the
    RDP bounds only (and says so), so every input finishes in seconds. What ``dphypo tune`` (``plan.profile``),
    ``dphypo account`` and ``dphypo calibrate`` use, so all three print the same ε.
    """
    return profile_or_skipped(lambda: dpsgd_run_profile(sigma, sample_rate, steps, score_noise=score_noise))


# --- Per-record split (opt-in; docs/proofs/split.md) ------------------------------------------------------------------


def _require_score_noise(score_noise: float | None) -> float:
    if score_noise is None:
        raise ValueError(
            "the split bound needs a private score (score_noise in counts): without it the validation side releases "
            "an exact count and no bound covers a record in validation; got score_noise=None"
        )
    check_positive("score_noise", score_noise)
    return float(score_noise)


def score_release_profile(score_noise: float, *, discretization: float = RUN_PROFILE_DISCRETIZATION) -> PldProfile:
    """PLD (pessimistic, add/remove, both directions) of one Gaussian score release: std ``score_noise`` counts.

    The score part of :func:`dpsgd_run_profile`, alone: the validation side of a per-record split.
    """
    score_noise = _require_score_noise(score_noise)
    from dp_accounting import privacy_accountant
    from dp_accounting.pld import privacy_loss_distribution

    from dphypo.privacy.events import gaussian_event

    pld = privacy_loss_distribution.from_gaussian_mechanism(
        standard_deviation=score_noise, sensitivity=1.0, pessimistic_estimate=True,
        value_discretization_interval=discretization, use_connect_dots=True,
        neighboring_relation=privacy_accountant.NeighboringRelation.ADD_OR_REMOVE_ONE,
    )
    name = f"Gaussian score count (std={score_noise:g}, sensitivity 1)"
    return PldProfile(pld, name, gaussian_event(score_noise, 1.0))


def dpsgd_run_split_rdp(
    sigma: float, sample_rate: float, steps: int, *, score_noise: float | None, rule: SplitRule,
    orders: Iterable[float] | None = None,
) -> RdpCurve:
    """Per-run RDP bound of one candidate run under a per-record split: ``max(ε_DPSGD(α), α / (2 s²))``.

    docs/proofs/split.md, Corollary S2: with the record's side fixed, each run's divergence on the pair is at most
    its side's part, so the maximum is a valid per-run curve for every selection theorem. Only the maximum: a
    per-run mixture is not valid once runs are composed or selected (the side is shared by every run).

    Args:
        sigma: DP-SGD noise multiplier σ > 0.
        sample_rate: Poisson sampling rate q ∈ (0, 1], from the public nominal training size.
        steps: Noisy gradient steps ≥ 1, from the public nominal training size.
        score_noise: Std (in counts) of the score noise; required (the validation side needs a private score).
        rule: The per-record split rule.
        orders: RDP orders (default :data:`~dphypo.privacy.DEFAULT_ORDERS`).

    Returns:
        The curve ε(α), shape ``(K,)``, never above :func:`dpsgd_run_rdp`'s; its ``event`` is ``None``.

    Raises:
        ValueError: ``score_noise`` missing or invalid, invalid DP-SGD settings or rule.
    """
    noise = _require_score_noise(score_noise)
    if not isinstance(rule, SplitRule):
        raise ValueError(f"rule must be a SplitRule, got {rule!r}")
    training = dpsgd_rdp(sigma, sample_rate, steps, orders=orders)
    return split_rdp(training, gaussian_rdp(noise, sensitivity=1.0, orders=orders), rule, bound="max")


def dpsgd_run_split_profile(
    sigma: float, sample_rate: float, steps: int, *, score_noise: float | None, rule: SplitRule,
    discretization: float = RUN_PROFILE_DISCRETIZATION, max_points: int = MAX_PLD_POINTS,
) -> SplitProfile:
    """Per-run profile bound under a per-record split: ``max(δ_DPSGD(ε), δ_score(ε))`` (Corollary S2).

    Args:
        sigma: DP-SGD noise multiplier σ > 0.
        sample_rate: Poisson sampling rate q ∈ (0, 1].
        steps: Noisy gradient steps ≥ 1.
        score_noise: Std (in counts) of the score noise; required.
        rule: The per-record split rule.
        discretization: PLD grid interval.
        max_points: Cap on the grid points of one direction of the training PLD.

    Returns:
        The profile (both directions), never above :func:`dpsgd_run_profile`'s.
    """
    noise = _require_score_noise(score_noise)
    training = dpsgd_profile(sigma, sample_rate, steps, discretization=discretization, max_points=max_points)
    return SplitProfile(training, score_release_profile(noise, discretization=training.discretization), rule, "max")


def dpsgd_run_split_profile_or_skip(
    sigma: float, sample_rate: float, steps: int, *, score_noise: float | None, rule: SplitRule
) -> SplitProfile | ProfileSkipped:
    """:func:`dpsgd_run_split_profile`, or a :class:`~dphypo.privacy.profiles.ProfileSkipped` (the PLD is too large).

    Invalid arguments (a missing score noise included) still raise ``ValueError``.
    """
    _require_score_noise(score_noise)
    return profile_or_skipped(
        lambda: dpsgd_run_split_profile(sigma, sample_rate, steps, score_noise=score_noise, rule=rule)
    )


@dataclass(frozen=True)
class RunGroup:
    """``count`` runs with the same privacy settings, part of a fixed composition (e.g. 20 released probes).

    Args:
        sigma: DP-SGD noise multiplier σ > 0.
        sample_rate: Poisson sampling rate q ∈ (0, 1] (from the public nominal training size).
        steps: Noisy gradient steps ≥ 1.
        score_noise: Std (in counts) of each run's released score (sensitivity 1), > 0.
        count: Number of such runs ≥ 1.
    """

    sigma: float
    sample_rate: float
    steps: int
    score_noise: float
    count: int = 1

    def __post_init__(self) -> None:
        check_positive("sigma", self.sigma)
        check_int_at_least("steps", self.steps, 1)
        check_int_at_least("count", self.count, 1)
        object.__setattr__(self, "score_noise", _require_score_noise(self.score_noise))
        dpsgd_rdp(self.sigma, self.sample_rate, self.steps, orders=(2.0,))  # validates q


def _check_groups(groups: Sequence[RunGroup]) -> tuple[RunGroup, ...]:
    groups = tuple(groups)
    if not groups or not all(isinstance(g, RunGroup) for g in groups):
        raise ValueError(f"groups must be a non-empty sequence of RunGroup, got {groups!r}")
    return groups


def runs_split_rdp(
    groups: Sequence[RunGroup], rule: SplitRule, *, bound: SplitBound = "max", orders: Iterable[float] | None = None,
) -> RdpCurve:
    """RDP of a fixed composition of runs under a per-record split (Theorem S; Corollary S3 for two stages).

    Training side: every run's DP-SGD composed; validation side: every score release composed; then
    :func:`~dphypo.privacy.split.split_rdp`.

    Args:
        groups: The composed runs (e.g. ``[RunGroup(σ₁, q, 34, s, 20), RunGroup(σ₂, q, 170, s, 1)]``).
        rule: The per-record split rule.
        bound: ``"max"`` or ``"mixture"`` (``rule.kind == "draw"`` only).
        orders: RDP orders.

    Returns:
        The curve, at most the composition of :func:`dpsgd_run_rdp` over the runs at every order.
    """
    groups = _check_groups(groups)
    training = compose(*(dpsgd_rdp(g.sigma, g.sample_rate, g.steps, orders=orders).repeated(g.count) for g in groups))
    scores = compose(*(gaussian_rdp(g.score_noise, sensitivity=1.0, orders=orders).repeated(g.count) for g in groups))
    return split_rdp(training, scores, rule, bound=bound)


def runs_split_profile(
    groups: Sequence[RunGroup], rule: SplitRule, *, bound: SplitBound = "max",
    discretization: float = RUN_PROFILE_DISCRETIZATION, max_points: int = MAX_PLD_POINTS,
) -> SplitProfile:
    """Privacy profile of a fixed composition of runs under a per-record split (Theorem S, Corollary S3).

    The training PLDs of every run composed (dp_accounting, pessimistic, both directions) against the score PLDs
    of every run composed; :class:`~dphypo.privacy.split.SplitProfile` of the two.

    Args:
        groups: The composed runs.
        rule: The per-record split rule.
        bound: ``"max"`` or ``"mixture"`` (``rule.kind == "draw"`` only).
        discretization: PLD grid interval.
        max_points: Cap on the grid points of one direction of each training PLD.

    Returns:
        The profile.

    Raises:
        ValueError: Training PLDs that had to be coarsened to different grids (they cannot be composed), or
            invalid arguments.
    """
    groups = _check_groups(groups)
    if not isinstance(rule, SplitRule):
        raise ValueError(f"rule must be a SplitRule, got {rule!r}")
    rule.check_bound(bound)
    trainings = [dpsgd_profile(g.sigma, g.sample_rate, g.steps, discretization=discretization, max_points=max_points)
                 for g in groups]
    grids = {t.discretization for t in trainings}
    if len(grids) != 1:
        raise ValueError(f"the runs' training PLDs have different discretisations {sorted(grids)} and cannot be "
                         "composed; use a coarser discretization")
    grid = grids.pop()
    training = _self_composed(trainings[0], groups[0].count)
    for t, g in zip(trainings[1:], groups[1:], strict=True):
        training = training.compose(_self_composed(t, g.count))
    scores = _self_composed(score_release_profile(groups[0].score_noise, discretization=grid), groups[0].count)
    for g in groups[1:]:
        scores = scores.compose(_self_composed(score_release_profile(g.score_noise, discretization=grid), g.count))
    return SplitProfile(training, scores, rule, bound)


def _self_composed(profile: PldProfile, count: int) -> PldProfile:
    if count == 1:
        return profile
    from dphypo.privacy.events import repeat_event

    event = repeat_event(profile.event, count)
    return PldProfile(profile.pld.self_compose(count), f"{count} x ({profile.name})", event)
