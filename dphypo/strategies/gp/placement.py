r"""Placement of released probes by BoTorch acquisitions over the grid: Bayesian optimisation where it is free.

Released probes (:class:`~dphypo.privacy.two_stage.ProbeRelease`) are accounted by adaptive composition, so where
each probe goes may be any function of the probes released before it and of the curator's secret randomness
(docs/privacy.md, rule 3 for released probes): no projection onto S_{C,c}, no adaptivity charge. This module
places them as Ax's default generation strategy does (quasi-random trials, then BoTorch):

1. a **space-filling start** of s = max(``start``, ⌈``start_share`` · n⌉) of the n probes: a Latin hypercube in the
   grid's unit coordinates, each point snapped to the nearest grid point (every axis's range split into s strata,
   one probe per stratum: five uniform probes all land in one region, e.g. the 41 % of the digits grid that scores ≤
   0.16 at 2 epochs, with probability 0.41⁵ ≈ 1 %; a hypercube's five learning rates cannot);
2. then batches of max(``batch``, ⌈``batch_share`` · n⌉) probes (by default one at a time), each from **one fit** of
   the GP on every probe released so far (:func:`~dphypo.strategies.gp.fit.fit_surrogate`, the project's batched fit
   of BoTorch's default ``SingleTaskGP``), exposed to BoTorch as a :class:`GridModel` and scored by BoTorch's own
   acquisition: ``qUpperConfidenceBound`` (``"ucb"``) or ``qLogNoisyExpectedImprovement`` (``"log-nei"``, for noisy
   scores), the batch chosen by sequential greedy maximisation over the grid's points (as
   ``botorch.optim.optimize_acqf_discrete`` does: each pick joins ``X_pending``; no point twice in a batch);
   batch-native over B searches (one model of batch shape ``(B,)``, every member's grid in one pass);
3. a **share kept uniform**: a GP batch of k probes after t released ones draws round(u·(t + k)) − round(u·t) of
   them from the prior, u = ``uniform_share`` (:meth:`ProbePlacement.uniform_count`: one probe in 1/u over the
   stage, also with batches smaller than 1/u; they come first and join the acquisition's ``X_pending``), so a
   search keeps exploring whatever its GP believes;
4. a **fallback** when the GP is uninformative: a member whose fit fails (fewer than two scores, all equal, a
   numerical failure) or whose fitted noise variance is at least ``uninformative_noise`` of the standardised
   scores' variance (its probes look like noise) places that whole batch uniformly from the prior.

Defaults (:class:`ProbePlacement`): ``acquisition = "log-nei"`` (the released scores are noisy, which
qLogNEI models and UCB does not; on the digits 2-epoch → 10-epoch family at ε = 8 with 20 probes it beat UCB on
both seeds measured, +0.0018 and +0.0066 against +0.000 and +0.004 over uniform + best probe, with a better lower
tail; it costs about 4× UCB's CPU, negligible next to training); the **schedule** ``start = 3``,
``start_share = 0.25``, ``batch = 1``, ``batch_share = 0``: a space-filling start of max(3, ⌈n/4⌉) probes, then
one probe per GP fit (20 probes: 5 then 15 single probes, 16 batches, so 16 sequential passes of stage 1 in
``dphypo tune`` instead of 4; 10 probes: 3 then 7, 8 passes instead of 2). Chosen in docs/studies.md ("GP placement
schedule", issue #31) over the earlier start 5 / batches of 5 and three other schedules on seed 1 (300 searches
on each of three families at ε = 8, cap 20) and reported on seed 2 (400 fresh searches, paired, gp-mean
recommendation): against start 5 / batches of 5, +0.0007 [−0.0005, +0.0020] on the digits MLP (20 probes),
+0.0044 [+0.0000, +0.0087] on the MNIST-subset CNN (20), +0.0060 [+0.0014, +0.0105] on the 4-D digits MLP (10
full-fidelity probes), and a better worst-5 % mean on all three (0.921 vs 0.919, 0.800 vs 0.748, 0.828 vs 0.811);
the GP's CPU per search did not grow (fits on fewer probes, one-point greedy passes). ``uniform_share = 0.2``
(one probe of five),
``uninformative_noise = 0.5`` (more than half of the observed variance attributed to noise: the GP cannot tell
regions apart), UCB ``beta = 2`` (μ + 1.41 σ for a single point), 128 quasi-MC samples. Only the acquisition and
the schedule were compared; the others are the conventional choices above.

Randomness: every random choice (the hypercube, the uniform share, the quasi-MC seed) comes from the caller's
generator, in a fixed order that does not depend on the scores, so arms with the same seed share their streams
(paired comparisons in the simulator) and a search's draws come from its secret stream (``tune``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from dphypo._threads import torch_threads
from dphypo.privacy.validation import check_int_at_least, check_positive, check_positive_int
from dphypo.space import SearchSpace
from dphypo.strategies.base import Direction, check_direction
from dphypo.strategies.released import CuratorOnlyError, ReleasedProbes, gp_targets

__all__ = [
    "ACQUISITIONS",
    "PLACEMENTS",
    "ProbePlacement",
    "place_batch",
    "place_probes",
    "space_filling",
]

#: Placement strategies of released probes: i.i.d. draws from the prior, or the GP's acquisition.
PLACEMENTS: tuple[str, ...] = ("uniform", "gp")
#: BoTorch acquisitions: ``qUpperConfidenceBound`` and ``qLogNoisyExpectedImprovement``.
ACQUISITIONS: tuple[str, ...] = ("ucb", "log-nei")


@dataclass(frozen=True)
class ProbePlacement:
    """Where released probes go (module docstring): ``"uniform"`` (today's) or ``"gp"`` (BoTorch acquisition).

    Configuration, fixed before any data is touched.

    Args:
        strategy: ``"uniform"`` (every probe drawn from the prior) or ``"gp"``.
        acquisition: ``"log-nei"`` (``qLogNoisyExpectedImprovement``) or ``"ucb"`` (``qUpperConfidenceBound``).
        batch: Probes per GP batch K ≥ 1 (one fit and one greedy pass each).
        start: Space-filling probes before the first fit (≥ 2: a GP needs two scores).
        uniform_share: Share of every GP batch drawn from the prior, in [0, 1].
        beta: UCB's β > 0 (one point: μ + √β σ).
        mc_samples: Quasi-MC samples of the acquisition ≥ 1.
        uninformative_noise: Fitted noise variance, as a share of the standardised scores' variance, at or above
            which a member's batch falls back to the prior, in (0, 1]; 1 disables the test (a fit failure still
            falls back).
        start_share: The start grows with the probe count n: ``max(start, ⌈start_share · n⌉)`` probes, in [0, 1]
            (0: ``start`` whatever n). The defaults (``start = 3``, ``start_share = 0.25``, ``batch = 1``,
            ``batch_share = 0``) are the schedule measured best (module docstring); start 5 / batch 5 / shares 0 is
            the earlier fixed schedule.
        batch_share: The batches grow with n: ``max(batch, ⌈batch_share · n⌉)`` probes each, in [0, 1]
            (0: ``batch`` whatever n).

    Raises:
        ValueError: A value out of range, in one line.
    """

    strategy: str = "gp"
    acquisition: str = "log-nei"
    batch: int = 1
    start: int = 3
    uniform_share: float = 0.2
    beta: float = 2.0
    mc_samples: int = 128
    uninformative_noise: float = 0.5
    start_share: float = 0.25
    batch_share: float = 0.0

    def __post_init__(self) -> None:
        if self.strategy not in PLACEMENTS:
            raise ValueError(f"probe placement must be one of {', '.join(PLACEMENTS)}, got {self.strategy!r}")
        if self.acquisition not in ACQUISITIONS:
            raise ValueError(f"acquisition must be one of {', '.join(ACQUISITIONS)}, got {self.acquisition!r}")
        check_positive_int("batch", self.batch)
        check_int_at_least("start", self.start, 2)
        if not 0.0 <= self.uniform_share <= 1.0:
            raise ValueError(f"uniform_share must be in [0, 1], got {self.uniform_share!r}")
        check_positive("beta", self.beta)
        check_positive_int("mc_samples", self.mc_samples)
        if not 0.0 < self.uninformative_noise <= 1.0:
            raise ValueError(f"uninformative_noise must be in (0, 1], got {self.uninformative_noise!r}")
        for name in ("start_share", "batch_share"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value!r}")

    @property
    def name(self) -> str:
        """``"uniform"``, ``"gp-ucb"`` or ``"gp-log-nei"``."""
        return "uniform" if self.strategy == "uniform" else f"gp-{self.acquisition}"

    def schedule(self, probes: int) -> tuple[int, ...]:
        """Batch sizes of ``probes`` released probes: all at once (uniform), or the start then batches.

        The start is ``max(start, ⌈start_share · n⌉)`` probes (at most n), the batches ``max(batch, ⌈batch_share ·
        n⌉)`` each, the last one what is left.

        Args:
            probes: Number of probes n ≥ 1.
        """
        check_positive_int("probes", probes)
        if self.strategy == "uniform":
            return (probes,)
        first = min(max(self.start, math.ceil(self.start_share * probes - 1e-9)), probes)
        batch = max(self.batch, math.ceil(self.batch_share * probes - 1e-9))
        rest = probes - first
        return (first,) + (batch,) * (rest // batch) + ((rest % batch,) if rest % batch else ())

    def uniform_count(self, size: int, first: int = 0) -> int:
        """Prior draws in a GP batch of ``size`` probes after ``first`` released ones.

        ``round(u · (first + size)) − round(u · first)`` with u = ``uniform_share``: the share is kept over the
        stage's probe numbers, not per batch, so batches smaller than 1/u still draw one probe in 1/u from the
        prior (per batch, ``round(0.2 · 2) = 0`` would keep none). Batches of 5 after a start of 5 (the fixed
        schedule) draw ``round(5u)`` each, as a per-batch share does.

        Args:
            size: Probes of the batch ≥ 1.
            first: Probes released before the batch ≥ 0.
        """
        def share(count: int) -> int:
            return math.floor(self.uniform_share * count + 0.5)

        return min(size, share(first + size) - share(first))

    def uniform_counts(self, probes: int) -> tuple[int, ...]:
        """Prior draws of each batch of :meth:`schedule` (:meth:`uniform_count`; the start: 0, it is space-filling).

        Args:
            probes: Number of probes n ≥ 1.
        """
        sizes = self.schedule(probes)
        if self.strategy == "uniform":
            return (0,)
        firsts = np.cumsum((0, *sizes[:-1]))
        return (0, *(self.uniform_count(size, int(first)) for size, first in zip(sizes[1:], firsts[1:], strict=True)))

    def describe(self) -> dict[str, Any]:
        """JSON-ready configuration (part of the design: stated with the release)."""
        if self.strategy == "uniform":
            return {"strategy": "uniform"}
        return {"strategy": "gp", "acquisition": self.acquisition, "batch": self.batch, "start": self.start,
                "uniform_share": self.uniform_share, "beta": self.beta, "mc_samples": self.mc_samples,
                "uninformative_noise": self.uninformative_noise, "start_share": self.start_share,
                "batch_share": self.batch_share}


def space_filling(space: SearchSpace, count: int, members: int, rng: np.random.Generator) -> np.ndarray:
    """A Latin hypercube of ``count`` points per member in unit coordinates, each snapped to the nearest grid point.

    Every axis's [0, 1] is split into ``count`` strata, one point uniform in each, the strata paired at random
    across axes; the nearest grid point with positive prior mass (Euclidean, unit coordinates; ties: the smaller
    index) is probed. Data-independent: drawn from ``rng`` alone.

    Args:
        space: The grid.
        count: Points per member ≥ 1.
        members: Searches B ≥ 1.
        rng: Random stream.

    Returns:
        Grid indices, shape ``(members, count)``.
    """
    check_positive_int("count", count)
    check_positive_int("members", members)
    coordinates = np.asarray(space.unit_coordinates, dtype=np.float64)
    dim = coordinates.shape[1]
    strata = np.argsort(rng.random((members, dim, count)), axis=-1)  # a permutation of the strata per axis
    points = (strata + rng.random((members, dim, count))) / count  # (B, d, count)
    allowed = np.flatnonzero(np.asarray(space.prior) > 0)
    grid = coordinates[allowed]  # (m, d)
    distance = ((points.transpose(0, 2, 1)[:, :, None, :] - grid[None, None]) ** 2).sum(-1)  # (B, count, m)
    return allowed[np.argmin(distance, axis=-1)]


def _uninformed(fit: Any, placement: ProbePlacement) -> np.ndarray:
    """Members whose batch falls back to the prior: no usable fit, or noise ≥ ``uninformative_noise``."""
    noise = np.where(fit.ok, fit.hyper[:, 0], np.inf)
    return ~fit.ok | ~(noise < placement.uninformative_noise)


def place_batch(placement: ProbePlacement, space: SearchSpace, released: ReleasedProbes, count: int,
                rng: np.random.Generator, direction: Direction) -> np.ndarray:
    """The next ``count`` probes of B searches, from their released probes only (module docstring).

    Batch-native: member b's probes depend on member b's released probes and on ``rng``. The draws from ``rng``
    (the prior draws of every member, the hypercube at the start, one quasi-MC seed) do not depend on the scores.

    Args:
        placement: The configuration.
        space: The grid (``unit_coordinates`` and ``prior``).
        released: Every probe each search released so far, shape ``(B, t)`` (:class:`ReleasedProbes`: anything
            curator-only is refused when it is built, :func:`~dphypo.strategies.released.released_probes`).
        count: Probes to place per search ≥ 1.
        rng: The searches' random stream (in ``tune``, a stream of the curator's secret seed).
        direction: ``"maximize"`` or ``"minimize"`` the score.

    Returns:
        Grid indices, shape ``(B, count)``.

    Raises:
        CuratorOnlyError: ``released`` is not :class:`ReleasedProbes`.
    """
    if not isinstance(released, ReleasedProbes):
        raise CuratorOnlyError(f"probe placement reads ReleasedProbes only (released (params, noisy score)), got "
                               f"{type(released).__name__}")
    check_positive_int("count", count)
    check_direction(direction)
    prior = np.asarray(space.prior, dtype=np.float64)
    members = released.members
    uniform = rng.choice(prior.size, size=(members, count), p=prior)
    if placement.strategy == "uniform":
        return uniform
    if released.count == 0:
        return space_filling(space, count, members, rng)
    seed = int(rng.integers(2**31))
    out = uniform.copy()
    targets, usable = gp_targets(released, direction)
    fitted = np.flatnonzero(usable)
    kept = placement.uniform_count(count, released.count)
    if fitted.size == 0 or kept == count:
        return out
    import torch

    from dphypo.strategies.gp.acquisition import GridModel, greedy
    from dphypo.strategies.gp.fit import fit_surrogate
    from dphypo.strategies.gp.posterior import GridFactors

    coordinates = np.asarray(space.unit_coordinates, dtype=np.float64)
    with torch_threads():
        fit = fit_surrogate(GridFactors(coordinates), released.indices[fitted], targets[fitted], seed=seed)
        guided = fitted[~_uninformed(fit, placement)]
        if guided.size == 0:
            return out
        rows = np.flatnonzero(np.isin(fitted, guided))
        model = GridModel(torch.as_tensor(coordinates.copy()), torch.as_tensor(fit.mean[rows]),
                          fit.posterior.factor_rows(rows), torch.as_tensor(fit.hyper[rows, 2:]),
                          torch.as_tensor(fit.score_scale[rows]))
        baseline = torch.as_tensor(released.indices[guided], dtype=torch.float64)[..., None]
        fixed = torch.as_tensor(uniform[guided, :kept], dtype=torch.float64)[..., None]
        picks = greedy(placement.acquisition, model, baseline, fixed, count - kept, torch.as_tensor(prior > 0), seed,
                       beta=placement.beta, mc_samples=placement.mc_samples)
    out[guided, kept:] = picks.long().numpy()
    return out


def place_probes(placement: ProbePlacement, space: SearchSpace, probes: int, members: int,
                 score: Callable[[np.ndarray, int], np.ndarray], rng: np.random.Generator,
                 direction: Direction) -> ReleasedProbes:
    """Run the probe stage of B searches: place a batch (:func:`place_batch`), release its scores, repeat.

    The one loop of released probes, for the simulator (``score`` samples a landscape) and for ``tune``
    (``score`` trains the batch's probes and returns their released noisy scores).

    Args:
        placement: The configuration.
        space: The grid.
        probes: Probes per search n ≥ 1 (public: a :class:`~dphypo.privacy.two_stage.ProbeRelease` fixes it).
        members: Searches B ≥ 1.
        score: ``score(indices, first)``: the released noisy scores of the probes ``indices`` (shape ``(B, k)``),
            the batch's first probe being probe number ``first`` of each search; non-finite for a failed probe.
        rng: The searches' random stream.
        direction: ``"maximize"`` or ``"minimize"``.

    Returns:
        Every released probe, shape ``(B, probes)``.
    """
    check_positive_int("members", members)
    released = ReleasedProbes.empty(members)
    for size in placement.schedule(probes):
        indices = place_batch(placement, space, released, size, rng, direction)
        scores = np.asarray(score(indices, released.count), dtype=np.float64)
        if scores.shape != indices.shape:
            raise ValueError(f"score must return one score per probe, shape {indices.shape}, got {scores.shape}")
        released = released.extended(indices, scores)
    return released
