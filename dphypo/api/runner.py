"""``dphypo.tune``: one entry point for every search design, each given as one value (:mod:`dphypo.api.design`).

:func:`tune` takes the design as a value and runs it with its runner: a :class:`~dphypo.api.design.SingleStage`
search with :func:`dphypo.api.search.tune`, a :class:`~dphypo.api.design.TwoStageSearch` (or a bare
:class:`~dphypo.privacy.two_stage.TwoStage`) with :func:`~dphypo.api.two_stage.tune_two_stage`, and
:class:`~dphypo.api.design.Subsampled` tuning with :func:`~dphypo.api.subsampled.tune_subsampled`. Without a design
it runs the default of ``dphypo tune --design auto`` (:func:`~dphypo.api.design.auto_design`), unless an argument
only a single-stage search takes says otherwise (the rule of ``dphypo tune``'s options).
"""

from __future__ import annotations

from typing import Unpack

from dphypo.api.design import Design, SingleStage, Subsampled, TwoStageSearch, as_design, auto_design
from dphypo.api.search import tune as tune_single_stage
from dphypo.api.subsampled import tune_subsampled
from dphypo.api.two_stage import tune_two_stage
from dphypo.privacy import RunCountDistribution
from dphypo.privacy.two_stage import TwoStage
from dphypo.search.evaluation import Objective
from dphypo.search.options import SearchOptionFields, SearchOptions, resolve_options
from dphypo.search.tuner import SearchResult
from dphypo.space import SearchSpace
from dphypo.strategies import Strategy
from dphypo.train.recipe import DPSGD

__all__ = ["run_design", "takes_the_default_design", "tune"]


def tune(
    objective: Objective,
    space: SearchSpace,
    training: DPSGD,
    *,
    design: Design | TwoStage | None = None,
    epsilon: float | None = None,
    sigma: float | None = None,
    delta: float = 1e-5,
    strategy: Strategy | str | None = None,
    runs: RunCountDistribution | None = None,
    max_lost: int = 0,
    options: SearchOptions | None = None,
    **option_fields: Unpack[SearchOptionFields],
) -> SearchResult:
    """Run a private hyperparameter search of DP-SGD candidates and release it with its total (ε, δ).

    **Which design runs.** ``design`` names it: ``dphypo.SingleStage(strategy=..., runs=...)`` (one private
    selection, the best run released), ``dphypo.TwoStageSearch(two_stage, strategy=..., probe_epochs=...)`` or a bare
    ``dphypo.TwoStage(...)`` (cheap probes whose outcome is released, then one committed run), or
    ``dphypo.Subsampled(fraction, ...)`` (the search on a Poisson subsample, then one final run). Without ``design``:

    * an argument only a single-stage search takes — ``strategy``, ``runs``, ``sigma`` or a space with batch-size /
      epochs axes — runs ``SingleStage(strategy, runs)`` (as ``dphypo tune``'s options of the same names do);
    * otherwise the default design for ``epsilon``: :func:`~dphypo.api.design.auto_design`'s pick, the default of
      ``dphypo tune`` (two-stage: 20 released probes at a fifth of the epochs and one committed run at ε ≥ 8, 10
      probes below, a probe selection or a single-stage search where those cannot run).

    ``strategy`` and ``runs`` are fields of a design: given together with ``design`` they are refused.

    Args:
        objective: ``objective(params, run) -> score`` or ``(score, artifact)`` training through
            ``run.make_private(...)`` under the mechanism ``run`` carries (:func:`dphypo.api.search.tune`).
        space: The grid (and prior) of hyperparameters.
        training: How a (final) run trains (:class:`~dphypo.train.DPSGD`).
        design: The search design (above); ``None``: the default.
        epsilon: Total ε; the design's noise is calibrated to meet it. Give this or ``sigma``.
        sigma: A fixed noise multiplier (single-stage and subsampled designs; the total ε is then reported).
        delta: δ of the guarantee.
        strategy: The single-stage strategy when no ``design`` is given (:func:`dphypo.api.search.tune`).
        runs: The single-stage law of T when no ``design`` is given.
        max_lost: Lost attempts charged up front (per stage for a two-stage design); the default design is picked
            with them charged.
        options: How the runs execute (:class:`~dphypo.search.options.SearchOptions`).
        **option_fields: The same fields as keywords.

    Returns:
        The design runner's result: a :class:`~dphypo.search.tuner.SearchResult`, a
        :class:`~dphypo.api.two_stage.TwoStageSearchResult` or a :class:`~dphypo.api.subsampled.SubsampledSearchResult`.

    Raises:
        TypeError: ``strategy``/``runs`` with a ``design``, or a design of an unknown type.
        ValueError: Arguments the design's runner refuses, or no default design runs at ``epsilon`` (one line).

    Example:
        A logistic regression on 1,000 synthetic points, a uniform single-stage search over four learning rates at
        total ε = 4, the design given as a value:

        >>> import torch
        >>> from torch import nn
        >>> from dphypo import DPSGD, LogFloat, SearchSpace, SingleStage, Uniform, tune
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
        >>> result = tune(objective, space, training, design=SingleStage(strategy=Uniform()), epsilon=4.0, seed=1)
        >>> result.release.epsilon <= 4.0, result.release.params["lr"] in space.axes["lr"].values
        (True, True)
    """
    run_options = resolve_options("tune", options, option_fields)
    if design is None and not takes_the_default_design(space, epsilon, sigma, strategy, runs):
        return tune_single_stage(objective, space, training, epsilon=epsilon, sigma=sigma, delta=delta,
                                 strategy=strategy, runs=runs, max_lost=max_lost, options=run_options)
    if design is None:
        assert epsilon is not None  # takes_the_default_design
        design, _ = auto_design(training, epsilon, delta, max_lost=max_lost)
    elif strategy is not None or runs is not None:
        raise TypeError("strategy and runs are fields of the design: give dphypo.SingleStage(strategy=..., runs=...) "
                        "(or the two-stage design's own strategy) instead of both")
    return run_design(as_design(design), objective, space, training, epsilon=epsilon, sigma=sigma, delta=delta,
                      max_lost=max_lost, options=run_options)


def takes_the_default_design(
    space: SearchSpace, epsilon: float | None, sigma: float | None, strategy: Strategy | str | None,
    runs: RunCountDistribution | None,
) -> bool:
    """Whether :func:`tune` without ``design`` runs the default design: no argument only a single-stage search takes.

    ``strategy``, ``runs``, ``sigma`` or a space whose axes change a run's privacy keep the single-stage search (a
    journal and ``max_lost`` suit every design); so does a missing ``epsilon`` (the single-stage checks then say
    what is missing).
    """
    single = (strategy is not None or runs is not None or sigma is not None
              or bool(getattr(space, "changes_privacy", False)))
    return epsilon is not None and not single


def run_design(
    design: Design,
    objective: Objective,
    space: SearchSpace,
    training: DPSGD,
    *,
    epsilon: float | None,
    sigma: float | None,
    delta: float,
    max_lost: int,
    options: SearchOptions,
) -> SearchResult:
    """Run ``design`` with its runner.

    Raises:
        ValueError: An argument the design's runner does not take (``sigma`` of a two-stage search).
    """
    if isinstance(design, SingleStage):
        return tune_single_stage(objective, space, training, epsilon=epsilon, sigma=sigma, delta=delta,
                                 strategy=design.search_strategy, runs=design.runs, max_lost=max_lost,
                                 options=options)
    if isinstance(design, Subsampled):
        return tune_subsampled(objective, space, training, fraction=design.fraction,
                               variant=design.variant,  # type: ignore[arg-type]  # checked by Subsampled
                               epsilon=epsilon, sigma=sigma, delta=delta, strategy=design.search_strategy,
                               runs=design.runs, max_lost=max_lost, options=options)
    assert isinstance(design, TwoStageSearch)
    if sigma is not None:
        raise ValueError("a two-stage design calibrates two noise multipliers from epsilon: give epsilon, or call "
                         "dphypo.tune_two_stage(..., sigmas=(probe sigma, final sigma))")
    return tune_two_stage(objective, space, training, design.two_stage, probe_epochs=design.probe_epochs,
                          epsilon=epsilon, delta=delta, strategy=design.probe_strategy, max_lost=max_lost,
                          placement=design.placement, recommend=design.recommend,
                          probe_score_noise_factor=design.probe_score_noise_factor, options=options)
