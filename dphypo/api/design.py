r"""A search design as one value: what :func:`dphypo.tune` runs, what ``dphypo plan`` picks, what a release names.

Three frozen values, one per runner, each with ``describe() -> dict`` (JSON-ready, sealed in a release and written by
the planner for its pick) and ``from_dict`` (re-creates the value exactly, so ``dphypo tune --design-from
plan.json`` runs the plan's pick as it is):

* :class:`SingleStage` — one private selection (Papernot–Steinke / DP-HyPO): a strategy and the law of T; run by
  the single-stage runner :func:`dphypo.api.search.tune`.
* :class:`TwoStageSearch` — cheap probes, then one committed run: a :class:`~dphypo.privacy.two_stage.TwoStage`
  (stages and split), where the probes are placed (``strategy``) and their fidelity (``probe_epochs``); run by
  :func:`~dphypo.api.tune_two_stage`. A bare :class:`~dphypo.privacy.two_stage.TwoStage` given as a design means
  ``TwoStageSearch(two_stage)`` (uniform placement, a fifth of the epochs).
* :class:`Subsampled` — the search on a Poisson subsample, then one final run (Koskela & Kulkarni 2023); run by
  :func:`~dphypo.api.tune_subsampled`.

**The default design (``design=None``, ``dphypo tune --design auto``): :func:`auto_design`.** It tries these
candidates in this order and returns the first that fits the compute budget and calibrates for the total (ε, δ).
Every released-probe candidate (1–3) places its probes by the GP of the released probes (:data:`AUTO_PLACEMENT`:
BoTorch qLogNEI, one probe per GP fit after a space-filling start of max(3, ⌈n/4⌉) probes, a fifth kept
uniform) and commits the posterior mean's argmax among the probed points (:data:`AUTO_RECOMMEND`): post-processing
of released values, free in ε, and never worse than uniform placement + best probe on fresh simulated searches (10
cells on the digits, CNN and 4-D families, 8 with the 95 % interval above 0, +0.004 to +0.020, with batches of 5;
one probe per fit: +0.005, +0.023 and +0.012 at ε = 8; worst 5 % of searches better in every cell;
docs/studies.md, "GP placement of released probes" and "GP placement schedule").

1. 20 released probes at a fifth of the epochs, one committed run, split 0.5 — only at ε ≥ 8. The equal-ε studies'
   winner at ε = 8 on both families (digits MLP: 0.934 vs uniform search's 0.888 at ≤ 20 runs; MNIST-subset CNN:
   +0.023 to +0.068 over uniform search at every budget; docs/studies.md, "Two-stage designs with cheap probes" and
   "... on the MNIST-subset CNN family"). At ε = 4 both families preferred 10 probes (candidate 3) at the final
   run's score noise.
2. **20 released probes with noisier scores** — only where 10 released probes at the final run's score noise are
   starved: their score releases alone (:func:`score_release_floor`) cost more than 85 % of the probes' share
   ``split · ε``, leaving their training under :data:`AUTO_PROBE_TRAINING_SHARE` = 15 % of it. The probes' score noise
   is then the smallest factor f of :data:`AUTO_PROBE_NOISE_FACTORS` (1, 1.5, 2, 3, 4 times the final run's) whose
   20 score releases leave their training at least 15 % (:func:`probe_score_noise_factor_for`). A GP or the best of
   more probes averages the extra noise out, and the freed ε buys less training noise. On digits (score noise 0.02
   of the accuracy) this is ε < 4.43: f = 2 at ε = 4 (measured on the shipped 2-epoch / 10-epoch digits family, 3,000
   fresh repeats: 0.917 against 10 probes' 0.900, +0.017 [+0.014, +0.019]) and f = 3 at ε = 2 (0.858 against the
   probe selection's 0.786 on 1,000 repeats); on the MNIST subset (1,000 validation examples, cheaper scores) only
   below ε ≈ 1.4 (not measured there).
3. 10 released probes, otherwise as 1 — the winner at ε = 4 on both families (digits at every budget, CNN at
   ≤ 20 runs) and at ε = 2 on the CNN (≤ 10 runs). On digits at ε = 2 it cannot run: its 10 score releases alone
   cost ε ≥ 1.88, above its share 1.0.
4. A uniform private selection of the best of E[T] = 20 probes (geometric T), one committed run, split 0.5 — the
   digits winner at ε = 2 before noisier probes (+0.025 at ≤ 10 runs, a tie at 20).
5. Single-stage uniform search, E[T] = 20, then E[T] = 10, 5 and 2 — what still runs where no two-stage candidate
   does (a smaller ε, or a compute budget below 3 runs). Not a measured winner: the cheapest searches left.

Between ε = 4.43 and 8 on digits (not measured) the rule keeps 10 probes at the final run's score noise. The rule never
switches to single-stage for compute: with GP-placed probes and the per-record split, the design it picks beat the
best uniform search at every compute cap of 10, 20 and 50 runs and ε 2, 4, 8 on both families (18 cells, +0.011 to
+0.122, each 95 % interval above 0; docs/studies.md, "The default design against the best uniform search"), where
uniformly placed probes had lost at ε = 2 with ≥ 50 runs on digits and at ε = 4 with ≥ 50 runs on the CNN; run
``dphypo plan`` on landscapes of your model for that choice. (The figures above were measured with each run charged
the sum of its two parts; under the per-record split, tune's default, ε = 4 gives 0.925 and ε = 2 0.890.)

Cheap checks before any calibration. A released score is a Gaussian release of a sensitivity-1 count with std
``score_noise``; n of them compose to the RDP curve n·α/(2 score_noise²) (Mironov 2017, Props. 1 and 7), a lower
bound on the probe stage's curve at any σ, so its ε (:func:`score_release_floor`) above the stage's share
``split · ε`` refuses the candidate in closed form (20 released probes on digits: 2.77 > 2.0 at ε = 4). A candidate
that passes is then checked against the calibration's own brackets at two σ (:func:`_calibrates`), and calibrated
only where that check cannot decide; a refused calibration moves on to the next candidate. So the default at ε = 8
needs no extra calibration: :func:`dphypo.tune` calibrates it once, as before.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from dphypo.api.search import DEFAULT_RUNS, resolve_strategy
from dphypo.api.two_stage import (
    DEFAULT_TWO_STAGE,
    check_placement,
    check_probe_score_noise_factor,
    default_probe_epochs,
    probe_training,
)
from dphypo.privacy import (
    DEFAULT_ORDERS,
    CalibrationError,
    Poisson,
    RepeatAndSelect,
    RunCountDistribution,
    TruncatedNegativeBinomial,
    epsilon_from_rdp,
    gaussian_rdp,
    geometric,
)
from dphypo.privacy.accounting import PrivacyAccounting
from dphypo.privacy.rdp import RdpCurve, compose
from dphypo.privacy.run_counts import Binomial
from dphypo.privacy.two_stage import (
    FinalRun,
    FinalSelection,
    ProbeRelease,
    ProbeSelection,
    TwoStage,
)
from dphypo.privacy.validation import check_delta, check_int_at_least, check_non_negative_int, check_positive
from dphypo.strategies import GPUCB, GPTopSet, Strategy, Uniform
from dphypo.strategies.gp.placement import ProbePlacement
from dphypo.train.recipe import DPSGD

__all__ = [
    "AUTO_PLACEMENT",
    "AUTO_PROBES",
    "AUTO_PROBE_EPOCHS_SHARE",
    "AUTO_PROBE_NOISE_FACTORS",
    "AUTO_PROBE_TRAINING_SHARE",
    "AUTO_RECOMMEND",
    "AUTO_TWENTY_PROBES_FROM",
    "Design",
    "SingleStage",
    "Subsampled",
    "TwoStageSearch",
    "as_design",
    "auto_candidates",
    "auto_design",
    "design_from_dict",
    "probe_score_noise_factor_for",
    "score_release_floor",
]

#: A probe's share of the final run's epochs in the auto designs (:func:`~dphypo.api.two_stage.default_probe_epochs`).
AUTO_PROBE_EPOCHS_SHARE = 0.2
#: The smallest ε at which :func:`auto_design` tries 20 released probes at the final run's score noise (measured
#: best at ε = 8; at ε = 4 10 probes were, unless their score releases starve them: :func:`auto_candidates`).
AUTO_TWENTY_PROBES_FROM = 8.0
#: Released probes of :func:`auto_design`'s 20-probe candidates, and their split.
AUTO_PROBES, AUTO_SPLIT = 20, 0.5
#: Placement and recommendation of the automatic design's released probes (docs/studies.md, issue #31).
AUTO_PLACEMENT = ProbePlacement("gp", "log-nei")
AUTO_RECOMMEND = "gp-mean"
#: The probe score-noise factors :func:`probe_score_noise_factor_for` may choose, smallest first.
AUTO_PROBE_NOISE_FACTORS = (1.0, 1.5, 2.0, 3.0, 4.0)
#: The share of the probes' ε that the rule leaves to their training at least (the rest may go to their scores).
AUTO_PROBE_TRAINING_SHARE = 0.15
# The brackets of the calibrations (dphypo.privacy.two_stage.calibrate_two_stage, calibrate_sigma): a stage's σ in
# [1e-2, 1e4], the common two-stage scale in [1e-3, 1e3], so every σ after scaling is at least 1e-2 · 1e3 = 10.
_LARGEST_SIGMA, _SCALED_SIGMA = 1e4, 10.0


# -- strategies, run counts and two-stage designs as JSON --------------------------------------------------------------
def _strategy_dict(strategy: Strategy) -> dict[str, Any]:
    """``{"name": ..., **constructor fields}`` (:func:`_strategy_from_dict` re-creates it)."""
    name = str(getattr(strategy, "name", type(strategy).__name__))
    fields: dict[str, Any] = {} if not dataclasses.is_dataclass(strategy) else {
        f.name: getattr(strategy, f.name) for f in dataclasses.fields(strategy) if f.init}
    return {"name": name, **fields}


_STRATEGIES: dict[str, type] = {"uniform": Uniform, "gp-ucb": GPUCB, "gp-top-set": GPTopSet}


def _strategy_from_dict(data: Mapping[str, Any]) -> Strategy:
    fields = dict(data)
    name = fields.pop("name", None)
    if name not in _STRATEGIES:
        raise ValueError(f"a design's strategy must be one of {', '.join(_STRATEGIES)}, got {name!r}")
    strategy: Strategy = _STRATEGIES[name](**fields)
    return strategy


def _runs_dict(runs: RunCountDistribution) -> dict[str, Any]:
    """The law of T with every parameter (exact), and its mean for a reader."""
    if isinstance(runs, TruncatedNegativeBinomial):
        return {"family": "negbin", "theta": runs.theta, "gamma": runs.gamma, "mean": runs.mean}
    if isinstance(runs, Poisson):
        return {"family": "poisson", "mean": runs.mean}
    if isinstance(runs, Binomial):
        return {"family": "binomial", "n": runs.n, "p": runs.p, "mean": runs.mean}
    raise ValueError(f"a design's run count must be negbin/geometric/logarithmic, poisson or binomial, got {runs!r}")


def _runs_from_dict(data: Mapping[str, Any]) -> RunCountDistribution:
    family = data.get("family")
    if family == "negbin":
        return TruncatedNegativeBinomial(float(data["theta"]), float(data["gamma"]))
    if family == "poisson":
        return Poisson(float(data["mean"]))
    if family == "binomial":
        return Binomial(int(data["n"]), float(data["p"]))
    raise ValueError(f"a design's run count family must be negbin, poisson or binomial, got {family!r}")


def _search_dict(search: RepeatAndSelect) -> dict[str, Any]:
    return {"runs": _runs_dict(search.run_count), "C": search.C, "c": search.c}


def _search_from_dict(data: Mapping[str, Any]) -> RepeatAndSelect:
    return RepeatAndSelect(_runs_from_dict(data["runs"]), float(data["C"]), float(data["c"]))


def _two_stage_dict(design: TwoStage) -> dict[str, Any]:
    """Both stages and the split, exactly (the library's own summary, ``TwoStage.describe``, beside them)."""
    stage1, stage2 = design.stage1, design.stage2
    first: dict[str, Any] = (
        {"mode": "release", "probes": stage1.probes, "top_k": stage1.top_k} if isinstance(stage1, ProbeRelease)
        else {"mode": "select", "search": _search_dict(stage1.search), "adaptive_theorem": stage1.adaptive_theorem})
    second: dict[str, Any] = ({"mode": "run"} if isinstance(stage2, FinalRun)
                              else {"mode": "select", "search": _search_dict(stage2.search)})
    return {"stage1": first, "stage2": second, "split": design.split}


def _two_stage_from_dict(data: Mapping[str, Any]) -> TwoStage:
    first, second = data["stage1"], data["stage2"]
    if first.get("mode") == "release":
        stage1: ProbeRelease | ProbeSelection = ProbeRelease(int(first["probes"]), top_k=int(first["top_k"]))
    elif first.get("mode") == "select":
        stage1 = ProbeSelection(_search_from_dict(first["search"]), str(first.get("adaptive_theorem", "B")))
    else:
        raise ValueError(f"a two-stage design's stage1 mode must be 'release' or 'select', got {first.get('mode')!r}")
    if second.get("mode") == "run":
        stage2: FinalRun | FinalSelection = FinalRun()
    elif second.get("mode") == "select":
        stage2 = FinalSelection(_search_from_dict(second["search"]))
    else:
        raise ValueError(f"a two-stage design's stage2 mode must be 'run' or 'select', got {second.get('mode')!r}")
    return TwoStage(stage1, stage2, float(data["split"]))


# -- the design values -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SingleStage:
    """One private selection: T drawn from ``runs``, candidates from ``strategy``, the best run released.

    Args:
        strategy: ``"uniform"`` (default), ``"gp"`` or a :class:`~dphypo.strategies.Strategy`; stored as the strategy
            object (:func:`~dphypo.api.search.resolve_strategy`), whose C and c are the accounted bounds.
        runs: The law of T (default :data:`~dphypo.api.DEFAULT_RUNS`: geometric, E[T] = 20).

    Example:
        >>> SingleStage("gp").label()
        'single-stage gp-ucb search (C=2, c=0.75), E[T]=20 (geometric)'
    """

    strategy: Strategy | str = "uniform"
    runs: RunCountDistribution = DEFAULT_RUNS
    kind: ClassVar[str] = "single-stage"

    def __post_init__(self) -> None:
        object.__setattr__(self, "strategy", resolve_strategy(self.strategy))
        if not isinstance(self.runs, RunCountDistribution):
            raise TypeError(f"runs must be a RunCountDistribution (e.g. dphypo.privacy.geometric(0.05)), got "
                            f"{self.runs!r}")
        RepeatAndSelect(self.runs, self.search_strategy.C, self.search_strategy.c)  # a search some theorem accounts

    @property
    def search_strategy(self) -> Strategy:
        """The strategy object."""
        assert not isinstance(self.strategy, str)  # resolved in __post_init__
        return self.strategy

    def label(self) -> str:
        """A one-line description for tables."""
        s = self.search_strategy
        bounds = "" if isinstance(s, Uniform) else f" (C={s.C:g}, c={s.c:g})"
        return f"single-stage {_strategy_dict(s)['name']} search{bounds}, E[T]={self.runs.mean:g} ({self.runs.name})"

    def expected_runs(self, training: DPSGD) -> float:
        """Expected training runs, in full runs: E[T]."""
        return float(self.runs.mean)

    def describe(self) -> dict[str, Any]:
        """JSON-ready and exact: :meth:`from_dict` re-creates this value."""
        return {"kind": self.kind, "label": self.label(), "strategy": _strategy_dict(self.search_strategy),
                "runs": _runs_dict(self.runs)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SingleStage:
        """The value :meth:`describe` wrote."""
        return cls(_strategy_from_dict(data["strategy"]), _runs_from_dict(data["runs"]))


@dataclass(frozen=True)
class TwoStageSearch:
    """Cheap probes, then one committed full-fidelity run (:func:`~dphypo.api.tune_two_stage`).

    Args:
        two_stage: The stages and the split (default :data:`~dphypo.api.DEFAULT_TWO_STAGE`: 20 released probes, one
            final run, split 0.5).
        strategy: Where probes are placed when ``placement`` is ``None``: ``"uniform"`` (default), ``"gp"`` or a
            Strategy (a probe selection needs one with its search's C and c).
        probe_epochs: Epochs of a probe (default ``None``: a fifth of the final run's epochs, at least one).
        placement: ``None`` (default: ``strategy`` places the probes, today's design) or a
            :class:`~dphypo.strategies.gp.placement.ProbePlacement` (uniform, or a BoTorch acquisition on the GP
            fitted to the released probes: ``ProbePlacement("gp", "log-nei")``); released probes only, with the
            uniform ``strategy``.
        recommend: The rule that chooses the committed point(s) from the released probes
            (:data:`~dphypo.strategies.recommend.RECOMMENDATIONS`; default ``"best-probe"``); a GP rule needs
            released probes.
        probe_score_noise_factor: The probes' score noise as a multiple of the final run's (the training's
            ``score_noise``; default 1). A probe's score release costs α/(2·(f·s)²) in RDP (Mironov 2017, Prop. 7),
            so a factor f > 1 lets f² times as many probes release their scores for the same score budget, each
            score noisier (:func:`auto_design` uses this below ε = 8). Unit-free, so a plan's pick runs on any
            dataset; ``dphypo tune --probe-score-noise-accuracy A`` sets it to A / ``--score-noise-accuracy``.

    Raises:
        TwoStageDesignError: A placement or a GP rule with a probe selection, in one line.

    Example:
        >>> TwoStageSearch().label()
        'release 20 probes -> 1 final run, split 0.5'
    """

    two_stage: TwoStage = DEFAULT_TWO_STAGE
    strategy: Strategy | str = "uniform"
    probe_epochs: int | None = None
    placement: ProbePlacement | None = None
    recommend: str = "best-probe"
    probe_score_noise_factor: float = 1.0
    kind: ClassVar[str] = "two-stage"

    def __post_init__(self) -> None:
        if not isinstance(self.two_stage, TwoStage):
            raise TypeError(f"two_stage must be a dphypo.TwoStage, got {self.two_stage!r}")
        object.__setattr__(self, "probe_score_noise_factor",
                           check_probe_score_noise_factor(self.probe_score_noise_factor))
        object.__setattr__(self, "strategy", resolve_strategy(self.strategy))
        if self.probe_epochs is not None:
            check_int_at_least("probe_epochs", self.probe_epochs, 1)
        check_placement(self.two_stage, self.probe_strategy, self.placement, self.recommend)

    @property
    def probe_strategy(self) -> Strategy:
        """The probe sampler of the strategy path (``placement`` is ``None``)."""
        assert not isinstance(self.strategy, str)  # resolved in __post_init__
        return self.strategy

    @property
    def placement_name(self) -> str:
        """Who places the probes: the placement's name (``gp-log-nei``, ...), else the strategy's."""
        if self.placement is not None:
            return self.placement.name
        return str(_strategy_dict(self.probe_strategy)["name"])

    def label(self) -> str:
        """The two-stage label, with the placement when it is not uniform and the probe epochs when fixed."""
        label = self.two_stage.label()
        if self.placement is not None or not isinstance(self.probe_strategy, Uniform):
            label += f" (probes placed by {self.placement_name})"
        if self.recommend != "best-probe":
            label += f" (committed by {self.recommend})"
        if self.probe_epochs is not None:
            label += f", {self.probe_epochs}-epoch probes"
        if self.probe_score_noise_factor != 1.0:
            label += f", probe score noise x{self.probe_score_noise_factor:.4g}"
        return label

    def epochs_of_probes(self, training: DPSGD) -> int:
        """The probes' epochs for ``training`` (``probe_epochs``, else a fifth of its epochs, at least one)."""
        return default_probe_epochs(training.epochs) if self.probe_epochs is None else self.probe_epochs

    def probe_training(self, training: DPSGD) -> DPSGD:
        """How a probe trains: its epochs and score noise (:func:`~dphypo.api.two_stage.probe_training`)."""
        return probe_training(training, self.epochs_of_probes(training), self.probe_score_noise_factor)

    def expected_runs(self, training: DPSGD) -> float:
        """Expected training runs in full runs: probes count by their share of the final run's epochs."""
        share = self.epochs_of_probes(training) / training.epochs
        return self.two_stage.stage1.expected_probes * share + self.two_stage.stage2.expected_runs

    def describe(self) -> dict[str, Any]:
        """JSON-ready and exact: :meth:`from_dict` re-creates this value (``summary``: ``TwoStage.describe()``)."""
        return {"kind": self.kind, "label": self.label(), "two_stage": _two_stage_dict(self.two_stage),
                "strategy": _strategy_dict(self.probe_strategy), "probe_epochs": self.probe_epochs,
                "placement": None if self.placement is None else self.placement.describe(),
                "recommend": self.recommend, "probe_score_noise_factor": self.probe_score_noise_factor,
                "summary": self.two_stage.describe()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TwoStageSearch:
        """The value :meth:`describe` wrote (``placement``, ``recommend``, the noise factor: today's when absent).

        A placement written before the schedule grew with the probe count (no ``start_share``/``batch_share``) is
        read with both shares 0, its fixed schedule, so a stored design replays the probes it placed.
        """
        epochs, placement = data.get("probe_epochs"), data.get("placement")
        if placement is not None and placement.get("strategy") == "gp":
            placement = {"start_share": 0.0, "batch_share": 0.0, **placement}
        return cls(_two_stage_from_dict(data["two_stage"]), _strategy_from_dict(data["strategy"]),
                   None if epochs is None else int(epochs),
                   None if placement is None else ProbePlacement(**placement),
                   str(data.get("recommend", "best-probe")), float(data.get("probe_score_noise_factor", 1.0)))


@dataclass(frozen=True)
class Subsampled:
    r"""Tune on a Poisson subsample of rate ``fraction``, then one final model (:func:`~dphypo.api.tune_subsampled`).

    Args:
        fraction: The subsample's rate q ∈ (0, 1).
        variant: 1 (final run on X \ X₁) or 2 (on X).
        strategy: As for :class:`SingleStage`.
        runs: As for :class:`SingleStage`.
    """

    fraction: float
    variant: int = 1
    strategy: Strategy | str = "uniform"
    runs: RunCountDistribution = DEFAULT_RUNS
    kind: ClassVar[str] = "subsampled"

    def __post_init__(self) -> None:
        from dphypo.privacy.transfer import check_variant

        if not (isinstance(self.fraction, (int, float)) and 0.0 < self.fraction < 1.0):
            raise ValueError(f"fraction must be in (0, 1), got {self.fraction!r}")
        object.__setattr__(self, "fraction", float(self.fraction))
        check_variant(self.variant)
        object.__setattr__(self, "strategy", resolve_strategy(self.strategy))
        if not isinstance(self.runs, RunCountDistribution):
            raise TypeError(f"runs must be a RunCountDistribution, got {self.runs!r}")

    @property
    def search_strategy(self) -> Strategy:
        """The strategy object."""
        assert not isinstance(self.strategy, str)  # resolved in __post_init__
        return self.strategy

    def label(self) -> str:
        """A one-line description for tables."""
        inner = SingleStage(self.search_strategy, self.runs).label()
        return f"subsampled tuning on q={self.fraction:g} (variant {self.variant}): {inner}, then 1 final run"

    def expected_runs(self, training: DPSGD) -> float:
        """Expected training runs in full runs: E[T] runs on the subsample (about q of a run each) and one more."""
        return float(self.runs.mean) * self.fraction + 1.0

    def describe(self) -> dict[str, Any]:
        """JSON-ready and exact: :meth:`from_dict` re-creates this value."""
        return {"kind": self.kind, "label": self.label(), "fraction": self.fraction, "variant": self.variant,
                "strategy": _strategy_dict(self.search_strategy), "runs": _runs_dict(self.runs)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Subsampled:
        """The value :meth:`describe` wrote."""
        return cls(float(data["fraction"]), int(data["variant"]), _strategy_from_dict(data["strategy"]),
                   _runs_from_dict(data["runs"]))


Design = SingleStage | TwoStageSearch | Subsampled
_KINDS: dict[str, type[SingleStage] | type[TwoStageSearch] | type[Subsampled]] = {
    SingleStage.kind: SingleStage, TwoStageSearch.kind: TwoStageSearch, Subsampled.kind: Subsampled}


def design_from_dict(data: Mapping[str, Any]) -> Design:
    """The design a ``describe()`` wrote, or the pick of a ``dphypo plan --json`` output (its ``"pick"``).

    Raises:
        ValueError: No design there (a plan that picked nothing), or an unknown kind, in one line.
    """
    if not isinstance(data, Mapping):
        raise ValueError(f"a design must be a JSON object, got {type(data).__name__}")
    if "kind" not in data and "pick" in data:  # a plan: its pick
        if data["pick"] is None:
            raise ValueError("the plan picked no design (no candidate fitted its budget): nothing to run")
        data = data["pick"]
    elif "kind" not in data and isinstance(data.get("design"), Mapping):  # a release.json: the design it ran
        data = data["design"]
    kind = data.get("kind")
    if kind not in _KINDS:
        raise ValueError(f"a design's kind must be one of {', '.join(_KINDS)}, got {kind!r}")
    try:
        return _KINDS[kind].from_dict(data)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"an incomplete {kind} design: {exc!r}") from None


def as_design(design: Design | TwoStage) -> Design:
    """A design value (a bare :class:`~dphypo.privacy.two_stage.TwoStage` is ``TwoStageSearch(design)``).

    Raises:
        TypeError: Anything else.
    """
    if isinstance(design, TwoStage):
        return TwoStageSearch(design)
    if isinstance(design, (SingleStage, TwoStageSearch, Subsampled)):
        return design
    raise TypeError(f"design must be dphypo.SingleStage, dphypo.TwoStageSearch (or a dphypo.TwoStage), "
                    f"dphypo.Subsampled or None (the default, auto_design), got {design!r}")


# -- the default: auto_design ------------------------------------------------------------------------------------------
def auto_candidates(epsilon: float, training: DPSGD | None = None, delta: float = 1e-5,
                    max_lost: int = 0) -> tuple[Design, ...]:
    """The candidates :func:`auto_design` tries at total ``epsilon``, in order (module docstring).

    Args:
        epsilon: Total ε.
        training: The final run's training (its score noise sets the noisy probes' factor,
            :func:`probe_score_noise_factor_for`); ``None``: the 20 released probes at the final run's score noise.
        delta: δ.
        max_lost: Lost attempts charged per stage.
    """
    # Released probes are placed by the GP of the released probes (qLogNEI) and committed by its posterior mean:
    # free post-processing (docs/privacy.md, rule 3 for released probes) that never lost against uniform placement +
    # best probe in docs/studies.md ("GP placement of released probes": 10 cells, 3 families, fresh searches; worst
    # 5 % better in every cell).
    released = [TwoStageSearch(TwoStage(ProbeRelease(AUTO_PROBES), FinalRun(), AUTO_SPLIT),
                               placement=AUTO_PLACEMENT, recommend=AUTO_RECOMMEND)] if (
        epsilon >= AUTO_TWENTY_PROBES_FROM) else []
    ten = TwoStageSearch(TwoStage(ProbeRelease(10), FinalRun(), AUTO_SPLIT), placement=AUTO_PLACEMENT,
                         recommend=AUTO_RECOMMEND)
    if training is not None and _starved(ten, training, epsilon, delta, max_lost):
        factor = probe_score_noise_factor_for(AUTO_PROBES, training, epsilon, delta, AUTO_SPLIT, max_lost)
        released.append(TwoStageSearch(TwoStage(ProbeRelease(AUTO_PROBES), FinalRun(), AUTO_SPLIT),
                                       placement=AUTO_PLACEMENT, recommend=AUTO_RECOMMEND,
                                       probe_score_noise_factor=factor))
    out: list[Design] = [*released, ten]
    out.append(TwoStageSearch(TwoStage(ProbeSelection(RepeatAndSelect(geometric(1 / 20))), FinalRun(), AUTO_SPLIT)))
    out += [SingleStage("uniform", DEFAULT_RUNS if m == 20 else geometric(1 / m)) for m in (20, 10, 5, 2)]
    return tuple(out)


def _starved(design: TwoStageSearch, training: DPSGD, epsilon: float, delta: float, max_lost: int) -> bool:
    """Whether the probes' score releases alone leave their training less than its share of their ε."""
    floor = score_release_floor(design, training, delta, max_lost)[0]
    return floor > (1.0 - AUTO_PROBE_TRAINING_SHARE) * design.two_stage.split * epsilon


def probe_score_noise_factor_for(probes: int, training: DPSGD, epsilon: float, delta: float = 1e-5,
                                 split: float = 0.5, max_lost: int = 0) -> float:
    """The rule's probe score-noise factor: the smallest that leaves the probes' training a share of their ε.

    ``probes`` released scores at factor f cost at least ε_f (:func:`score_release_floor`: n·α/(2(f·s)²) in RDP,
    Mironov 2017, Props. 1 and 7, whatever σ); the rule takes the smallest f of :data:`AUTO_PROBE_NOISE_FACTORS`
    with ε_f ≤ (1 −
    :data:`AUTO_PROBE_TRAINING_SHARE`) · ``split`` · ε, i.e. noisier scores only where today's would leave the
    probes' training almost nothing, and no noisier than that. The largest factor when none does (the candidate is
    then refused by its floor).

    Returns:
        1.0 for a training that releases no noisy score.
    """
    if training.score_noise is None:
        return 1.0
    allowed = (1.0 - AUTO_PROBE_TRAINING_SHARE) * split * epsilon
    for factor in AUTO_PROBE_NOISE_FACTORS:
        design = TwoStageSearch(TwoStage(ProbeRelease(probes), FinalRun(), split), probe_score_noise_factor=factor)
        if score_release_floor(design, training, delta, max_lost)[0] <= allowed:
            return factor
    return AUTO_PROBE_NOISE_FACTORS[-1]


def _score_curve(training: DPSGD) -> RdpCurve | None:
    """One released score's RDP curve (Gaussian, sensitivity 1, std ``score_noise`` counts); ``None`` without one."""
    if training.score_noise is None:
        return None
    return gaussian_rdp(training.score_noise, orders=DEFAULT_ORDERS)


def _epsilon(curve: RdpCurve, delta: float) -> float:
    return float(epsilon_from_rdp(curve.orders, curve.epsilons, delta, pure_epsilon=curve.pure_epsilon)[0])


def score_release_floor(design: Design, training: DPSGD, delta: float, max_lost: int = 0) -> tuple[float, float]:
    """What a design's score releases alone cost, however noisy the training: ``(stage 1, stage 2)`` ε at δ.

    The released scores' RDP curve (n·α/(2 score_noise²) for n released probes; the selection's tuned curve of one
    score's for a selection) lower-bounds the stage's curve at every σ (the training's curve adds to it, and the
    selection bounds are non-decreasing in the base curve), and the conversion is monotone, so a stage whose floor
    exceeds its share of ε cannot be calibrated. A single-stage or subsampled design has one stage: ``(floor, 0)``.
    ``max_lost`` lost attempts charged up front (per stage for a two-stage design) release one more score each.

    Returns:
        ``(0, 0)`` for a training without score noise (nothing is released as a score).
    """
    score = _score_curve(training)
    if score is None:
        return 0.0, 0.0

    def charged(curve: RdpCurve, one: RdpCurve) -> RdpCurve:
        return curve if not max_lost else compose(curve, one.repeated(max_lost))

    if isinstance(design, TwoStageSearch):
        probe_score = _score_curve(design.probe_training(training))
        assert probe_score is not None  # a training with score noise: its probes have some too
        first, _ = design.two_stage.stage1.curve(probe_score)
        second, _ = design.two_stage.stage2.curve(score)
        return _epsilon(charged(first, probe_score), delta), _epsilon(charged(second, score), delta)
    from dphypo.privacy import tuning_rdp

    strategy = design.search_strategy
    tuned = tuning_rdp(score, design.runs, strategy.C, strategy.c)
    return _epsilon(charged(tuned.curve, score), delta), 0.0


def _two_stage_calibrates(design: TwoStageSearch, training: DPSGD, epsilon: float, delta: float) -> bool | None:
    """Whether both σ calibrate: ``True``/``False`` where the brackets decide, ``None`` where only calibrating can.

    Mirrors :func:`~dphypo.privacy.two_stage.calibrate_two_stage`: each stage alone must meet its share at the
    largest σ (necessary and sufficient for its σ), and the composed total at σ = 10 for both (below every σ the
    common scale can reach) meeting ε is sufficient for the scale.
    """
    two_stage = design.two_stage
    probe = design.probe_training(training)
    shares = (two_stage.split * epsilon, (1.0 - two_stage.split) * epsilon)
    for stage, run, share in ((two_stage.stage1, probe, shares[0]), (two_stage.stage2, training, shares[1])):
        curve, _ = stage.curve(run.mechanism(_LARGEST_SIGMA).rdp())
        if _epsilon(curve, delta) > share:
            return False
    first, _ = two_stage.stage1.curve(probe.mechanism(_SCALED_SIGMA).rdp())
    second, _ = two_stage.stage2.curve(training.mechanism(_SCALED_SIGMA).rdp())
    return True if _epsilon(compose(first, second), delta) <= epsilon else None


def _single_stage_calibrates(design: SingleStage, training: DPSGD, epsilon: float, delta: float,
                             max_lost: int) -> bool | None:
    """Whether σ calibrates: ``True`` where RDP alone meets ε at the largest σ, else ``None`` (a profile may)."""
    strategy = design.search_strategy
    search = RepeatAndSelect(design.runs, strategy.C, strategy.c)
    report = PrivacyAccounting(search, training.mechanism(_LARGEST_SIGMA).rdp(), delta, max_lost=max_lost).account()
    return True if report.epsilon <= epsilon else None


def _calibrates(design: Design, training: DPSGD, epsilon: float, delta: float, max_lost: int = 0) -> bool:
    """Whether :func:`dphypo.tune` can calibrate ``design`` for (ε, δ): the bracket check, else the calibration.

    With lost attempts charged (``max_lost`` > 0) the two-stage brackets do not decide (the charged scaling starts
    from the uncharged σ), so the charged calibration itself does.
    """
    from dphypo.api.search import accounted_search, calibrated_sigma
    from dphypo.api.two_stage import charged_mechanisms

    if isinstance(design, TwoStageSearch):
        decided = None if max_lost else _two_stage_calibrates(design, training, epsilon, delta)
        if decided is not None:
            return decided
        try:
            charged_mechanisms(training, design.two_stage, probe_epochs=design.epochs_of_probes(training),
                               epsilon=epsilon, delta=delta, max_lost=max_lost,
                               probe_score_noise_factor=design.probe_score_noise_factor)
        except CalibrationError:
            return False
        return True
    assert isinstance(design, SingleStage)
    if _single_stage_calibrates(design, training, epsilon, delta, max_lost):
        return True
    try:
        calibrated_sigma(accounted_search(design.search_strategy, design.runs), training, epsilon=epsilon,
                         delta=delta, max_lost=max_lost)
    except CalibrationError:
        return False
    return True


def auto_design(training: DPSGD, epsilon: float, delta: float = 1e-5, budget: float | None = None, *,
                max_lost: int = 0, two_stage_only: bool = False) -> tuple[Design, str]:
    """The default design for a total (ε, δ) and a compute budget, and why (module docstring: the rule).

    Args:
        training: How a full run trains (its epochs set the probes' a fifth; its score noise sets the floors).
        epsilon: Total ε of the search.
        delta: δ.
        budget: Most expected training runs, in full runs (a probe counts its share of the epochs); ``None``: any.
        max_lost: Lost attempts the search is charged for up front (per stage for a two-stage design), as
            :func:`dphypo.tune` charges them.
        two_stage_only: Try the two-stage candidates only (``dphypo tune --design two-stage`` without ``--probes``).

    Returns:
        ``(design, reason)``: the first candidate that fits the budget and calibrates, and one line saying why it
        was chosen and why each earlier candidate was not. Nothing is trained or drawn and no data is read.

    Raises:
        ValueError: Bad arguments, or no candidate runs (one line naming the cheapest candidate's floor).
    """
    if not isinstance(training, DPSGD):
        raise TypeError(f"training must be a dphypo.train.DPSGD, got {training!r}")
    check_positive("epsilon", epsilon)
    check_delta(delta)
    if budget is not None:
        check_positive("budget", budget)
    check_non_negative_int("max_lost", max_lost)
    candidates = [c for c in auto_candidates(epsilon, training, delta, max_lost)
                  if not two_stage_only or isinstance(c, TwoStageSearch)]
    skipped: list[str] = []
    for design in candidates:
        why_not = _why_not(design, training, epsilon, delta, budget, max_lost)
        if why_not is None:
            return design, _reason(design, epsilon, skipped)
        skipped.append(f"{design.label()}: {why_not}")
    what = "two-stage design" if two_stage_only else "design"
    within = "" if budget is None else f" within {budget:g} runs"
    advice = ("a single-stage search may (the default design, --design auto)" if two_stage_only else
              "raise epsilon, or add score noise (a larger score_noise / --score-noise-accuracy)")
    raise ValueError(f"no {what} runs at epsilon={epsilon:g}, delta={delta:g}{within}: {skipped[-1]}; {advice}")


def _why_not(design: Design, training: DPSGD, epsilon: float, delta: float, budget: float | None,
             max_lost: int) -> str | None:
    """Why a candidate cannot be the pick (over the budget, a score-release floor over its share, no σ), or ``None``."""
    runs = design.expected_runs(training)
    if budget is not None and runs > budget:
        return f"{runs:g} expected runs, over the budget of {budget:g}"
    floors = score_release_floor(design, training, delta, max_lost)
    split = design.two_stage.split if isinstance(design, TwoStageSearch) else 1.0
    shares = (split * epsilon, (1.0 - split) * epsilon)
    names = ("its score releases", "its final score") if isinstance(design, TwoStageSearch) else ("its scores", "")
    for floor, share, name in zip(floors, shares, names, strict=True):
        if floor > share:
            whose = "its share" if isinstance(design, TwoStageSearch) else "the total"
            return f"{name} alone cost epsilon >= {floor:.3g}, above {share:.3g} ({whose})"
    if not _calibrates(design, training, epsilon, delta, max_lost):
        return f"no sigma meets epsilon={epsilon:g}"
    return None


def _reason(design: Design, epsilon: float, skipped: list[str]) -> str:
    """One line: the pick, the study behind it, and why each earlier candidate was not picked."""
    if isinstance(design, TwoStageSearch) and isinstance(design.two_stage.stage1, ProbeRelease):
        n, factor = design.two_stage.stage1.probes, design.probe_score_noise_factor
        if n == AUTO_PROBES and factor == 1.0:
            why = "the equal-epsilon studies' winner at epsilon = 8 (docs/studies.md)"
        elif n == AUTO_PROBES:
            why = (f"10 probes' score releases leave their training under {AUTO_PROBE_TRAINING_SHARE:.0%} of their "
                   f"share, so 20 probes with {factor:g}x score noise, the smallest factor that leaves it "
                   f"{AUTO_PROBE_TRAINING_SHARE:.0%} (docs/guide.md)")
        else:
            why = "the equal-epsilon studies' winner at epsilon = 4 and, where it fits, at 2 (docs/studies.md)"
    elif isinstance(design, TwoStageSearch):
        why = "the equal-epsilon studies' digits winner at epsilon = 2 (docs/studies.md)"
    else:
        why = "the cheapest search that still runs here (no two-stage candidate does)"
    rest = "" if not skipped else "; not " + "; not ".join(skipped)
    return f"auto at epsilon = {epsilon:g}: {why}{rest}"
