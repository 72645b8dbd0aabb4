"""The arguments ``dphypo.tune`` and ``dphypo.tune_subsampled`` share, and the subsampled split: refused before any
run touches the data."""

from __future__ import annotations

import pytest

from dphypo import DPSGD, GPUCB, LogFloat, SearchSpace, Uniform, tune_subsampled
from dphypo.api.search import DEFAULT_RUNS, checked_search
from dphypo.privacy import geometric
from dphypo.space import Grid

SPACE = SearchSpace({"lr": LogFloat(1e-3, 1.0, 4)})
TRAINING = DPSGD(batch_size=50, epochs=1, n_train=1000, n_val=200, score_noise=5.0)


def test_checked_search_gives_the_strategy_and_the_search_it_is_accounted_with() -> None:
    strategy, search = checked_search(SPACE, TRAINING, "gp", geometric(0.1), epsilon=8.0, sigma=None)
    assert isinstance(strategy, GPUCB) and (search.C, search.c) == (strategy.C, strategy.c)
    assert search.run_count == geometric(0.1)
    strategy, search = checked_search(SPACE, TRAINING, None, None, epsilon=None, sigma=1.0)
    assert isinstance(strategy, Uniform) and search.run_count == DEFAULT_RUNS and not search.adaptive


def test_checked_search_refuses_what_neither_entry_point_can_run() -> None:
    with pytest.raises(TypeError, match=r"training must be a dphypo\.train\.DPSGD"):
        checked_search(SPACE, object(), None, None, epsilon=8.0, sigma=None)  # type: ignore[arg-type]
    for epsilon, sigma in ((8.0, 1.0), (None, None)):
        with pytest.raises(ValueError, match="give exactly one of epsilon"):
            checked_search(SPACE, TRAINING, None, None, epsilon=epsilon, sigma=sigma)
    with pytest.raises(ValueError, match="strategy must be 'gp', 'uniform'"):
        checked_search(SPACE, TRAINING, "bayes", None, epsilon=8.0, sigma=None)
    bad_lr = SearchSpace({"lr": LogFloat(1e-3, 1.0, 4), "clip": Grid([-1.0, 1.0])})
    with pytest.raises(ValueError, match="space axis 'clip'"):
        checked_search(bad_lr, TRAINING, None, None, epsilon=8.0, sigma=None)


class _NeverRun:
    """A subset objective that fails the test if any run is started."""

    optimizer = "sgd"

    def with_subset(self, subset: object) -> _NeverRun:
        return self

    def __call__(self, params: dict, run: object) -> float:
        raise AssertionError("a run was started before the arguments were checked")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"training": DPSGD(batch_size=300, epochs=1, n_train=1000, n_val=200, score_noise=5.0)},
         r"batch_size must be in \[1, round\(q\*n_train\)=250\]"),
        ({"variant": 3}, "variant must be 1 or 2, got 3"),
        ({"fraction": 1.0}, r"tuning_rate must be in \(0, 1\), got 1.0"),
        ({"space": SearchSpace({"clip": LogFloat(0.1, 1.0, 3)})}, "must have an 'lr' axis"),
        ({"objective": lambda params, run: 0.0}, "tune_subsampled needs a SubsetObjective"),
    ],
)
def test_tune_subsampled_refuses_before_any_run(changes: dict, message: str) -> None:
    arguments = {"objective": _NeverRun(), "space": SPACE, "training": TRAINING, "fraction": 0.25, "variant": 1,
                 **changes}
    with pytest.raises((ValueError, TypeError), match=message):
        tune_subsampled(arguments.pop("objective"), arguments.pop("space"), arguments.pop("training"), sigma=1.0,
                        seed=1, **arguments)
