"""``dphypo.tune``: a private DP-SGD hyperparameter search with one honest (ε, δ), in one call.

The function builds the privacy mechanism (run-count distribution, the strategy's density bounds, the per-run DP-SGD
mechanism), calibrates the noise multiplier so the *whole search* meets the budget (or accounts a given σ), and runs the
DP-HyPO loop. Your training function receives the calibrated mechanism through ``run``::

    def train(params, run):
        model, optimizer, loader = run.make_private(model, optimizer, loader, max_grad_norm=params["clip"])
        ...train with lr=params["lr"]...
        return run.private_score(correct), model      # the score must be private too (privacy rule 4)

Calibration and the release use the minimum over every valid bound. For a uniform search (C = c = 1) the
privacy profile of one whole run (the DP-SGD PLD composed with the Gaussian PLD of the score noise,
:meth:`dphypo.train.DPSGDMechanism.profile`) adds the Koskela-Redberg-Wang 2024 profile bounds to the RDP
accountant; adaptive searches (C > c) are accounted with RDP only (Theorem B of docs/proofs/adaptive.md: no
profile bound is proven for them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Unpack

from dphypo.privacy import PrivacyAccounting, RepeatAndSelect, RunCountDistribution, calibrate_sigma, geometric
from dphypo.privacy.dpsgd_run import dpsgd_run_profile_or_skip
from dphypo.privacy.profiles import PldProfile, ProfileSkipped
from dphypo.search.evaluation import Objective
from dphypo.search.options import SearchOptionFields, SearchOptions, resolve_options
from dphypo.search.tuner import SearchResult, Tuner
from dphypo.space import SearchSpace
from dphypo.strategies import GPUCB, Strategy, Uniform
from dphypo.train.objective import check_dpsgd_space
from dphypo.train.recipe import DPSGD

if TYPE_CHECKING:
    from dphypo.train.mechanism import DPSGDMechanism

__all__ = ["DEFAULT_RUNS", "profile_or_skipped", "resolve_strategy", "tune"]

#: Default run count: geometric with E[T] = 20 (a few minutes on a CPU for the digits demo).
DEFAULT_RUNS = geometric(0.05)


def resolve_strategy(strategy: Strategy | str | None) -> Strategy:
    """The strategy a ``strategy=`` argument names.

    ``None``/``"uniform"`` → :class:`~dphypo.strategies.Uniform`, ``"gp"`` → :class:`~dphypo.strategies.GPUCB`
    (C = 2, c = 0.75), a strategy object as is. Uniform is the default because the project's equal-ε studies
    favour it at the default budget (ε = 8, E[T] = 20 on digits: GP-UCB −0.021 [−0.023, −0.019] paired,
    ``docs/studies.md``).

    Raises:
        ValueError: An unknown name.
    """
    if strategy is None or strategy == "uniform":
        return Uniform()
    if strategy == "gp":
        return GPUCB()
    if isinstance(strategy, str):
        raise ValueError(f"strategy must be 'gp', 'uniform' or a Strategy object, got {strategy!r}")
    if not callable(getattr(strategy, "start", None)):  # what the search calls of a strategy
        raise TypeError(f"strategy must be 'gp', 'uniform' or a Strategy (e.g. dphypo.GPUCB(C=2, c=0.75)), got "
                        f"{type(strategy).__name__}")
    return strategy


def accounted_search(strategy: Strategy, runs: RunCountDistribution | None) -> RepeatAndSelect:
    """The accounted search: T's distribution and the strategy's own density bounds (C, c)."""
    return RepeatAndSelect(runs if runs is not None else DEFAULT_RUNS, strategy.C, strategy.c)


def checked_search(
    space: SearchSpace, training: DPSGD, strategy: Strategy | str | None, runs: RunCountDistribution | None, *,
    epsilon: float | None, sigma: float | None,
) -> tuple[Strategy, RepeatAndSelect]:
    """The arguments :func:`tune` and :func:`~dphypo.api.tune_subsampled` share, checked; the strategy and search.

    Returns:
        The strategy ``strategy`` names (:func:`resolve_strategy`) and the search it is accounted with
        (:func:`accounted_search`).

    Raises:
        TypeError: ``training`` is not a :class:`~dphypo.train.DPSGD`, or ``strategy`` is no strategy.
        ValueError: A space DP-SGD cannot search, not exactly one of ``epsilon`` and ``sigma``, an unknown strategy
            name, or a search no theorem accounts.
    """
    if not isinstance(training, DPSGD):
        raise TypeError(f"training must be a dphypo.train.DPSGD, got {training!r}")
    check_dpsgd_space(space)
    if (epsilon is None) == (sigma is None):
        raise ValueError("give exactly one of epsilon (total budget to calibrate for) or sigma (fixed noise)")
    chosen = resolve_strategy(strategy)
    return chosen, accounted_search(chosen, runs)


def profile_or_skipped(mechanism: DPSGDMechanism) -> PldProfile | ProfileSkipped:
    """The per-run PLD, or a ProfileSkipped the accountant reports when it would exceed its size cap.

    The same construction as ``dphypo account`` and ``dphypo calibrate``
    (:func:`~dphypo.privacy.dpsgd_run.dpsgd_run_profile_or_skip`), so all three print the same ε.
    """
    return dpsgd_run_profile_or_skip(mechanism.sigma, mechanism.sample_rate, mechanism.steps,
                                     score_noise=mechanism.score_noise)


def tune(
    objective: Objective,
    space: SearchSpace,
    training: DPSGD,
    *,
    epsilon: float | None = None,
    sigma: float | None = None,
    delta: float = 1e-5,
    strategy: Strategy | str | None = None,
    runs: RunCountDistribution | None = None,
    max_lost: int = 0,
    options: SearchOptions | None = None,
    **option_fields: Unpack[SearchOptionFields],
) -> SearchResult:
    """Run a private hyperparameter search of DP-SGD candidates and release the best one with its total (ε, δ).

    Args:
        objective: ``objective(params, run) -> score`` or ``(score, artifact)``; it must train through
            ``run.make_private(...)`` (so the planned σ and sampling rate are used and checked) and return
            ``run.private_score(count)`` when ``training.score_noise`` is set.
        space: The grid (and prior) of hyperparameters.
        training: How every candidate trains (:class:`~dphypo.train.DPSGD`: batch size, epochs, public set sizes,
            score noise); σ is added by the search.
        epsilon: Total ε of the whole search; σ is calibrated to meet it. Give this or ``sigma``.
        sigma: A fixed noise multiplier (the total ε is then reported, not targeted).
        delta: δ of the guarantee.
        strategy: :class:`~dphypo.strategies.Uniform` (default; Algorithm 2, C = c = 1),
            :class:`~dphypo.strategies.GPUCB` (e.g. ``GPUCB(C=2, c=0.75)``: DP-HyPO Algorithm 3) or any Strategy; its
            ``C`` and ``c`` are the accounted density bounds. ``"uniform"``/``"gp"`` name those two with their
            defaults. Uniform is the default because the equal-ε studies favour it at ε = 8, E[T] = 20.
        runs: Distribution of the number of runs T (default: geometric, E[T] = 20).
        max_lost: Attempts the search may lose to a dead worker or process (kill -9, a lost Ray node) and still
            release; each is charged up front as one more released run, and ε and the calibrated σ include the
            charge whether or not it is used. One more loss stops the search without a release
            (docs/parallel.md). Default 0: any loss stops the search.
        options: How the search runs (:class:`~dphypo.search.options.SearchOptions`): ``direction``, the secret
            ``seed`` (default: 128 bits of fresh OS entropy, kept only in the curator-only history and journal),
            ``executor`` (``"sequential"``, ``"process"``, ``"ray"`` or an Executor), ``journal`` (a crash-safe
            file: a new search is sealed into it, an interrupted one resumes without redrawing T),
            ``runs_per_update`` and ``progress`` (called with run counts, never scores).
        **option_fields: The same fields as keywords (e.g. ``seed=1, executor="process"``), replacing those of
            ``options``.

    Returns:
        The publishable ``release`` (best params, score, artifact, ε, δ, and the mechanism) and the curator-only
        ``history``.

    Example:
        A logistic regression on 1,000 synthetic points, tuned over four learning rates at total ε = 4:

        >>> import torch
        >>> from torch import nn
        >>> from dphypo import DPSGD, LogFloat, SearchSpace, Uniform, tune
        >>> x, y = torch.randn(1000, 4, generator=torch.Generator().manual_seed(0)), torch.zeros(1000).long()
        >>> def objective(params, run):
        ...     model = nn.Linear(4, 2)
        ...     loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=50)
        ...     optimizer = torch.optim.SGD(model.parameters(), lr=params["lr"])
        ...     model, optimizer, loader = run.make_private(model, optimizer, loader, max_grad_norm=1.0)
        ...     for xb, yb in loader:
        ...         optimizer.zero_grad()
        ...         nn.functional.cross_entropy(model(xb), yb).backward()
        ...         optimizer.step()
        ...     return run.private_score(int((model(x[:300]).argmax(1) == y[:300]).sum()))  # a stand-in validation
        >>> space = SearchSpace({"lr": LogFloat(1e-3, 1.0, 4)})
        >>> training = DPSGD(batch_size=50, epochs=1, n_train=1000, n_val=300, score_noise=5.0)
        >>> result = tune(objective, space, training, epsilon=4.0, strategy=Uniform(), seed=1)
        >>> result.release.epsilon <= 4.0, result.release.params["lr"] in space.axes["lr"].values
        (True, True)
    """
    run_options = resolve_options("tune", options, option_fields)
    chosen, search = checked_search(space, training, strategy, runs, epsilon=epsilon, sigma=sigma)
    # The profile bounds are proven for uniform searches only (KRW 2024 Sec. 4); adaptive ones stay RDP.
    profile_for: Callable[[float], PldProfile | ProfileSkipped] | None = None
    if not search.adaptive:
        def profile_for(s: float) -> PldProfile | ProfileSkipped:
            return profile_or_skipped(training.mechanism(s))

    def tuner(mechanism: DPSGDMechanism, profile: PldProfile | ProfileSkipped | None = None) -> Tuner:
        privacy = PrivacyAccounting(search, mechanism.rdp(), delta, profile=profile, max_lost=max_lost)
        return Tuner(objective, space, privacy, strategy=chosen, mechanism=mechanism, options=run_options)

    # A changed resume is refused before σ is calibrated (the σ-dependent fields later).
    if run_options.journal is not None:
        tuner(training.mechanism(1.0 if sigma is None else sigma)).check_journal(
            ignore=("privacy.base", "privacy.profile", "mechanism"))
    if epsilon is not None:
        sigma = calibrate_sigma(epsilon, delta, search, lambda s: training.mechanism(s).rdp(),
                                profile_for_sigma=profile_for, max_lost=max_lost).sigma
    assert sigma is not None
    mechanism = training.mechanism(sigma)
    return tuner(mechanism, None if profile_for is None else profile_for(sigma)).run()
