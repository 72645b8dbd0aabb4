"""SearchOptions: one validated parameter object, given whole or as keywords, with the same result either way."""

from __future__ import annotations

import dataclasses

import pytest

from dphypo.privacy import PrivacyAccounting, RepeatAndSelect, dpsgd_rdp, geometric
from dphypo.search.options import SearchOptionFields, SearchOptions, resolve_options
from dphypo.search.tuner import Tuner
from dphypo.space import Float, SearchSpace

SPACE = SearchSpace({"x": Float(0.0, 1.0, 5)})
PRIVACY = PrivacyAccounting(RepeatAndSelect(geometric(0.3)), dpsgd_rdp(1.0, 0.01, 100), 1e-5)


def test_the_keyword_type_lists_exactly_the_option_fields() -> None:
    assert set(SearchOptionFields.__annotations__) == {f.name for f in dataclasses.fields(SearchOptions)}


@pytest.mark.parametrize(("field", "value", "message"), [
    ("direction", "max", "direction"),
    ("seed", -1, "seed must be a non-negative integer"),
    ("seed", 1.5, "seed must be a non-negative integer"),
    ("seed", True, "seed must be a non-negative integer"),
    ("runs_per_update", 0, "runs_per_update must be a positive integer"),
    ("runs_per_update", 2.0, "runs_per_update must be a positive integer"),
])
def test_invalid_options_fail_at_construction(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SearchOptions(**{field: value})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message):  # and through an entry point, before any work
        Tuner(lambda p, r: 0.0, SPACE, PRIVACY, **{field: value})  # type: ignore[arg-type]


def test_progress_must_be_callable() -> None:
    with pytest.raises(TypeError, match="progress must be callable"):
        SearchOptions(progress=3)  # type: ignore[arg-type]


def test_keywords_replace_the_fields_of_the_object() -> None:
    base = SearchOptions(direction="minimize", seed=4, runs_per_update=2)
    merged = resolve_options("f", base, {"seed": 9})
    assert merged == SearchOptions(direction="minimize", seed=9, runs_per_update=2)
    assert resolve_options("f", None, {}) == SearchOptions()


def test_an_unknown_keyword_names_the_options() -> None:
    with pytest.raises(TypeError, match=r"^Tuner\(\) got an unexpected keyword argument 'sed' \(its search options "
                                        r"are direction, seed, executor, journal, runs_per_update, progress\)$"):
        Tuner(lambda p, r: 0.0, SPACE, PRIVACY, sed=3)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"options must be a dphypo\.SearchOptions"):
        resolve_options("f", {"seed": 3}, {})  # type: ignore[arg-type]


def test_an_options_object_and_keywords_run_the_same_search() -> None:
    def score(params, run):
        return -abs(params["x"] - 0.7)

    by_keywords = Tuner(score, SPACE, PRIVACY, seed=11, direction="maximize").run()
    by_object = Tuner(score, SPACE, PRIVACY, options=SearchOptions(seed=11)).run()
    assert by_object.release == by_keywords.release
    assert [t.grid_index for t in by_object.history.trials] == [t.grid_index for t in by_keywords.history.trials]
