"""Run an Optuna-style objective (``trial.suggest_*``) inside dphypo's private search.

Optuna users write ``objective(trial)`` and call ``trial.suggest_float("lr", 1e-4, 1e-1, log=True)``. This
module lets such an objective be tuned privately without rewriting it:

* :meth:`dphypo.space.SearchSpace.from_optuna` turns the distributions into dphypo's grid (a continuous one
  discretised to ``points`` values, a stepped, integer or categorical one exact);
* :class:`OptunaObjective` runs ``objective(trial)`` on the grid point dphypo drew, through a
  :class:`PrivateFixedTrial` (an :class:`optuna.trial.FixedTrial`): ``trial.suggest_*`` returns exactly that
  grid value, and ``trial.run`` is the dphypo :class:`~dphypo.search.records.RunContext` to train through
  (``trial.run.make_private(...)``) and score with (``return trial.run.private_score(count)``);
* :func:`tune_optuna` is the one-call form of :func:`dphypo.tune`.

Only the *objective* is Optuna-style. dphypo keeps control of T, of sampling and of the release.

Why an Optuna sampler cannot be the interface
---------------------------------------------
A private search must be the mechanism the accountant analyses (Papernot & Steinke 2022; DP-HyPO, Wang et al.
2023); an Optuna study is a different one:

1. **Only the best run is released.** An Optuna sampler sees every trial's score and the study stores all of
   them (``study.trials``, ``study.trials_dataframe()``, dashboards). The ε of a private search covers the best
   run's (hyperparameters, model, score) only; releasing the other scores, or anything computed from them, is
   outside that ε.
2. **T is drawn secretly, once, before any data is touched, and never depends on scores.** The random
   repetition is what makes "release the best of T" cheap; ``n_trials=``, ``timeout=``, callbacks that stop the
   study (``MaxTrialsCallback``, early stopping on a target score) and the curator's own loop all fix or move T.
3. **Every sampling density is projected onto S_{C,c}**, the densities within [c, C] × the prior, for the
   adaptive theorem to hold (privacy rule 3). An arbitrary sampler's proposal (TPE, CMA-ES, a GP with an
   acquisition optimiser) is neither bounded in ratio to a prior nor even known as a density, so it can be
   neither projected nor accounted. dphypo's own strategies (uniform, GP-UCB softmax, top-set) produce a
   density over the grid and project it.
4. **No pruning.** ``trial.report`` / ``trial.should_prune`` stop runs on their intermediate (private, and
   un-noised) scores; no accounted mechanism covers that. In :class:`PrivateFixedTrial`, as in Optuna's
   ``FixedTrial``, ``report`` does nothing and ``should_prune()`` is always ``False``.

So the objective runs through a fixed trial whose values dphypo drew, and everything else stays in dphypo.

Import this module only with Optuna installed (``pip install "dphypo[optuna]"``).
"""

from __future__ import annotations

import contextlib
import math
import numbers
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

try:
    from optuna.distributions import (
        BaseDistribution,
        CategoricalChoiceType,
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )
    from optuna.trial import FixedTrial
except ImportError as _missing:  # pragma: no cover - exercised only without the extra
    raise ImportError('dphypo.integrations.optuna needs Optuna: pip install "dphypo[optuna]"') from _missing

from dphypo.api import tune
from dphypo.search.records import RunContext, RunMisuse
from dphypo.space import SearchSpace
from dphypo.space.axes import INDEX_RTOL
from dphypo.space.search_space import DEFAULT_OPTUNA_POINTS

if TYPE_CHECKING:
    from dphypo.search.tuner import SearchResult
    from dphypo.train.recipe import DPSGD

__all__ = ["OptunaObjective", "PrivateFixedTrial", "tune_optuna"]

#: Optuna's own tolerance for a value on a stepped float lattice (``FloatDistribution._contains``).
_STEP_TOLERANCE = 1e-8


class PrivateFixedTrial(FixedTrial):
    """An Optuna ``FixedTrial`` holding the grid point dphypo drew for one run, and that run.

    ``suggest_float`` / ``suggest_int`` / ``suggest_categorical`` (and the deprecated ``suggest_uniform``,
    ``suggest_loguniform``, ``suggest_discrete_uniform``) return the drawn value of the named parameter. A
    suggestion that does not fit the search space raises :class:`~dphypo.search.records.RunMisuse`, recorded on
    the run so that the search stops without a release even if the objective catches it: the parameter is not an
    axis of the space, the distribution does not contain every value of the axis (the objective and the space
    disagree; build the space with :meth:`~dphypo.space.SearchSpace.from_optuna` from the same distributions),
    or a name is suggested twice with different distributions. As a plain ``FixedTrial`` would raise
    ``ValueError``, which dphypo scores as a failure on the data, such a bug would otherwise pass silently as a
    run scored worst.

    ``report`` does nothing and ``should_prune()`` is always ``False``: pruning on intermediate scores is not
    part of any accounted mechanism (see the module docstring).

    Args:
        params: The drawn grid point, ``{name: value}``.
        run: The dphypo run this trial is (its number is the trial's ``number``).
        space: The search space the point was drawn from.
    """

    def __init__(self, params: Mapping[str, Any], run: RunContext, space: SearchSpace) -> None:
        super().__init__(dict(params), number=run.number)
        self._run = run
        self._space = space

    @property
    def run(self) -> RunContext:
        """The dphypo run: train through ``run.make_private(...)`` and return ``run.private_score(count)``."""
        return self._run

    def suggest_float(
        self, name: str, low: float, high: float, *, step: float | None = None, log: bool = False
    ) -> float:
        """The drawn value of ``name`` (a float), after checking the distribution against the space's axis."""
        with self._as_misuse("suggest_float", name):
            self._check(name, FloatDistribution(low, high, log=log, step=step))
            return float(super().suggest_float(name, low, high, step=step, log=log))

    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1, log: bool = False) -> int:
        """The drawn value of ``name`` (an int), after checking the distribution against the space's axis."""
        with self._as_misuse("suggest_int", name):
            self._check(name, IntDistribution(low, high, log=log, step=step))
            return int(super().suggest_int(name, low, high, step=step, log=log))

    def suggest_categorical(  # type: ignore[override]
        self, name: str, choices: Sequence[CategoricalChoiceType]
    ) -> CategoricalChoiceType:
        """The drawn choice of ``name``, after checking that every value of the space's axis is a choice."""
        with self._as_misuse("suggest_categorical", name):
            self._check(name, CategoricalDistribution(choices))
            return super().suggest_categorical(name, choices)

    def _check(self, name: str, distribution: BaseDistribution) -> None:
        axis = self._space.axes.get(name)
        if axis is None:
            raise ValueError(f"{name!r} is not a parameter of the search space (its axes: "
                             f"{', '.join(self._space.names)}); add it to the space")
        for value in axis.values:
            if not _contains(distribution, value):
                raise ValueError(f"{distribution} disagrees with the space's axis {axis!r}: the grid value {value!r}"
                                 " is outside it (build the space from the same distributions: "
                                 "SearchSpace.from_optuna)")

    @contextlib.contextmanager
    def _as_misuse(self, method: str, name: str) -> Iterator[None]:
        """Turn an error of a ``suggest_*`` call into a :class:`RunMisuse` recorded on the run."""
        try:
            yield
        except (TypeError, ValueError) as exc:
            message = f"run {self._run.number}: trial.{method}({name!r}, ...): {exc}"
            self._run.misuse.append(message)  # checked after the objective returns: a broad except cannot hide it
            raise RunMisuse(message) from exc


def _contains(distribution: BaseDistribution, value: Any) -> bool:
    """Whether ``trial.suggest_*`` with ``distribution`` could return the grid value ``value``."""
    if isinstance(distribution, CategoricalDistribution):
        return value in distribution.choices
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        return False
    x = float(value)
    if isinstance(distribution, IntDistribution):
        return (x.is_integer() and distribution.low <= x <= distribution.high
                and (int(x) - distribution.low) % distribution.step == 0)
    if isinstance(distribution, FloatDistribution):
        low, high = distribution.low, distribution.high
        slack = INDEX_RTOL * (high - low)  # the round-off a grid value may carry (as SearchSpace.index allows)
        if (distribution.log and x <= 0) or not low - slack <= x <= high + slack:
            return False
        if distribution.step is None:
            return True
        k = (x - low) / distribution.step
        return abs(k - round(k)) < _STEP_TOLERANCE
    return False  # pragma: no cover - suggest_* builds only the three kinds above


@dataclass(frozen=True)
class OptunaObjective:
    """An Optuna-style ``objective(trial)`` as a dphypo objective ``objective(params, run)``.

    Each run calls ``objective(trial)`` with a :class:`PrivateFixedTrial` holding the grid point dphypo drew.
    The objective must, exactly as a plain dphypo objective:

    * train through ``trial.run.make_private(model, optimizer, loader, max_grad_norm=...)`` (dphypo refuses a
      score from a run that never did);
    * return ``trial.run.private_score(count)``, ``count`` the number of correct validation predictions (an
      int), or ``(trial.run.private_score(count), model)`` to release the model; a bare accuracy is refused,
      because it would be released without the noise ε accounts for.

    Instances are frozen dataclasses: picklable (for ``executor="process"``) when ``objective`` is a module-level
    function, and described in a journal by the objective's qualified name and the space.

    Args:
        objective: ``objective(trial) -> score`` or ``(score, artifact)``, written against Optuna's trial API.
        space: The search space dphypo samples; every ``trial.suggest_*`` must name one of its axes with a
            distribution containing all of that axis's values.

    Example:
        >>> from optuna.distributions import FloatDistribution
        >>> from dphypo.space import SearchSpace
        >>> space = SearchSpace.from_optuna({"lr": FloatDistribution(1e-3, 1.0, log=True)}, points=4)
        >>> def objective(trial):
        ...     lr = trial.suggest_float("lr", 1e-3, 1.0, log=True)
        ...     ...  # build a model, then trial.run.make_private(...) and train with lr
        ...     return trial.run.private_score(correct)
        >>> wrapped = OptunaObjective(objective, space)  # pass it to dphypo.tune(wrapped, space, ...)
    """

    objective: Callable[[PrivateFixedTrial], Any]
    space: SearchSpace

    def __post_init__(self) -> None:
        if not callable(self.objective):
            raise TypeError(f"objective must be a callable objective(trial), got {self.objective!r}")
        if not isinstance(self.space, SearchSpace):
            raise TypeError(f"space must be a dphypo SearchSpace (e.g. SearchSpace.from_optuna(...)), got "
                            f"{self.space!r}")

    def __call__(self, params: dict[str, Any], run: RunContext) -> Any:
        """Run the objective on a fixed trial holding ``params``; its result goes to dphypo unchanged."""
        return self.objective(PrivateFixedTrial(params, run, self.space))


def tune_optuna(
    objective: Callable[[PrivateFixedTrial], Any],
    space: SearchSpace | Mapping[str, Any],
    training: DPSGD,
    *,
    epsilon: float | None = None,
    points: int | Mapping[str, int] | None = None,
    prior: Any = None,
    **options: Any,
) -> SearchResult:
    """Tune an Optuna-style objective privately: :func:`dphypo.tune` on :class:`OptunaObjective`.

    Args:
        objective: ``objective(trial)``; see :class:`OptunaObjective` for what it must train through and
            return.
        space: A :class:`~dphypo.space.SearchSpace`, or a mapping name → Optuna distribution converted by
            :meth:`~dphypo.space.SearchSpace.from_optuna`.
        training: How every candidate trains (:class:`~dphypo.train.DPSGD`), as in :func:`dphypo.tune`.
        epsilon: Total ε of the whole search (or give ``sigma=`` in ``options``).
        points: Values per continuous distribution (default 16), or per name; only with a mapping.
        prior: The prior over the grid (as in :class:`~dphypo.space.SearchSpace`); only with a mapping.
        **options: Every other keyword of :func:`dphypo.tune` (``sigma``, ``delta``, ``strategy``, ``runs``,
            ``seed``, ``executor``, ``journal``, ...).

    Returns:
        The search's result: the publishable ``release`` and the curator-only ``history``.

    Raises:
        ValueError: ``points`` or ``prior`` with a ``SearchSpace`` (which carries its own), or what
            :meth:`~dphypo.space.SearchSpace.from_optuna` and :func:`dphypo.tune` refuse.

    Example:
        A logistic regression on 1,000 synthetic points, its learning rate tuned at total ε = 4:

        >>> import torch
        >>> from optuna.distributions import FloatDistribution
        >>> from torch import nn
        >>> from dphypo import DPSGD, Uniform
        >>> from dphypo.integrations.optuna import tune_optuna
        >>> x, y = torch.randn(1000, 4, generator=torch.Generator().manual_seed(0)), torch.zeros(1000).long()
        >>> def objective(trial):
        ...     lr = trial.suggest_float("lr", 1e-3, 1.0, log=True)
        ...     model = nn.Linear(4, 2)
        ...     loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=50)
        ...     optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        ...     model, optimizer, loader = trial.run.make_private(model, optimizer, loader, max_grad_norm=1.0)
        ...     for xb, yb in loader:
        ...         optimizer.zero_grad()
        ...         nn.functional.cross_entropy(model(xb), yb).backward()
        ...         optimizer.step()
        ...     return trial.run.private_score(int((model(x[:300]).argmax(1) == y[:300]).sum()))
        >>> training = DPSGD(batch_size=50, epochs=1, n_train=1000, n_val=300, score_noise=5.0)
        >>> result = tune_optuna(objective, {"lr": FloatDistribution(1e-3, 1.0, log=True)}, training, points=4,
        ...                      epsilon=4.0, strategy=Uniform(), seed=1)
        >>> result.release.epsilon <= 4.0, result.release.params["lr"] in (0.001, 0.01, 0.1, 1.0)
        (True, True)
    """
    if isinstance(space, SearchSpace):
        if points is not None or prior is not None:
            raise ValueError("points and prior apply to a mapping of Optuna distributions; a SearchSpace is used as "
                             "is (it carries its own grid and prior)")
        grid = space
    else:
        grid = SearchSpace.from_optuna(space, points=DEFAULT_OPTUNA_POINTS if points is None else points,
                                       prior=prior)
    return tune(OptunaObjective(objective, grid), grid, training, epsilon=epsilon, **options)
