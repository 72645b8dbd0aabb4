"""The Optuna bridge: an ``objective(trial)`` runs privately through dphypo.tune on a fixed trial.

End to end it releases one of the grid points at the ε of the same search written as a plain dphypo objective (same
seed: same release); a ``suggest_*`` outside the space stops the search with RunMisuse and no release; every real
Optuna distribution converts.
"""

from __future__ import annotations

import contextlib
import math
import pickle
import subprocess
import sys
import warnings

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from torch import nn

import dphypo
from dphypo.integrations.optuna import OptunaObjective, PrivateFixedTrial, tune_optuna
from dphypo.privacy import geometric
from dphypo.search.records import Run, RunMisuse
from dphypo.search.storage import SQLiteJournal
from dphypo.space import Choice, Float, Grid, Int, LogFloat, SearchSpace
from dphypo.strategies import Uniform
from tests._private import train_privately

DISTRIBUTIONS = {
    "lr": FloatDistribution(1e-3, 1.0, log=True),
    "clip": FloatDistribution(0.5, 2.0),
    "units": IntDistribution(1, 3),
    "opt": CategoricalDistribution(("sgd", "adam")),
}
SPACE = SearchSpace.from_optuna(DISTRIBUTIONS, points=4)
TRAINING = dphypo.DPSGD(n_train=100, n_val=50, batch_size=10, epochs=1, score_noise=5.0)
SEARCH = dict(sigma=1.0, runs=geometric(0.2), strategy=Uniform(), seed=3)  # a fixed σ: no calibration (fast)
SUGGESTED: list[dict] = []
# Optuna rounds a range its step does not divide down to the lattice, with a warning; the tests use such ranges.
pytestmark = pytest.mark.filterwarnings("ignore:The distribution is specified by:UserWarning")


def _count(lr: float, clip: float, units: int, opt: str) -> int:
    """A deterministic stand-in for "correct validation predictions" (in [0, n_val = 50])."""
    return min(50, int(20 * lr + 5 * clip + 3 * units + (4 if opt == "adam" else 0)))


def optuna_objective(trial) -> tuple:
    lr = trial.suggest_float("lr", 1e-3, 1.0, log=True)
    clip = trial.suggest_float("clip", 0.5, 2.0)
    units = trial.suggest_int("units", 1, 3)
    opt = trial.suggest_categorical("opt", ["sgd", "adam"])
    SUGGESTED.append({"lr": lr, "clip": clip, "units": units, "opt": opt})
    model = train_privately(trial.run, clip=clip)
    return trial.run.private_score(_count(lr, clip, units, opt)), model


def plain_objective(params: dict, run) -> tuple:
    model = train_privately(run, clip=params["clip"])
    return run.private_score(_count(**params)), model


def test_an_optuna_objective_runs_privately_end_to_end_at_the_epsilon_of_the_plain_search() -> None:
    SUGGESTED.clear()
    bridged = tune_optuna(optuna_objective, DISTRIBUTIONS, TRAINING, points=4, **SEARCH)
    plain = dphypo.tune(plain_objective, SPACE, TRAINING, **SEARCH)
    release = bridged.release
    assert release.epsilon == plain.release.epsilon and 0 < release.epsilon < math.inf
    assert release.params == plain.release.params and release.score == plain.release.score
    SPACE.index(release.params)  # a grid point
    assert isinstance(release.artifact, nn.Linear)  # the plain model, as returned beside the score
    # suggest_* returned exactly the grid values dphypo drew, one run after the other
    assert [trial.params for trial in bridged.history.trials] == SUGGESTED and len(SUGGESTED) >= 3
    assert [trial.params for trial in bridged.history.trials] == [trial.params for trial in plain.history.trials]
    assert all(type(s["units"]) is int and type(s["lr"]) is float for s in SUGGESTED)


def test_tune_optuna_with_a_space_equals_tune_on_the_wrapped_objective() -> None:
    via_space = tune_optuna(optuna_objective, SPACE, TRAINING, **SEARCH)
    direct = dphypo.tune(OptunaObjective(optuna_objective, SPACE), SPACE, TRAINING, **SEARCH)
    assert (via_space.release.params, via_space.release.epsilon) == (direct.release.params, direct.release.epsilon)
    with pytest.raises(ValueError, match="points and prior apply to a mapping"):
        tune_optuna(optuna_objective, SPACE, TRAINING, points=4, **SEARCH)


def _outside(trial) -> object:
    trial.suggest_float("lr", 1e-3, 1.0, log=True)
    trial.suggest_float("weight_decay", 1e-5, 1e-2, log=True)  # not in the space
    model = train_privately(trial.run)
    return trial.run.private_score(10), model


def _outside_caught(trial) -> object:
    with contextlib.suppress(Exception):  # a broad except in user code must not turn the misuse into a failed run
        trial.suggest_float("weight_decay", 1e-5, 1e-2, log=True)
    train_privately(trial.run)
    return trial.run.private_score(10)


def _narrower(trial) -> object:
    trial.suggest_float("lr", 1e-2, 1.0, log=True)  # the space's axis reaches down to 1e-3
    train_privately(trial.run)
    return trial.run.private_score(10)


def _wrong_kind(trial) -> object:
    trial.suggest_int("clip", 1, 2)  # the space's clip axis is continuous
    train_privately(trial.run)
    return trial.run.private_score(10)


def _changed_choices(trial) -> object:
    trial.suggest_categorical("opt", ["sgd", "adam"])
    trial.suggest_categorical("opt", ["sgd", "adam", "rmsprop"])  # the same name, another distribution
    train_privately(trial.run)
    return trial.run.private_score(10)


@pytest.mark.parametrize(
    ("objective", "message"),
    [
        (_outside, r"trial.suggest_float\('weight_decay', \.\.\.\): 'weight_decay' is not a parameter of the search "
                   r"space \(its axes: lr, clip, units, opt\)"),
        (_outside_caught, r"'weight_decay' is not a parameter of the search space"),
        (_narrower, r"trial.suggest_float\('lr', \.\.\.\): FloatDistribution\(.*\) disagrees with the space's axis "
                    r"LogFloat\(low=0.001, .*\): the grid value 0.001 is outside it"),
        (_wrong_kind, r"trial.suggest_int\('clip', \.\.\.\): IntDistribution\(.*\) disagrees with the space's axis"),
        (_changed_choices, r"trial.suggest_categorical\('opt', \.\.\.\): "),
    ],
    ids=["unknown name", "caught by the objective", "narrower range", "int on a float axis", "changed choices"],
)
def test_a_suggestion_outside_the_space_stops_the_search_without_a_release(tmp_path, objective, message) -> None:
    journal = tmp_path / "search.db"
    with pytest.raises(RunMisuse, match=message) as caught:
        tune_optuna(objective, SPACE, TRAINING, journal=journal, **SEARCH)
    assert "\n" not in str(caught.value)
    with SQLiteJournal.open(journal, read_only=True) as opened:
        assert opened.release() is None
        assert not any(attempt["status"] == "data_failure" for attempt in opened.attempts())


def _trial(params: dict, space: SearchSpace = SPACE) -> tuple[PrivateFixedTrial, Run]:
    run = Run(number=7, seed=1, privacy=None, grid_index=space.index(params)).open()
    return PrivateFixedTrial(params, run, space), run


def test_the_fixed_trial_returns_the_drawn_grid_values_and_exposes_the_run() -> None:
    params = SPACE.params(5)
    trial, run = _trial(params)
    assert isinstance(trial, optuna.trial.FixedTrial) and trial.run is run and trial.number == 7
    assert trial.suggest_float("lr", 1e-3, 1.0, log=True) == params["lr"]
    assert trial.suggest_float("clip", 0.5, 2.0) == params["clip"]
    assert trial.suggest_int("units", 1, 3) == params["units"]
    assert trial.suggest_categorical("opt", ("sgd", "adam")) == params["opt"]
    assert trial.params == params
    trial.report(0.5, step=1)  # pruning is not accounted: report does nothing, should_prune is always False
    assert trial.should_prune() is False and run.misuse == []


def test_a_wider_distribution_is_accepted_and_a_misuse_is_recorded_on_the_run() -> None:
    trial, run = _trial(SPACE.params(0))
    assert trial.suggest_float("lr", 1e-4, 10.0, log=True) == 1e-3  # contains every grid value: agrees
    assert trial.suggest_categorical("opt", ["rmsprop", "adam", "sgd"]) == "sgd"
    with pytest.raises(RunMisuse):
        trial.suggest_float("lr", 1e-3, 1.0, step=0.1)  # 1e-3 is not on that lattice
    with pytest.raises(RunMisuse):
        trial.suggest_int("units", 2, 3)  # the axis holds 1
    assert len(run.misuse) == 2 and run.misuse[0].startswith("run 7: trial.suggest_float('lr', ...)")


def test_stepped_and_legacy_suggestions_match_their_converted_axes() -> None:
    distributions = {"drop": FloatDistribution(0.0, 0.5, step=0.1), "width": IntDistribution(16, 64, step=16)}
    space = SearchSpace.from_optuna(distributions)
    trial, run = _trial(space.params(space.size - 1), space)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # suggest_discrete_uniform is deprecated (Optuna 3.0)
        assert trial.suggest_discrete_uniform("drop", 0.0, 0.5, 0.1) == 0.5
    assert trial.suggest_int("width", 16, 64, step=16) == 64 and run.misuse == []


def _legacy(name: str, *args: object) -> object | None:
    klass = getattr(optuna.distributions, name, None)  # removed in Optuna 6
    if klass is None:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return klass(*args)


@pytest.mark.parametrize(
    ("make", "axis"),
    [
        (lambda: FloatDistribution(1e-4, 1e-1, log=True), LogFloat(1e-4, 1e-1, 16)),
        (lambda: FloatDistribution(0.1, 2.0), Float(0.1, 2.0, 16)),
        (lambda: FloatDistribution(0.0, 0.5, step=0.1), Grid((0.0, 0.1, 0.2, 0.3, 0.4, 0.5))),
        (lambda: FloatDistribution(0.0, 1.0, step=0.3), Grid((0.0, 0.3, 0.6, 0.9))),
        (lambda: IntDistribution(8, 64, step=8), Int(8, 64, 8)),
        (lambda: IntDistribution(16, 256, log=True), Int(16, 256, log=True)),
        (lambda: IntDistribution(0, 10, step=3), Int(0, 9, 3)),
        (lambda: CategoricalDistribution(["sgd", "adam", None]), Choice(("sgd", "adam", None))),
        (lambda: FloatDistribution(3.0, 3.0), Choice((3.0,))),
        (lambda: _legacy("UniformDistribution", 0.0, 1.0), Float(0.0, 1.0, 16)),
        (lambda: _legacy("LogUniformDistribution", 1e-3, 1.0), LogFloat(1e-3, 1.0, 16)),
        (lambda: _legacy("DiscreteUniformDistribution", 0.0, 1.0, 0.25), Grid((0.0, 0.25, 0.5, 0.75, 1.0))),
        (lambda: _legacy("IntUniformDistribution", 1, 9, 2), Int(1, 9, 2)),
        (lambda: _legacy("IntLogUniformDistribution", 1, 8), Int(1, 8, log=True)),
    ],
    ids=["float log", "float", "float step", "float step rounds high", "int step", "int log", "int step rounds high",
         "categorical", "single value", "Uniform", "LogUniform", "DiscreteUniform", "IntUniform", "IntLogUniform"],
)
def test_every_optuna_distribution_converts(make, axis) -> None:
    distribution = make()
    if distribution is None:
        pytest.skip("this Optuna has no legacy distributions")
    assert SearchSpace.from_optuna({"x": distribution}).axes["x"] == axis


def test_an_unknown_distribution_is_refused_naming_the_parameter() -> None:
    class BetaDistribution(optuna.distributions.BaseDistribution):
        def single(self) -> bool:
            return False

        def _contains(self, value: float) -> bool:
            return True

        def to_internal_repr(self, value: float) -> float:
            return value

    with pytest.raises(ValueError, match=r"^distributions\['dropout'\]: unsupported distribution BetaDistribution; "):
        SearchSpace.from_optuna({"lr": DISTRIBUTIONS["lr"], "dropout": BetaDistribution()})


def test_the_wrapped_objective_pickles_and_refuses_bad_arguments() -> None:
    wrapped = OptunaObjective(optuna_objective, SPACE)
    assert pickle.loads(pickle.dumps(wrapped)) == wrapped  # for executor="process"
    with pytest.raises(TypeError, match="objective must be a callable objective"):
        OptunaObjective(42, SPACE)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="space must be a dphypo SearchSpace"):
        OptunaObjective(optuna_objective, DISTRIBUTIONS)  # type: ignore[arg-type]


def test_without_optuna_the_import_names_the_extra() -> None:
    code = ("import sys; sys.modules['optuna'] = None  # as if Optuna were not installed\n"
            "import dphypo.integrations\n"
            "try:\n    import dphypo.integrations.optuna\nexcept ImportError as error:\n    print(error)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == 'dphypo.integrations.optuna needs Optuna: pip install "dphypo[optuna]"'
