"""The GP session: B searches' GPs, observed run by run, refitted on a schedule and conditioned in between.

One :class:`GPSession` serves a single search (member 0 of a batch of one, the tuner) and B searches advanced
together (the batched simulator); both follow the same rules, so the two paths are the same code:

* **observe** appends one run per listed member (grid index, score; a failed run has a non-finite score);
* **densities** gives each listed member the density for its next draw: the prior before any observation; the
  previous density (or the prior) whenever the GP is unavailable (one observation, all-equal scores, a fitting
  error: a ``"fallback"`` event); else the rule's density (:mod:`.rules`) of the member's GP posterior.

Two algorithm choices, each depending only on the member's own observations (never on public values or other
members), so runs stay deterministic at equal seeds:

* Warm start: each member's GP fit starts L-BFGS-B from the hyperparameters of that member's last successful fit
  instead of the priors' modes, so a fit costs a few iterations once the hyperparameters settle. It changes the
  optimiser's start, not the likelihood it maximises.
* Refit schedule (``refit_growth`` = r ≥ 0): a member's hyperparameters and ``Standardize`` transform are refitted
  at step t when t ≥ (1 + r)·t_fit, t_fit the number of observations at its last fit (and whenever it has no
  usable fit). In between, the last fitted GP is conditioned exactly on each new observation
  (:class:`~dphypo.strategies.gp.posterior.GridPosterior`, O(R·n) per observation), so the density at step t is
  the posterior of all t observations under the hyperparameters fitted at t_fit. r = 0 refits at every step
  (DP-HyPO Algorithm 3). With r > 0 a search of T runs makes about 1/r + log(rT)/log(1 + r) fits instead of T.
  A failed run is conditioned on with the value it is imputed with when its member's next density is computed
  (the worst finite score so far); a refit re-imputes. The schedule is configuration, fixed before any data.

Observations only ever extend a member's history, so the model of a member always holds a prefix of it: nothing
has to be re-checked, and a density needs only the observations since the last one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from numpy.typing import ArrayLike

from dphypo.strategies.base import (
    Direction,
    StrategyEvent,
    check_direction,
    check_observations,
    check_seed,
    checked_prior,
    orient,
    step_seed,
)

if TYPE_CHECKING:
    from dphypo.space import SearchSpace
    from dphypo.strategies.gp.posterior import GridPosterior

__all__ = ["GPRule", "GPSession"]


class GPRule(Protocol):
    """What a GP session needs from its strategy: the refit schedule and the rule from posterior to density."""

    @property
    def refit_growth(self) -> float:
        """Refit a member's GP once its observations grew by this fraction since its last fit (0: every step)."""
        ...

    def densities(
        self, mean: np.ndarray, std: np.ndarray, loc: np.ndarray, scale: np.ndarray, prior: np.ndarray
    ) -> np.ndarray:
        """Unprojected densities of m members, shape ``(m, n)``, from their posteriors (oriented scores).

        Args:
            mean: Posterior means, shape ``(m, n)``.
            std: Posterior standard deviations, shape ``(m, n)``.
            loc: Mean of each member's observed scores, shape ``(m,)``.
            scale: Their sample standard deviation, shape ``(m,)``.
            prior: Prior over the grid, shape ``(n,)``.
        """
        ...


class GPSession:
    """B searches' GPs (a :class:`~dphypo.strategies.base.BatchSession`), observed run by run (module docstring).

    Open with :meth:`open`.

    Args:
        rule: The strategy (its ``densities`` and ``refit_growth``).
        grid: The grid's :class:`~dphypo.strategies.gp.posterior.GridFactors`.
        prior: Prior over the grid, shape ``(n,)``.
        direction: ``"maximize"`` or ``"minimize"``.
        seeds: One non-negative integer seed per member, shape ``(B,)``.
    """

    def __init__(self, rule: GPRule, grid: Any, prior: np.ndarray, direction: Direction, seeds: np.ndarray) -> None:
        members = seeds.size
        self._rule = rule
        self._grid = grid
        self._prior = prior
        self._direction = direction
        self._seeds = seeds
        self._growth = float(rule.refit_growth)
        # Each member's runs so far (grown by half again when full) and their number.
        self._indices = np.zeros((members, 8), dtype=np.int64)
        self._scores = np.zeros((members, 8))
        self._count = np.zeros(members, dtype=np.int64)
        # Each member's last density and the step it was computed at (-1: never); a fallback reuses it.
        self._previous = np.tile(prior, (members, 1))
        self._density_step = np.full(members, -1, dtype=np.int64)
        self._failed_reported = np.zeros(members, dtype=np.int64)
        self._events: list[list[StrategyEvent]] = [[] for _ in range(members)]
        self._hyper: np.ndarray | None = None  # each member's last fitted hyperparameters (warm start), (B, p)
        # Each member's GP: the posterior of its last fit, conditioned on the observations since (refit schedule).
        self._model: GridPosterior | None = None
        self._refit_at = np.zeros(members, dtype=np.int64)  # step at which the member refits (0: no model)
        self._held = np.zeros(members, dtype=np.int64)  # observations its model holds (a prefix of its runs)

    @classmethod
    def open(cls, rule: GPRule, space: SearchSpace, direction: Direction, seeds: Sequence[int]) -> GPSession:
        """A session of ``len(seeds)`` searches whose densities come from ``rule`` (GP-UCB or another GP rule).

        Args:
            rule: The strategy; its ``densities`` turns the GP posteriors into densities.
            space: Search space with ``unit_coordinates`` ``(n, d)`` and ``prior`` ``(n,)``.
            direction: ``"maximize"`` or ``"minimize"`` the score.
            seeds: One non-negative integer per member.

        Returns:
            The session.
        """
        check_direction(direction)
        for seed in seeds:
            check_seed(seed)
        # Import BoTorch now, so a broken install fails here instead of as a silent fallback on every step.
        from dphypo.strategies.gp.posterior import GridFactors

        prior = checked_prior(space)
        coords = np.asarray(space.unit_coordinates, dtype=np.float64)
        if coords.ndim != 2 or coords.shape[0] != prior.size:
            raise ValueError(f"space.unit_coordinates must have shape ({prior.size}, d), got {coords.shape!r}")
        return cls(rule, GridFactors(coords), prior, direction, np.asarray(seeds, np.int64))

    @property
    def members(self) -> int:
        """Number of searches B in this session."""
        return self._seeds.size

    def member_events(self, member: int) -> list[StrategyEvent]:
        """Events of member ``member``: fallbacks, fit warnings, failed runs (a copy)."""
        return list(self._events[member])

    def observe(self, members: ArrayLike, indices: ArrayLike, scores: ArrayLike) -> None:
        """Append one run to each listed member's history.

        Args:
            members: Distinct members, shape ``(m,)``.
            indices: Their runs' grid indices, shape ``(m,)``.
            scores: Their runs' scores, shape ``(m,)``; failed runs non-finite.
        """
        members, indices, scores = check_observations(members, indices, scores, self._prior.size, self.members)
        if members.size == 0:
            return
        position = self._count[members]
        if int(position.max()) >= self._indices.shape[1]:
            grown = max(int(position.max()) + 1, self._indices.shape[1] * 3 // 2)
            extra = grown - self._indices.shape[1]
            self._indices = np.pad(self._indices, ((0, 0), (0, extra)))
            self._scores = np.pad(self._scores, ((0, 0), (0, extra)))
        self._indices[members, position] = indices
        self._scores[members, position] = scores
        self._count[members] += 1

    def densities(self, members: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """Densities for the listed members' next draws (:class:`~dphypo.strategies.base.BatchSession`).

        Members at the same step t are updated together (one batched fit or conditioning); a member whose history
        has not grown since its last density gets that density again, unchanged.

        Args:
            members: Distinct members, shape ``(m,)``.

        Returns:
            ``(densities, changed)``: shape ``(m, n)`` and ``(m,)``.
        """
        members = np.asarray(members, dtype=np.int64).reshape(-1)
        out = np.empty((members.size, self._prior.size))
        changed = np.zeros(members.size, dtype=bool)
        steps = self._count[members]
        stale = steps != self._density_step[members]
        for step in np.unique(steps[stale]):
            rows = np.flatnonzero(stale & (steps == step))
            new, fresh = self._update(members[rows], int(step))
            self._previous[members[rows]] = new
            changed[rows] = fresh | (self._density_step[members[rows]] < 0)
            self._density_step[members[rows]] = step
        out[:] = self._previous[members]
        return out, changed

    def _update(self, members: np.ndarray, step: int) -> tuple[np.ndarray, np.ndarray]:
        """Densities of members that all hold ``step`` observations; which came from their GP (refit or condition).

        Returns:
            ``(densities, from_gp)``: shape ``(m, n)`` and ``(m,)``.
        """
        from_gp = np.zeros(members.size, dtype=bool)
        if step == 0:
            return np.tile(self._prior, (members.size, 1)), from_gp
        indices, scores = self._indices[members, :step], self._scores[members, :step]
        self._report_failed_runs(members, indices, scores)
        utilities = orient(scores, self._direction)
        finite = np.all(np.isfinite(utilities), axis=1)
        for b in members[~finite]:
            self._fallback(b, step, "no finite score observed yet")
        densities = self._previous[members]  # a copy (fancy indexing); fallbacks keep these rows
        usable = np.flatnonzero(finite)
        current = (self._refit_at[members[usable]] > 0) & (step < self._refit_at[members[usable]])
        held = usable[current]
        if held.size:
            densities[held] = self._from_model(members[held], indices[held], utilities[held])
            from_gp[held] = True
        due = usable[~current]
        if due.size:
            fitted, new = self._from_fit(members[due], step, indices[due], utilities[due])
            densities[due[fitted]], from_gp[due[fitted]] = new, True
        return densities, from_gp

    def _from_model(self, members: np.ndarray, indices: np.ndarray, utilities: np.ndarray) -> np.ndarray:
        """Condition the members' models on their observations since the last update; posteriors → densities.

        Args:
            members: Shape ``(m,)``; each has a model holding a prefix of its observations.
            indices: Shape ``(m, t)``.
            utilities: Oriented, imputed scores, shape ``(m, t)``, finite.

        Returns:
            Densities, shape ``(m, n)``.
        """
        model = self._model
        assert model is not None  # a member is current only after a fit made the model
        held, step = self._held[members], indices.shape[1]
        for j in range(int(held.min()), step):
            new = held <= j  # members whose model does not hold observation j yet
            model.condition(members[new], indices[new, j], utilities[new, j])
        self._held[members] = step
        mean, std = model.score_moments(members)
        loc, scale = model.standardization(members)
        return self._rule.densities(mean, std, loc, scale, self._prior)

    def _from_fit(
        self, members: np.ndarray, step: int, indices: np.ndarray, utilities: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Fit the members' GPs and turn their posteriors into densities; record fallbacks and warnings.

        Args:
            members: Shape ``(m,)``.
            step: Number of observations t.
            indices: Shape ``(m, t)``.
            utilities: Oriented, imputed scores (higher is better), shape ``(m, t)``, finite.

        Returns:
            ``(fitted, densities)``: which members got a usable fit, shape ``(m,)``, and their densities,
            shape ``(fitted.sum(), n)``.
        """
        from dphypo.strategies.gp import fit  # attribute looked up at call time: patchable in tests

        seeds = np.array([step_seed(int(self._seeds[b]), step) for b in members], dtype=np.int64)
        try:
            start = None if self._hyper is None else self._hyper[members]
            result = fit.fit_surrogate(self._grid, indices, utilities, seed=seeds, start=start)
        except Exception as err:  # any model error must not end a search that has spent privacy budget
            for b in members:
                self._fallback(b, step, f"surrogate raised {type(err).__name__}: {err}")
            return np.zeros(members.size, dtype=bool), np.empty((0, self._prior.size))
        for b, caught in zip(members, result.warnings, strict=True):
            self._events[b] += [StrategyEvent(step, "fit-warning", message) for message in caught]
        ok = np.asarray(result.ok, dtype=bool)
        if self._hyper is None:
            self._hyper = np.full((self.members, result.hyper.shape[-1]), np.nan)
        self._hyper[members[ok]] = result.hyper[ok]  # a failed fit keeps the member's previous warm start
        if self._model is None:
            from dphypo.strategies.gp.posterior import GridPosterior

            self._model = GridPosterior.empty(self._grid, self.members, self._prior.size, result.hyper.shape[-1])
        self._model.put(members[ok], result.posterior, rows=np.flatnonzero(ok))
        self._held[members[ok]] = step
        # The smallest step ≥ (1 + r)·step (the 1e-9 absorbs round-off, e.g. 1.1·10 = 11.000000000000002).
        self._refit_at[members[ok]] = max(step, math.ceil((1.0 + self._growth) * step - 1e-9))
        self._refit_at[members[~ok]] = 0  # no usable model: refit at the next update
        for b, reason in zip(members[~ok], np.asarray(result.reasons, dtype=object)[~ok], strict=True):
            self._fallback(b, step, f"surrogate fit not usable: {reason}")
        rule = self._rule
        return ok, rule.densities(result.mean[ok], result.std[ok], result.score_loc[ok], result.score_scale[ok],
                                  self._prior)

    def _fallback(self, member: int, step: int, reason: str) -> None:
        """Record that ``member`` keeps its previous density (or the prior, if it has none)."""
        target = "previous density" if self._density_step[member] >= 0 else "prior"
        self._events[member].append(StrategyEvent(step, "fallback", f"{reason}; using the {target}"))

    def _report_failed_runs(self, members: np.ndarray, indices: np.ndarray, scores: np.ndarray) -> None:
        """Record one ``"failed-run"`` event per failed run of each member not reported before."""
        failed = np.count_nonzero(~np.isfinite(scores), axis=1)
        step = scores.shape[1]
        for row in np.flatnonzero(failed > self._failed_reported[members]):
            b = members[row]
            bad = np.flatnonzero(~np.isfinite(scores[row]))
            for i in bad[self._failed_reported[b] :]:
                message = (
                    f"run {i} (grid index {indices[row, i]}) scored {scores[row, i]!r}; treated as the worst "
                    "finite score"
                )
                self._events[b].append(StrategyEvent(step, "failed-run", message))
            self._failed_reported[b] = failed[row]
