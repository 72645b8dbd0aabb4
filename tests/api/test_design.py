"""A search design as one value (issue #30 items 3 and 4): describe/from_dict, the default rule, one entry point."""

from __future__ import annotations

import json

import numpy as np
import pytest

import dphypo
from dphypo import DPSGD, GPUCB, LogFloat, SearchSpace, SingleStage, Subsampled, TwoStage, TwoStageSearch
from dphypo.api import design_from_dict
from dphypo.api.design import auto_candidates, auto_design, score_release_floor
from dphypo.privacy import Poisson, RepeatAndSelect, geometric, logarithmic
from dphypo.privacy.two_stage import FinalRun, FinalSelection, ProbeRelease, ProbeSelection, TwoStageDesignError
from dphypo.strategies import GPTopSet
from dphypo.strategies.gp.placement import ProbePlacement
from dphypo.train.data import split_sizes


def _training(dataset: str = "digits") -> DPSGD:
    """``dphypo tune``'s default training on ``dataset`` (score noise 0.02 of the validation accuracy, in counts)."""
    n_train, n_val = split_sizes(dataset)
    return DPSGD(batch_size=64, epochs=10, n_train=n_train, n_val=n_val, score_noise=0.02 * n_val)


DESIGNS = [
    SingleStage(),
    SingleStage("gp", logarithmic(0.01)),
    SingleStage(GPTopSet(C=2.0, top_mass=0.1), logarithmic(0.05)),
    SingleStage("uniform", Poisson(5.0)),
    TwoStageSearch(),
    TwoStageSearch(TwoStage(ProbeRelease(12, top_k=3), FinalSelection(RepeatAndSelect(geometric(1 / 3))), 0.3),
                   "gp", probe_epochs=3),
    TwoStageSearch(TwoStage(ProbeSelection(RepeatAndSelect(geometric(1 / 50), 1.5, 2 / 3)), FinalRun(), 0.7),
                   GPUCB(C=1.5, c=2 / 3, beta=2.0)),
    Subsampled(0.25, 2, GPUCB(C=1.25, c=0.8), geometric(0.1)),
    TwoStageSearch(TwoStage(ProbeRelease(12, top_k=2), FinalSelection(RepeatAndSelect(geometric(1 / 3)))),
                   placement=ProbePlacement("gp", "ucb", batch=3, start=4, uniform_share=0.0), recommend="gp-mean"),
    TwoStageSearch(placement=ProbePlacement("uniform"), recommend="gp-near-best"),
    TwoStageSearch(TwoStage(ProbeRelease(20)), probe_score_noise_factor=2.0),
]


@pytest.mark.parametrize("design", DESIGNS, ids=lambda d: d.label())
def test_a_described_design_is_recreated_exactly_from_its_json(design) -> None:
    written = json.loads(json.dumps(design.describe()))
    assert design_from_dict(written) == design
    assert written["kind"] == design.kind and written["label"] == design.label()


def test_a_two_stage_design_names_its_placement_and_rule_and_older_files_read_as_todays() -> None:
    design = TwoStageSearch(placement=ProbePlacement("gp", "log-nei"), recommend="gp-mean-grid")
    written = json.loads(json.dumps(design.describe()))
    assert written["placement"]["acquisition"] == "log-nei" and written["recommend"] == "gp-mean-grid"
    assert "probes placed by gp-log-nei" in design.label() and "committed by gp-mean-grid" in design.label()
    today = {k: v for k, v in TwoStageSearch().describe().items() if k not in ("placement", "recommend")}
    assert design_from_dict(today) == TwoStageSearch() and TwoStageSearch().placement is None
    assert TwoStageSearch().label() == "release 20 probes -> 1 final run, split 0.5"  # the default is unchanged


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"placement": ProbePlacement()}, TwoStageDesignError,
     r"a probe placement needs released probes: a probe selection's densities must be projected onto its S_\{C,c\}"),
    ({"recommend": "gp-mean"}, TwoStageDesignError, "a probe selection releases its best probe only"),
])
def test_a_placement_or_a_gp_rule_for_a_probe_selection_is_refused_in_one_line(kwargs, error, match) -> None:
    selection = TwoStage(ProbeSelection(RepeatAndSelect(geometric(0.1))))
    with pytest.raises(error, match=match) as raised:
        TwoStageSearch(selection, **kwargs)
    assert "\n" not in str(raised.value)
    with pytest.raises(ValueError, match="recommend must be one of best-probe, gp-mean"):
        TwoStageSearch(recommend="gp-max")
    with pytest.raises(TwoStageDesignError, match="a probe placement replaces the strategy"):
        TwoStageSearch(strategy="gp", placement=ProbePlacement())


def test_design_from_dict_reads_a_plans_pick_and_refuses_in_one_line() -> None:
    assert design_from_dict({"best": "x", "pick": SingleStage("gp").describe()}) == SingleStage("gp")
    with pytest.raises(ValueError, match="the plan picked no design"):
        design_from_dict({"pick": None})
    with pytest.raises(ValueError, match="a design's kind must be one of single-stage, two-stage, subsampled"):
        design_from_dict({"kind": "three-stage"})
    with pytest.raises(ValueError, match="a design's strategy must be one of"):
        design_from_dict({**SingleStage().describe(), "strategy": {"name": "bayes"}})


def test_the_score_release_floor_is_the_studies_closed_form() -> None:
    # docs/studies.md: n released digits probe scores cost at least 1.88 (n = 10) and 2.77 (n = 20) at δ = 1e-5
    floors = {n: score_release_floor(TwoStageSearch(TwoStage(ProbeRelease(n))), _training(), 1e-5)[0]
              for n in (10, 20)}
    assert (round(floors[10], 2), round(floors[20], 2)) == (1.88, 2.77)
    assert score_release_floor(TwoStageSearch(), DPSGD(batch_size=8, epochs=1, n_train=100), 1e-5) == (0.0, 0.0)


# The automatic design's released probes are GP-placed and GP-committed (docs/studies.md, "GP placement of released
# probes"); a design given explicitly keeps uniform placement + best probe.
_GP = " (probes placed by gp-log-nei) (committed by gp-mean)"


@pytest.mark.parametrize(("dataset", "epsilon", "expected"), [
    # the equal-ε studies' winners (docs/studies.md: "Two-stage designs with cheap probes" and "... on the
    # MNIST-subset CNN family", 2-epoch probes, ≤ 10-20 runs of compute)
    ("digits", 8.0, "release 20 probes -> 1 final run, split 0.5" + _GP),
    # digits at ε < 4.43: 10 probes' score releases starve their training, so 20 probes with noisier scores
    ("digits", 4.0, "release 20 probes -> 1 final run, split 0.5" + _GP + ", probe score noise x2"),
    ("digits", 2.0, "release 20 probes -> 1 final run, split 0.5" + _GP + ", probe score noise x3"),
    ("digits", 6.0, "release 10 probes -> 1 final run, split 0.5" + _GP),
    ("mnist-subset", 8.0, "release 20 probes -> 1 final run, split 0.5" + _GP),
    ("mnist-subset", 4.0, "release 10 probes -> 1 final run, split 0.5" + _GP),
    ("mnist-subset", 2.0, "release 10 probes -> 1 final run, split 0.5" + _GP),
    # below the studies: the cheapest design that still runs
    ("digits", 1.0, "single-stage uniform search, E[T]=20 (geometric)"),
])
def test_auto_picks_the_studies_winner_that_runs_at_each_epsilon(dataset, epsilon, expected) -> None:
    design, reason = auto_design(_training(dataset), epsilon)
    assert design.label() == expected
    assert reason.startswith(f"auto at epsilon = {epsilon:g}") and "\n" not in reason
    if "probe score noise" in expected:  # why noisier probes: 10 probes' scores alone cost ≥ 1.88 of 2 (or 1)
        assert "10 probes' score releases leave their training under 15% of their share" in reason


def test_auto_places_released_probes_by_the_gp_and_commits_its_posterior_mean() -> None:
    # issue #31: the studies' winner (never lost against uniform + best probe on fresh searches, worst 5 % better)
    released = [d for d in auto_candidates(8.0, _training()) if getattr(d, "placement_name", None) == "gp-log-nei"]
    assert len(released) == 2 and {d.recommend for d in released} == {"gp-mean"}
    selection = [d for d in auto_candidates(8.0) if d.label().startswith("select")]
    assert selection and all(d.placement is None and d.recommend == "best-probe" for d in selection)
    design = auto_design(_training(), 8.0)[0]
    assert design_from_dict(design.describe()) == design  # a plan's pick runs as it is, GP rules included


def test_auto_respects_the_compute_budget_and_refuses_only_where_nothing_runs() -> None:
    design, reason = auto_design(_training(), 8.0, budget=2.5)
    assert design == SingleStage("uniform", geometric(1 / 2))  # 2 runs; every earlier candidate needs ≥ 3
    assert "5 expected runs, over the budget of 2.5" in reason
    with pytest.raises(ValueError, match=r"^no design runs at epsilon=0.5, delta=1e-05: .* cost epsilon >= 0.637"):
        auto_design(_training(), 0.5)
    assert [d.kind for d in auto_candidates(8.0)][:3] == ["two-stage"] * 3
    assert [d.probe_score_noise_factor for d in auto_candidates(4.0, _training())[:2]] == [2.0, 1.0]
    with pytest.raises(ValueError, match=r"^no two-stage design runs at epsilon=1, .*; a single-stage search may"):
        auto_design(_training(), 1.0, two_stage_only=True)  # `--design two-stage` at ε = 1 on digits


# -- dphypo.tune: one entry point, the design as a value ---------------------------------------------------------
SPACE = SearchSpace({"lr": LogFloat(1e-3, 1.0, 4)})
TINY = DPSGD(batch_size=50, epochs=5, n_train=1000, n_val=300, score_noise=6.0)


class _Stop(Exception):
    pass


def _recording(seen: list, name: str):
    def runner(objective, space, training, *args, **kwargs):
        seen.append((name, args, kwargs))
        raise _Stop

    return runner


@pytest.fixture
def runners(monkeypatch) -> list:
    seen: list = []
    for name in ("tune_single_stage", "tune_two_stage", "tune_subsampled"):
        monkeypatch.setattr(f"dphypo.api.runner.{name}", _recording(seen, name))
    return seen


def _called(seen: list, **kwargs) -> tuple:
    with pytest.raises(_Stop):
        dphypo.tune(lambda params, run: 0.0, SPACE, TINY, **kwargs)
    return seen.pop()


def test_dphypo_tune_runs_the_clis_default_design_and_any_design_value(runners) -> None:
    name, args, kwargs = _called(runners, epsilon=8.0)  # the default: auto_design's pick, two-stage at ε = 8
    expected, _ = auto_design(TINY, 8.0)
    assert name == "tune_two_stage" and args == (expected.two_stage,) and kwargs["probe_epochs"] is None
    name, args, kwargs = _called(runners, epsilon=8.0, design=TwoStage(ProbeRelease(5)))
    assert name == "tune_two_stage" and args == (TwoStage(ProbeRelease(5)),)
    name, _, kwargs = _called(runners, epsilon=8.0, design=TwoStageSearch(strategy="gp", probe_epochs=2))
    assert isinstance(kwargs["strategy"], GPUCB) and kwargs["probe_epochs"] == 2
    assert kwargs["placement"] is None and kwargs["recommend"] == "best-probe"
    placed = TwoStageSearch(placement=ProbePlacement("gp", "ucb"), recommend="gp-mean")
    name, _, kwargs = _called(runners, epsilon=8.0, design=placed)
    assert kwargs["placement"] == ProbePlacement("gp", "ucb") and kwargs["recommend"] == "gp-mean"
    name, _, kwargs = _called(runners, epsilon=8.0, design=SingleStage("gp", geometric(0.1)))
    assert name == "tune_single_stage" and isinstance(kwargs["strategy"], GPUCB) and kwargs["runs"] == geometric(0.1)
    name, _, kwargs = _called(runners, epsilon=8.0, design=Subsampled(0.25, 2))
    assert name == "tune_subsampled" and (kwargs["fraction"], kwargs["variant"]) == (0.25, 2)


@pytest.mark.parametrize("single", [{"strategy": "gp"}, {"runs": geometric(0.1)}, {"sigma": 1.0}])
def test_a_single_stage_argument_keeps_the_single_stage_search(runners, single) -> None:
    arguments = {"epsilon": 8.0, **single} if "sigma" not in single else single
    name, _, kwargs = _called(runners, **arguments)
    assert name == "tune_single_stage" and all(kwargs[k] == v for k, v in single.items())


def test_the_default_design_charges_lost_attempts_and_keeps_the_journal(runners) -> None:
    name, _, kwargs = _called(runners, epsilon=8.0, journal="j.db")
    assert name == "tune_two_stage" and kwargs["options"].journal == "j.db"
    name, _, kwargs = _called(runners, epsilon=8.0, max_lost=1, design=TwoStageSearch())
    assert name == "tune_two_stage" and kwargs["max_lost"] == 1
    # one charged attempt per stage releases one more score each: the floors grow
    floors = [score_release_floor(TwoStageSearch(), _training(), 1e-5, lost)[0] for lost in (0, 1)]
    assert floors[1] > floors[0]


def test_strategy_and_runs_beside_a_design_are_refused() -> None:
    with pytest.raises(TypeError, match="strategy and runs are fields of the design"):
        dphypo.tune(lambda params, run: 0.0, SPACE, TINY, epsilon=8.0, design=SingleStage(), strategy="gp")
    with pytest.raises(TypeError, match=r"design must be dphypo\.SingleStage"):
        dphypo.tune(lambda params, run: 0.0, SPACE, TINY, epsilon=8.0, design="two-stage")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="a two-stage design calibrates two noise multipliers"):
        dphypo.tune(lambda params, run: 0.0, SPACE, TINY, sigma=1.0, design=TwoStageSearch())


def test_the_planners_pick_is_the_design_value_of_its_best_row() -> None:
    from dphypo.simulation.planner import PlanCandidate, PlanResult, PlanRow, TwoStageCandidate, candidate_design

    staged = TwoStageCandidate(TwoStage(ProbeRelease(10)), None, final_epochs=10)
    gp = PlanCandidate("gp", GPUCB(C=1.5, c=2 / 3), geometric(0.05))
    rows = tuple(PlanRow(c, "ok", mean=m, ci95=(m - 0.01, m + 0.01), values=np.full(4, m) + np.arange(4) * 1e-3)
                 for c, m in ((gp, 0.8), (staged, 0.9)))
    plan = PlanResult(8.0, 1e-5, 4, 0, (1.0,), 0.95, rows)
    pick = json.loads(json.dumps(plan.to_dict()))["pick"]
    assert design_from_dict(pick) == candidate_design(staged) == TwoStageSearch(TwoStage(ProbeRelease(10)), "uniform",
                                                                                 probe_epochs=10)
    assert candidate_design(gp) == SingleStage(GPUCB(C=1.5, c=2 / 3), geometric(0.05))


def test_the_cheap_calibration_check_mirrors_the_calibrations_brackets() -> None:
    # auto_design decides "calibrates" at two σ without calibrating; that is sound only for these brackets
    from dphypo.api import design as design_module
    from dphypo.privacy import two_stage as calibration

    assert design_module._LARGEST_SIGMA == calibration._FLOOR_SIGMA
    assert calibration._SMALLEST_SIGMA * calibration._SCALE_BOUNDS[1] == design_module._SCALED_SIGMA


def test_a_noisier_probe_score_is_a_design_parameter_with_its_own_floor() -> None:
    twenty = TwoStage(ProbeRelease(20))
    floors = [score_release_floor(TwoStageSearch(twenty, probe_score_noise_factor=f), _training(), 1e-5)
              for f in (1.0, 2.0)]
    assert round(floors[0][0], 2) == 2.77 and round(floors[1][0], 2) == 1.29  # n·α/(2(f·s)²): the noise doubled
    assert floors[0][1] == floors[1][1]  # the final run's score is released at the final noise
    assert "probe score noise x2" in TwoStageSearch(twenty, probe_score_noise_factor=2).label()
    old = {k: v for k, v in TwoStageSearch().describe().items() if k != "probe_score_noise_factor"}
    assert design_from_dict(old).probe_score_noise_factor == 1.0  # a file written before reads as today's
    for bad in (0.0, -1.0, float("inf"), "2"):
        with pytest.raises(ValueError, match="probe_score_noise_factor must be a finite number > 0") as raised:
            TwoStageSearch(probe_score_noise_factor=bad)  # type: ignore[arg-type]
        assert "\n" not in str(raised.value)


@pytest.mark.parametrize("epsilon", [4.0, 2.0])
def test_the_auto_noisy_probe_design_meets_epsilon_by_dp_accountings_own_composition(epsilon) -> None:
    # recomputed outside dphypo: dp_accounting's PLD accountant composes the 20 probes (each 34 Poisson-subsampled
    # Gaussian steps and its Gaussian score release at the raised noise) and the final run
    import dp_accounting
    from dp_accounting.pld import PLDAccountant

    from dphypo.api.two_stage import two_stage_mechanisms

    training = _training()
    design, _ = auto_design(training, epsilon)
    assert isinstance(design, TwoStageSearch) and design.probe_score_noise_factor > 1.0
    probe, final, report = two_stage_mechanisms(training, design.two_stage,
                                                probe_epochs=design.epochs_of_probes(training), epsilon=epsilon,
                                                delta=1e-5, probe_score_noise_factor=design.probe_score_noise_factor)
    assert probe.score_noise == pytest.approx(design.probe_score_noise_factor * training.score_noise)
    assert report.epsilon <= epsilon

    def run(m) -> dp_accounting.DpEvent:
        steps = dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(m.sample_rate, dp_accounting.GaussianDpEvent(m.sigma)), m.steps)
        return dp_accounting.ComposedDpEvent([steps, dp_accounting.GaussianDpEvent(m.score_noise)])

    accountant = PLDAccountant(value_discretization_interval=1e-3)
    accountant.compose(run(probe), 20).compose(run(final))
    assert accountant.get_epsilon(1e-5) <= epsilon * (1 + 2e-3)


def test_a_stored_gp_placement_without_schedule_shares_replays_its_fixed_schedule() -> None:
    fixed = ProbePlacement("gp", "log-nei", batch=5, start=5, start_share=0.0, batch_share=0.0)
    stored = TwoStageSearch(placement=fixed, recommend="gp-mean").describe()
    for key in ("start_share", "batch_share"):  # what a design written before the shares holds
        del stored["placement"][key]
    read = TwoStageSearch.from_dict(stored)
    assert read.placement == fixed and read.placement.schedule(40) == (5,) + (5,) * 7
    assert TwoStageSearch.from_dict(TwoStageSearch(placement=ProbePlacement("gp")).describe()).placement == \
        ProbePlacement("gp")  # today's designs round-trip with their shares
