"""``dphypo.tune`` with subsampled tuning (Koskela-Kulkarni 2023) end to end on digits, and the profile-based
calibration of a uniform ``tune`` (per-run PLD = DP-SGD composed with the Gaussian score release)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

import dphypo.train.objective as objective_module
import dphypo.train.passes as passes_module
from dphypo.api import tune, tune_subsampled
from dphypo.privacy import Poisson, RepeatAndSelect, account, calibrate_sigma, geometric
from dphypo.privacy.profiles import GaussianProfile
from dphypo.privacy.run_counts import Binomial
from dphypo.privacy.subsampled import SubsampledScopeError, accounting_orders, subsampled_tuning
from dphypo.space import Grid, SearchSpace
from dphypo.strategies import GPUCB, Uniform
from dphypo.train import DPSGD, DPSGDMechanism, DPSGDObjective, load_dataset
from dphypo.train.data import DataSubset
from tests._private import train_privately

SPLITS = load_dataset("digits")
N_TRAIN, N_VAL = len(SPLITS.y_train), len(SPLITS.y_val)
SPACE = SearchSpace({"lr": Grid([0.3, 1.0, 3.0], scale="log"), "clip": Grid([0.5, 1.0], scale="linear")})
Q, BATCH, SCORE_NOISE = 0.25, 32, 5.0


TRAINING = DPSGD(n_train=N_TRAIN, n_val=N_VAL, batch_size=BATCH, epochs=1, score_noise=SCORE_NOISE)


def _tiny(engine=None, **kw):
    opts = dict(runs=geometric(1 / 3), strategy="uniform", seed=5, fraction=Q)
    opts.update(kw)
    return tune_subsampled(DPSGDObjective("digits", engine=engine), SPACE, TRAINING, **opts)


def _expected_plans(sigma: float, variant: int) -> tuple[DPSGDMechanism, DPSGDMechanism]:
    """The mechanisms the brief's semantics imply, rebuilt by hand from public sizes."""
    m, m_val = round(Q * N_TRAIN), round(Q * N_VAL)
    n_final = N_TRAIN - m if variant == 1 else N_TRAIN
    tuning = DPSGDMechanism(sigma=sigma, batch_size=BATCH, epochs=1, n_train=m, n_val=m_val, score_noise=SCORE_NOISE)
    final = DPSGDMechanism(sigma=sigma, batch_size=round(BATCH * n_final / m), epochs=1, n_train=n_final)
    return tuning, final


@pytest.mark.parametrize("variant", [1, 2])
def test_release_epsilon_is_the_kk_accountant_and_lr_is_transferred(variant: int) -> None:
    result = _tiny(sigma=1.0, variant=variant)
    tuning, final = _expected_plans(1.0, variant)
    search = RepeatAndSelect(geometric(1 / 3))
    orders = accounting_orders()
    expected = subsampled_tuning(tuning.rdp(orders), search, Q, variant, 1e-5, final=final.training_rdp(orders))
    release, info = result.release, result.subsampling
    assert release.epsilon == expected.epsilon and release.privacy.epsilon == expected.epsilon
    assert release.privacy.method == info.method == ("koskela-kulkarni-thm1-variant1" if variant == 1
                                                      else "koskela-kulkarni-zhu-wang-variant2")
    assert release.mechanism == final and info.tuning_mechanism == tuning
    factor = (1 - Q) / Q if variant == 1 else 1 / Q  # KK Sec. 3.2 with nominal sizes
    assert info.transferred_lr == pytest.approx(info.tuned_lr * factor, rel=1e-12)
    assert release.params == {**info.tuned_params, "lr": info.transferred_lr}
    assert info.tuning_set_size == round(Q * N_TRAIN) and info.final_set_size == final.n_train
    assert release.artifact is not None and release.artifact.params == release.params
    # KK's comparison: the same search on all the data with the same per-run mechanism (σ, γ, T and score noise;
    # batch B·n/m) and no final run. KK Thm 1 is always below it; variant 2 for q ≲ 0.5 (notes §4.5).
    baseline = account(tuning.rdp(), search, 1e-5).epsilon
    assert release.epsilon < min(baseline, expected.full_data_epsilon)


@pytest.mark.parametrize("engine", ["opacus", "vectorized"])
def test_tuning_runs_see_only_the_subset_and_the_final_run_its_complement(monkeypatch, engine) -> None:
    seen: list[tuple[str, np.ndarray]] = []
    real_train, real_eval = objective_module._train, objective_module.evaluate_accuracy

    def spy_train(model, optimizer, loader, epochs, device):
        seen.append(("train", loader.dataset.tensors[0].numpy().copy()))
        return real_train(model, optimizer, loader, epochs, device)

    def spy_eval(model, x, y, device, batch_size=1024):
        seen.append(("val", np.array(x)))
        return real_eval(model, x, y, device, batch_size)

    monkeypatch.setattr(objective_module, "_train", spy_train)
    monkeypatch.setattr(objective_module, "evaluate_accuracy", spy_eval)
    if engine == "vectorized":  # the tuning runs' data is what their pass engine holds (issue #22)
        real_engine = passes_module.VectorizedDPSGD

        def spy_engine(model, mechanism, x_train, y_train, x_val, y_val, **kwargs):
            seen.extend([("train", np.array(x_train)), ("val", np.array(x_val))])
            return real_engine(model, mechanism, x_train, y_train, x_val, y_val, **kwargs)

        monkeypatch.setattr(passes_module, "VectorizedDPSGD", spy_engine)
        passes_module.engine_for.cache_clear()
    result = _tiny(sigma=1.0, variant=1, engine=engine)
    runs = result.history.run_count
    # every tuning run (the vectorised engine: one engine for all of them), then the final run
    assert len(seen) == (2 * (runs + 1) if engine == "opacus" else 4) and runs >= 1
    subset_seed = _subset_seed_from(seen[0][1])
    tune_train = SPLITS.x_train[DataSubset(Q, subset_seed, "tune").mask(N_TRAIN)]
    tune_val = SPLITS.x_val[DataSubset(Q, subset_seed, "tune").mask(N_VAL, split="val")]
    rest_train = SPLITS.x_train[DataSubset(Q, subset_seed, "rest").mask(N_TRAIN)]
    for kind, x in seen[:-2]:
        np.testing.assert_array_equal(x, tune_train if kind == "train" else tune_val)
    assert seen[-2][0] == "train"
    np.testing.assert_array_equal(seen[-2][1], rest_train)
    assert abs(len(tune_train) - Q * N_TRAIN) < 5 * math.sqrt(N_TRAIN * Q * (1 - Q))
    assert len(tune_train) + len(rest_train) == N_TRAIN


def _subset_seed_from(x_first_run: np.ndarray) -> int:
    """The subset seed is internal; recover it from the API's derivation and check it reproduces the data."""
    from dphypo.api.subsampled import _SUBSET_TAG

    seed = int(np.random.SeedSequence([5, _SUBSET_TAG]).generate_state(1)[0])
    assert len(x_first_run) == DataSubset(Q, seed, "tune").mask(N_TRAIN).sum()
    return seed


def test_calibrated_subsampled_tune_meets_the_target() -> None:
    result = _tiny(epsilon=8.0, variant=2, strategy=GPUCB(C=2.0, c=0.75))
    assert result.release.epsilon <= 8.0 and result.release.epsilon == pytest.approx(8.0, rel=1e-3)
    assert result.subsampling.report.tuning_theorem.startswith("Theorem B (docs/proofs/adaptive.md")
    assert result.release.privacy.adaptivity_epsilon > 0.0


def _never_called(params, run):  # pragma: no cover - reaching it is the failure
    raise AssertionError("a refused configuration must not train")


_never_called.with_subset = lambda subset: _never_called  # type: ignore[attr-defined]
_never_called.optimizer = "sgd"  # type: ignore[attr-defined]  # a SubsetObjective: with_subset and optimizer


def test_out_of_scope_configurations_are_refused_before_training() -> None:
    common = dict(sigma=1.0, fraction=Q)
    with pytest.raises(SubsampledScopeError, match="binomial T"):
        tune_subsampled(_never_called, SPACE, TRAINING, runs=Binomial(6, 0.5), strategy="uniform", **common)
    with pytest.raises(ValueError, match="Poisson T"):
        tune_subsampled(_never_called, SPACE, TRAINING, runs=Poisson(3.0), strategy="gp", **common)
    with pytest.raises(TypeError, match="with_subset"):
        tune_subsampled(lambda p, r: 0.0, SPACE, TRAINING, runs=geometric(0.5), strategy="uniform", **common)
    with pytest.raises(ValueError, match="variant"):
        tune_subsampled(_never_called, SPACE, TRAINING, runs=geometric(0.5), variant=3, **common)
    with pytest.raises(ValueError, match="batch_size"):
        tune_subsampled(_never_called, SPACE, replace(TRAINING, batch_size=400), runs=geometric(0.5), **common)
    with pytest.raises(ValueError, match="tuning_rate"):
        tune_subsampled(_never_called, SPACE, TRAINING, runs=geometric(0.5), **{**common, "fraction": 1.0})


def test_an_unknown_argument_names_the_search_options() -> None:
    options = "its search options are direction, seed, executor, journal, runs_per_update, progress"
    with pytest.raises(TypeError, match=rf"^tune\(\) got an unexpected keyword argument 'colour' \({options}\)$"):
        tune(_never_called, SPACE, TRAINING, sigma=1.0, colour=1)
    with pytest.raises(TypeError, match=r"^tune_subsampled\(\) got an unexpected keyword argument 'n_train'"):
        tune_subsampled(_never_called, SPACE, TRAINING, sigma=1.0, fraction=Q, n_train=10)
    with pytest.raises(TypeError, match=r"training must be a dphypo\.train\.DPSGD"):
        tune(_never_called, SPACE, DPSGDMechanism(sigma=1.0, batch_size=8, epochs=1, n_train=100), sigma=1.0)
    with pytest.raises(ValueError, match="does not support a journal"):
        tune_subsampled(_never_called, SPACE, TRAINING, sigma=1.0, fraction=Q, journal="j.db")


# -- uniform tune: calibration through the per-run privacy profile --------------------------------------------
def test_plan_profile_composes_training_and_score_like_one_gaussian() -> None:
    # Full-batch DP-SGD (rate 1) for E steps = Gaussian with σ/√E; composed with the score's N(0, z²):
    # one Gaussian with σ_eff = (E/σ² + 1/z²)^(-1/2) (closed form, Balle & Wang 2018, Theorem 8).
    sigma, epochs, z = 3.0, 4, 2.5
    mechanism = DPSGDMechanism(sigma=sigma, batch_size=50, epochs=epochs, n_train=50, n_val=10, score_noise=z)
    assert mechanism.sample_rate == 1.0 and mechanism.steps == epochs
    exact = GaussianProfile((epochs / sigma**2 + 1 / z**2) ** -0.5)
    profile = mechanism.profile(discretization=1e-4)
    eps = np.array([0.25, 0.5, 1.0, 2.0])
    got, want = profile.delta(eps), exact.delta(eps)
    assert np.all(got >= want * (1 - 1e-9))  # pessimistic: an upper bound
    np.testing.assert_allclose(got, want, rtol=2e-2)
    assert profile.epsilon(1e-5) == pytest.approx(exact.epsilon(1e-5), abs=5e-3)
    without_score = DPSGDMechanism(sigma=sigma, batch_size=50, epochs=epochs, n_train=50).profile()
    assert without_score.epsilon(1e-5) < profile.epsilon(1e-5)


def _constant(params, run):
    train_privately(run)
    return run.private_score(180)  # data-independent count: only the accounting is under test


def test_uniform_tune_calibrates_with_the_profile_and_reports_both_methods() -> None:
    training = DPSGD(n_train=N_TRAIN, n_val=N_VAL, batch_size=64, epochs=10, score_noise=20.0)
    kw = dict(runs=geometric(0.1), epsilon=3.0, seed=1)
    uniform = tune(_constant, SPACE, training, strategy=Uniform(), **kw).release
    mechanism = uniform.mechanism

    def rdp_for(s: float):
        return DPSGDMechanism(sigma=s, batch_size=64, epochs=10, n_train=N_TRAIN, n_val=N_VAL, score_noise=20.0).rdp()

    rdp_only = calibrate_sigma(3.0, 1e-5, RepeatAndSelect(geometric(0.1)), rdp_for).sigma
    assert mechanism.sigma <= rdp_only
    methods = uniform.privacy.methods
    assert {"rdp", "rdp-theorem-b", "profile-tnb"} == set(methods)
    # every valid bound is evaluated; here Theorem B at C = c = 1 is the smallest (computed at σ 1.959: 3.000, against
    # 3.337 for the profile bound and 3.885 for Papernot-Steinke Theorem 2)
    assert uniform.epsilon == min(methods.values()) <= 3.0 and uniform.privacy.method == "rdp-theorem-b"
    assert methods["rdp"] > 3.0 and methods["profile-tnb"] > 3.0  # neither alone would meet the target at this σ
    adaptive = tune(_constant, SPACE, training, strategy=GPUCB(C=1.5, c=0.75), **{**kw, "epsilon": 6.0}).release
    assert set(adaptive.privacy.methods) == {"rdp-theorem-b"} and adaptive.epsilon <= 6.0
