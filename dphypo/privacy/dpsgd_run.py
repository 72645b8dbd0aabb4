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

The training and validation splits are disjoint, so under add/remove-one a neighbouring record touches only one of
the two mechanisms and parallel composition (the maximum) would also be valid; the sum is the conservative choice.

Pure numpy/scipy and dp_accounting; no torch.
"""

from __future__ import annotations

from collections.abc import Iterable

from dphypo.privacy.profiles import (
    DEFAULT_DISCRETIZATION,
    MAX_PLD_POINTS,
    PldProfile,
    ProfileSkipped,
    dpsgd_profile,
    profile_or_skipped,
)
from dphypo.privacy.rdp import RdpCurve, compose, dpsgd_rdp, gaussian_rdp
from dphypo.privacy.validation import check_positive

__all__ = ["RUN_PROFILE_DISCRETIZATION", "dpsgd_run_profile", "dpsgd_run_profile_or_skip", "dpsgd_run_rdp"]

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
    from dp_accounting import privacy_accountant
    from dp_accounting.pld import privacy_loss_distribution

    from dphypo.privacy.events import gaussian_event

    _check_score_noise(score_noise)
    training = dpsgd_profile(sigma, sample_rate, steps, discretization=discretization, max_points=max_points)
    if score_noise is None:
        return training
    score = privacy_loss_distribution.from_gaussian_mechanism(
        standard_deviation=float(score_noise),
        sensitivity=1.0,
        pessimistic_estimate=True,
        value_discretization_interval=training.discretization,  # coarser if the training PLD was capped
        use_connect_dots=True,
        neighboring_relation=privacy_accountant.NeighboringRelation.ADD_OR_REMOVE_ONE,
    )
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
