"""The vectorised DP-SGD engine against Opacus: clipped sums, noise law, whole trainings, isolation of candidates."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from opacus import GradSampleModule
from opacus.optimizers import DPOptimizer
from scipy import stats
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from dphypo.search.records import DataFailure, Run
from dphypo.train.data import load_dataset
from dphypo.train.mechanism import (
    INIT_STREAM,
    NOISE_STREAM,
    SAMPLING_STREAM,
    BudgetExceeded,
    DPSGDMechanism,
    check_budget,
    run_stream_seed,
)
from dphypo.train.objective import DPSGDObjective, _train
from dphypo.train.opacus import quiet_opacus
from dphypo.train.vectorized import Candidate, EngineOptions, VectorizedDPSGD, compile_model, default_pass_size
from dphypo.train.vectorized import engine as engine_module
from dphypo.train.vectorized.batches import epoch_masks, pack, physical_batch_size

CPU = EngineOptions(device="cpu")
DIGITS = load_dataset("digits")


def _seeded(factory: Callable[[], nn.Module]) -> Callable[[int], nn.Module]:
    """A builder ``seed -> module`` seeded like ``make_model`` (global RNG forked, so untouched)."""

    def build(seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return factory()

    return build


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(16, 12), nn.Tanh(), nn.Linear(12, 3))


def _cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.GroupNorm(2, 4), nn.ReLU(), nn.MaxPool2d(2, 1),
        nn.Sequential(nn.Conv2d(4, 6, 3, stride=2), nn.Tanh()), nn.AvgPool2d(1),
        nn.Flatten(), nn.Linear(6 * 3 * 3, 3),
    )


def _tokens() -> nn.Module:  # an embedding, a per-position linear layer (sequence length 5) and a layer norm
    return nn.Sequential(nn.Embedding(7, 4), nn.Linear(4, 6), nn.LayerNorm(6), nn.ELU(), nn.Flatten(),
                         nn.Linear(30, 3))


def _data(kind: str, n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x: torch.Tensor
    if kind == "mlp":
        x = torch.randn(n, 1, 4, 4, generator=g)
    elif kind == "cnn":
        x = torch.rand(n, 1, 8, 8, generator=g)
        x[: n // 2, :, :4] = 0.0  # constant regions: ties in the max pooling, as on MNIST backgrounds
    else:
        x = torch.randint(0, 7, (n, 5), generator=g)
    return x, torch.randint(0, 3, (n,), generator=g)


MODELS = {"mlp": _mlp, "cnn": _cnn, "tokens": _tokens}


def _mechanism(n: int, batch_size: int, epochs: int = 1, sigma: float = 1.0) -> DPSGDMechanism:
    return DPSGDMechanism(sigma=sigma, batch_size=batch_size, epochs=epochs, n_train=n)


def _engine(kind: str, mechanism: DPSGDMechanism, x: torch.Tensor, y: torch.Tensor, **options: int) -> VectorizedDPSGD:
    return VectorizedDPSGD(_seeded(MODELS[kind]), mechanism, x, y, x[:10], y[:10],
                           options=EngineOptions(device="cpu", **options))


def _opacus_clipped_sums(module: nn.Module, x: torch.Tensor, y: torch.Tensor, clip: float) -> dict[str, torch.Tensor]:
    """Opacus's own clipped sum: GradSampleModule per-example gradients, DPOptimizer.clip_and_accumulate."""
    gsm = GradSampleModule(module)
    optimizer = DPOptimizer(torch.optim.SGD(gsm.parameters(), lr=0.0), noise_multiplier=0.0, max_grad_norm=clip,
                            expected_batch_size=1)
    with quiet_opacus():
        F.cross_entropy(gsm(x), y).backward()
    optimizer.clip_and_accumulate()
    return {name: p.summed_grad.detach().clone() for name, p in module.named_parameters()}


# -- clipped sums: the engine's per-example rules are Opacus's ------------------------------------------------------


@pytest.mark.parametrize("kind", ["mlp", "cnn", "tokens"])
@pytest.mark.parametrize("case", ["batch", "empty", "all_clipped", "chunked"])
def test_clipped_sums_equal_opacus(kind: str, case: str) -> None:
    n = 40
    x, y = _data(kind, n)
    options = {"physical_batch_size": 3} if case == "chunked" else {}
    engine = _engine(kind, _mechanism(n, 8), x, y, **options)
    clip = 1e-4 if case == "all_clipped" else None
    candidates = [Candidate(lr=0.1, clip=clip or c, seed=s) for c, s in [(0.5, 3), (2.0, 4), (50.0, 5)]]
    g = torch.Generator().manual_seed(1)
    masks = torch.rand((3, n), generator=g) < 0.4
    if case == "empty":
        masks[1] = False
    sums = engine.clipped_sums(candidates, masks)
    for k, cand in enumerate(candidates):
        module = _seeded(MODELS[kind])(run_stream_seed(cand.seed, INIT_STREAM))
        expected = _opacus_clipped_sums(module, x[masks[k]], y[masks[k]], cand.clip)
        for name, value in expected.items():
            torch.testing.assert_close(sums[name][k], value, rtol=1e-5, atol=1e-5 * cand.clip)
    if case == "empty":
        assert all(float(s[1].abs().max()) == 0.0 for s in sums.values())
    if case == "all_clipped":  # every example's clipped gradient has norm C: the sum's norm is at most |batch| C
        total = torch.sqrt(sum(s[0].square().sum() for s in sums.values()))
        assert 0 < float(total) <= int(masks[0].sum()) * 1e-4 * (1 + 1e-5)
    if case == "chunked":
        assert int(masks.sum(1).max()) > 3  # the batches really needed several chunks


# -- the noise: N(0, σ²C²) per coordinate, from the candidate's own stream, divided (once) by Opacus's divisor -------


def test_noise_has_the_planned_law_and_comes_from_the_candidates_stream() -> None:
    n, sigma = 64, 2.0
    mechanism = _mechanism(n, batch_size=n, sigma=sigma)  # one batch per epoch: rate 1, every example, a single step
    x, y = _data("mlp", n)
    engine = _engine("mlp", mechanism, x, y)
    assert engine.rate == 1.0 and engine.divisor == n and mechanism.steps == 1
    candidates = [Candidate(lr=1.0, clip=0.5 if k % 2 else 3.0, seed=100 + k) for k in range(16)]
    result = engine.run(candidates)
    sums = engine.clipped_sums(candidates, torch.ones((16, n), dtype=torch.bool))
    z = []
    for k, (cand, res) in enumerate(zip(candidates, result.results, strict=True)):
        init = _seeded(_mlp)(run_stream_seed(cand.seed, INIT_STREAM))
        noise_gen = torch.Generator().manual_seed(run_stream_seed(cand.seed, NOISE_STREAM))
        for name, p0 in init.named_parameters():
            noise = (p0.detach() - res.state_dict[name]) * engine.divisor / cand.lr - sums[name][k]
            opacus_noise = torch.normal(0.0, sigma * cand.clip, size=p0.shape, generator=noise_gen)
            torch.testing.assert_close(noise, opacus_noise, rtol=0, atol=1e-4 * sigma * cand.clip)
            z.append((noise / (sigma * cand.clip)).flatten())
    zs = torch.cat(z).double().numpy()
    # A wrong scale (σ instead of σC: C = 3 or 0.5; or a second division by the batch size) is off by a factor ≥ 2.
    assert abs(zs.mean()) < 4 / math.sqrt(zs.size)
    assert abs(zs.std() - 1.0) < 0.06
    assert stats.kstest(zs, "norm").pvalue > 1e-4


# -- candidates are isolated ------------------------------------------------------------------------------------------


def _result_of_a(engine: VectorizedDPSGD, neighbours: list[Candidate], position: int) -> dict[str, torch.Tensor]:
    a = Candidate(lr=0.3, clip=1.0, seed=11)
    candidates = [*neighbours[:position], a, *neighbours[position:]]
    return engine.run(candidates).results[position].state_dict


def _same(first: dict[str, torch.Tensor], second: dict[str, torch.Tensor], atol: float = 1e-6) -> bool:
    return all(torch.allclose(first[k], second[k], rtol=0, atol=atol) for k in first)


def test_a_candidates_result_does_not_depend_on_its_neighbours(monkeypatch: pytest.MonkeyPatch) -> None:
    n = 60
    x, y = _data("cnn", n)
    engine = _engine("cnn", _mechanism(n, 6, epochs=2), x, y)
    one = [Candidate(lr=0.05, clip=0.1, seed=1), Candidate(lr=2.0, clip=8.0, seed=2)]
    two = [Candidate(lr=1.0, clip=3.0, seed=3), Candidate(lr=0.01, clip=0.5, seed=4, momentum=0.9)]
    base = _result_of_a(engine, one, 0)
    assert _same(base, _result_of_a(engine, two, 1))
    assert _same(base, _result_of_a(engine, two[::-1], 2))

    # Negative control: a pass whose candidates share one noise generator (mixed streams) fails the same check.
    original = engine_module._PassState.__init__

    def shared_noise(self: engine_module._PassState, *args: object) -> None:
        original(self, *args)
        self.noise_generators = [self.noise_generators[0]] * self.k

    monkeypatch.setattr(engine_module._PassState, "__init__", shared_noise)
    assert not _same(_result_of_a(engine, one, 0), _result_of_a(engine, two, 1))


@pytest.mark.parametrize(("kind", "memory"), [("mlp", None), ("cnn", None), ("cnn", 3 * 2**20)])
def test_a_candidate_alone_equals_the_same_candidate_in_a_pass_of_eight(kind: str, memory: int | None) -> None:
    n = 80
    x, y = _data(kind, n)
    engine = _engine(kind, _mechanism(n, 8, epochs=2), x, y, **({"memory_bytes": memory} if memory else {}))
    if memory:  # a small memory budget: the pass runs in blocks of candidates (more than one, fewer than eight)
        assert 1 < len(engine.blocks(8)) < 8
    candidates = [Candidate(lr=0.05 * (k + 1), clip=0.2 * (k + 1), seed=20 + k, momentum=0.5 * (k % 2))
                  for k in range(8)]
    together = engine.run(candidates).results
    for k in (0, 5):
        alone = engine.run([candidates[k]]).results[0]
        assert _same(alone.state_dict, together[k].state_dict, atol=1e-5)
        assert alone.correct == together[k].correct


# -- whole trainings equal Opacus's ---------------------------------------------------------------------------------


def test_a_training_equals_the_dpsgd_objective_run_with_the_same_seed() -> None:
    mechanism = DPSGDMechanism.from_splits(DIGITS, sigma=1.0, batch_size=64, epochs=2)
    objective = DPSGDObjective("digits", "digits-mlp", mechanism, device="cpu")
    engine = VectorizedDPSGD("digits-mlp", mechanism, DIGITS.x_train, DIGITS.y_train, DIGITS.x_val, DIGITS.y_val,
                             options=CPU)
    candidates = [Candidate(lr=0.5, clip=1.0, seed=1234), Candidate(lr=2.0, clip=0.3, seed=99)]
    results = engine.run(candidates).results
    for cand, res in zip(candidates, results, strict=True):
        run = Run(0, cand.seed, None, 0, mechanism).open()
        score, trained = objective({"lr": cand.lr, "clip": cand.clip}, run)
        torch.testing.assert_close(res.state_dict, dict(trained.state_dict), rtol=1e-4, atol=1e-5)
        assert res.correct == round(score * len(DIGITS.y_val))
        assert not res.failed and res.booked.history == ((1.0, mechanism.sample_rate, mechanism.steps),)
        check_budget(res.booked, mechanism)
        assert isinstance(engine.module(res), nn.Sequential)


def _opacus_training(build: Callable[[int], nn.Module], mechanism: DPSGDMechanism, x: torch.Tensor, y: torch.Tensor,
                     cand: Candidate) -> dict[str, torch.Tensor]:
    """The Opacus path of DPSGDObjective (Run.make_private seeds the loader and the noise; objective._train)."""
    run = Run(0, cand.seed, None, 0, mechanism).open()
    model = build(run_stream_seed(cand.seed, INIT_STREAM))
    optimizer = torch.optim.SGD(model.parameters(), lr=cand.lr, momentum=cand.momentum)
    loader = DataLoader(TensorDataset(x, y), batch_size=mechanism.batch_size,
                        generator=torch.Generator().manual_seed(run_stream_seed(cand.seed, SAMPLING_STREAM)))
    wrapped, optimizer, dp_loader = run.make_private(model, optimizer, loader, max_grad_norm=cand.clip)
    _train(wrapped, optimizer, dp_loader, mechanism.epochs, torch.device("cpu"))
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("kind", ["cnn", "tokens"])
def test_a_training_equals_opacus_with_empty_batches_momentum_and_chunks(kind: str) -> None:
    n = 24
    x, y = _data(kind, n)
    mechanism = _mechanism(n, 2, epochs=2)  # rate 1/12: empty Poisson batches are frequent
    candidates = [Candidate(lr=0.2, clip=0.5, seed=41), Candidate(lr=0.02, clip=2.0, seed=42, momentum=0.9)]
    masks = torch.cat(list(epoch_masks([torch.Generator().manual_seed(run_stream_seed(41, SAMPLING_STREAM))],
                                       n, 1 / mechanism.batches_per_epoch, mechanism.steps_per_epoch)))
    assert int((masks.sum(-1) == 0).sum()) > 0  # the first epoch has empty batches
    for options in ({}, {"physical_batch_size": 1}):  # one chunk per step, or one per example
        results = _engine(kind, mechanism, x, y, **options).run(candidates).results
        for cand, res in zip(candidates, results, strict=True):
            expected = _opacus_training(_seeded(MODELS[kind]), mechanism, x, y, cand)
            torch.testing.assert_close(res.state_dict, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("n", "batch_size"),
    [
        (30, 4),  # Opacus divides by int(30 / 8) = 3, not 30 / 8 or round(30 / 8) = 4
        (372, 4),  # 93 batches: the DPDataLoader samples at 1/93 but yields int(1 / (1/93)) = 92 steps, books 1/92
    ],
)
def test_opacus_rate_divisor_and_step_conventions(n: int, batch_size: int) -> None:
    x, y = _data("mlp", n)
    mechanism = _mechanism(n, batch_size)
    engine = _engine("mlp", mechanism, x, y)
    assert engine.divisor == int(n / mechanism.steps_per_epoch) and engine.rate == 1 / mechanism.batches_per_epoch
    cand = Candidate(lr=0.3, clip=1.0, seed=77)
    result = engine.run([cand]).results[0]
    torch.testing.assert_close(result.state_dict, _opacus_training(_seeded(_mlp), mechanism, x, y, cand), rtol=1e-4,
                               atol=1e-5)
    assert result.booked.history == ((1.0, mechanism.sample_rate, mechanism.steps),)


# -- failures -------------------------------------------------------------------------------------------------------


def test_a_diverging_candidate_is_frozen_and_failed_without_touching_the_others() -> None:
    mechanism = DPSGDMechanism.from_splits(DIGITS, sigma=1.0, batch_size=64, epochs=2)
    engine = VectorizedDPSGD("digits-mlp", mechanism, DIGITS.x_train, DIGITS.y_train, DIGITS.x_val, DIGITS.y_val,
                             options=CPU)
    good = [Candidate(lr=0.5, clip=1.0, seed=5), Candidate(lr=1.0, clip=2.0, seed=6)]
    bad = Candidate(lr=1e12, clip=1e30, seed=7)  # its first noisy update overflows: the Opacus path raises DataFailure
    with pytest.raises(DataFailure, match="noisy update of step 0 "):
        DPSGDObjective("digits", "digits-mlp", mechanism, device="cpu")({"lr": bad.lr, "clip": bad.clip},
                                                                   Run(0, bad.seed, None, 0, mechanism).open())
    with_bad = engine.run([good[0], bad, good[1]]).results
    replaced = engine.run([good[0], Candidate(lr=0.1, clip=1.0, seed=8), good[1]]).results
    without = engine.run(good).results
    assert with_bad[1].failed and with_bad[1].correct == 0
    # Decided from the DP output: the noisy update of step 0 made its parameters non-finite; that step used the data
    # and is booked (as the Opacus accountant, whose run raised DataFailure after step 0's optimizer step).
    assert with_bad[1].failure is not None
    assert with_bad[1].failure.startswith("non-finite model parameters after the noisy update of step 0 ")
    assert with_bad[1].booked.history == ((1.0, mechanism.sample_rate, 1),)
    for i, j in ((0, 0), (2, 1)):
        assert not with_bad[i].failed
        assert _same(with_bad[i].state_dict, replaced[i].state_dict)  # same K: bit-for-bit
        assert _same(with_bad[i].state_dict, without[j].state_dict, atol=1e-5)
        assert with_bad[i].correct == without[j].correct


def _poisoned(kind: str, n: int, value: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Data whose record 3 has a non-finite per-example gradient (a NaN pixel, or one so large the loss overflows)."""
    x, y = _data(kind, n)
    x[3] = value
    return x, y


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
@pytest.mark.parametrize("value", [math.nan, 3e38], ids=["nan", "overflow"])
def test_a_record_with_a_non_finite_gradient_contributes_zero_before_clipping(kind: str, value: float) -> None:
    """Privacy rule 5: one record cannot turn a run's failure on; its clipped term is 0 (norm ≤ C, ε unchanged)."""
    n = 12
    x, y = _poisoned(kind, n, value)
    engine = _engine(kind, _mechanism(n, 4), x, y)
    candidates = [Candidate(lr=0.1, clip=1.0, seed=1), Candidate(lr=0.5, clip=0.3, seed=2)]
    masks = torch.ones(2, n, dtype=torch.bool)
    masks[1, ::2] = False
    masks[1, 3] = True
    with_record = engine.clipped_sums(candidates, masks)
    masks[:, 3] = False
    without = engine.clipped_sums(candidates, masks)
    torch.testing.assert_close(with_record, without, rtol=1e-6, atol=1e-7)
    # Whole trainings on both engines: nothing fails (the Opacus path raised DataFailure, the engine failed it).
    mechanism = _mechanism(n, 2, epochs=3)  # rate 1/6: record 3 is sampled in some steps
    results = _engine(kind, mechanism, x, y).run(candidates).results
    for cand, res in zip(candidates, results, strict=True):
        assert not res.failed and res.failure is None
        assert all(torch.isfinite(t).all() for t in res.state_dict.values())
        expected = _opacus_training(_seeded(MODELS[kind]), mechanism, x, y, cand)
        assert all(torch.isfinite(t).all() for t in expected.values())
        if math.isnan(value):  # both drop the record. An overflowing one may have a finite per-example gradient in
            # one representation (Opacus materialises g aᵀ) and a non-finite ghost norm ‖g‖²‖a‖² in the other: both
            # clip it to norm ≤ C or drop it, so both are private, but they need not agree
            torch.testing.assert_close(res.state_dict, expected, rtol=1e-4, atol=1e-5)


def test_booked_steps_are_checked_like_an_opacus_accountant() -> None:
    mechanism = _mechanism(40, 8)
    check_budget(engine_module.Booked(((1.0, mechanism.sample_rate, mechanism.steps),)), mechanism)
    with pytest.raises(BudgetExceeded):
        check_budget(engine_module.Booked(((1.0, mechanism.sample_rate, mechanism.steps + 1),)), mechanism)


# -- what is refused --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "named"),
    [
        (nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(144, 3)), "'1' (BatchNorm2d)"),
        (nn.Sequential(OrderedDict(body=nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)))), "'body.1' (BatchNorm1d)"),
        (nn.Sequential(nn.LSTM(4, 4)), "'0' (LSTM)"),
        (nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)), "'1' (Dropout)"),
        (nn.Sequential(nn.Flatten(0), nn.Linear(4, 4)), "'0' (Flatten)"),
        (nn.Sequential(nn.Embedding(5, 4, padding_idx=0)), "'0' (Embedding)"),
        (nn.Sequential(nn.PReLU()), "'0' (PReLU)"),
    ],
)
def test_unsupported_modules_are_refused_in_one_line(model: nn.Module, named: str) -> None:
    with pytest.raises(ValueError, match="module") as info:
        compile_model(model, torch.device("cpu"))
    message = str(info.value)
    assert named in message and "\n" not in message


def test_the_engine_refuses_batchnorm_before_touching_data() -> None:
    mechanism = _mechanism(40, 8)
    x, y = _data("mlp", 40)
    with pytest.raises(ValueError, match=r"'1' \(BatchNorm1d\)"):
        VectorizedDPSGD(_seeded(lambda: nn.Sequential(nn.Flatten(), nn.BatchNorm1d(16))), mechanism, x, y, x, y,
                        options=CPU)
    with pytest.raises(ValueError, match="secure"):
        VectorizedDPSGD(_seeded(_mlp), DPSGDMechanism(sigma=1.0, batch_size=8, epochs=1, n_train=40, secure_mode=True),
                        x, y, x, y, options=CPU)


# -- public quantities and secret streams ---------------------------------------------------------------------------


def test_the_padded_batch_is_a_function_of_public_quantities_and_never_truncates() -> None:
    mechanism = _mechanism(200, 10)
    x, y = _data("mlp", 200, seed=1)
    x2, y2 = _data("mlp", 200, seed=2)
    a, b = _engine("mlp", mechanism, x, y), _engine("mlp", mechanism, x2 * 100, y2)
    assert [a.physical_batch_size(k) for k in (1, 8, 32)] == [b.physical_batch_size(k) for k in (1, 8, 32)]
    assert physical_batch_size(200, 0.05, 4, example_bytes=1000, memory_bytes=10**9) >= 1
    masks = torch.zeros((1, 3, 200), dtype=torch.bool)
    masks[0, 1, :150] = True
    index, valid, chunks = pack(masks, rows=16, pad_index=200)
    assert chunks == [math.ceil(150 / 16)] and int(valid.sum()) == 150
    assert sorted(index[0, 1][valid[0, 1]].tolist()) == list(range(150))
    assert bool((index[~valid] == 200).all())


def test_every_generator_is_seeded_from_a_candidate_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    seeds: list[tuple[str, int]] = []
    real_manual_seed = torch.manual_seed

    class RecordingGenerator(torch.Generator):
        def manual_seed(self, seed: int) -> torch.Generator:
            seeds.append(("sampling or noise", int(seed)))
            return super().manual_seed(seed)

    def manual_seed(seed: int) -> torch.Generator:
        seeds.append(("init", int(seed)))
        return real_manual_seed(seed)

    mechanism = _mechanism(30, 5)
    x, y = _data("mlp", 30)
    candidates = [Candidate(lr=0.1, clip=1.0, seed=s) for s in (123, 456)]
    monkeypatch.setattr(torch, "Generator", RecordingGenerator)
    monkeypatch.setattr(torch, "manual_seed", manual_seed)
    VectorizedDPSGD(_seeded(_mlp), mechanism, x, y, x, y, options=CPU).run(candidates)
    allowed = {("sampling or noise", run_stream_seed(c.seed, stream)) for c in candidates
               for stream in (SAMPLING_STREAM, NOISE_STREAM)}
    allowed |= {("init", run_stream_seed(c.seed, INIT_STREAM)) for c in candidates}
    template = [s for s in seeds if s not in allowed]  # the meta-device template's seed: fresh entropy, no values
    assert len(template) == 1 and template[0][0] == "init"
    assert {s for s in seeds if s in allowed} == allowed


def test_the_default_pass_size_is_32_on_cpu_and_overridable() -> None:
    mechanism = DPSGDMechanism.from_splits(DIGITS, sigma=1.0, batch_size=64, epochs=1)
    assert default_pass_size("digits-mlp", mechanism, (1, 8, 8), device="cpu") == 32
    assert default_pass_size("digits-mlp", mechanism, (1, 8, 8), device="cpu", max_size=8) == 8


def test_candidates_and_options_are_validated() -> None:
    for bad in ({"lr": 0.0, "clip": 1.0, "seed": 1}, {"lr": 1.0, "clip": math.inf, "seed": 1},
                {"lr": 1.0, "clip": 1.0, "seed": -1}, {"lr": 1.0, "clip": 1.0, "seed": 1, "momentum": 1.0}):
        with pytest.raises(ValueError):
            Candidate(**bad)
    with pytest.raises(ValueError):
        EngineOptions(physical_batch_size=0)
    mechanism = _mechanism(30, 5)
    x, y = _data("mlp", 30)
    with pytest.raises(ValueError, match="n_train"):
        _engine("mlp", mechanism, x[:20], y[:20])
    assert np.isfinite(_engine("mlp", mechanism, x, y).example_bytes)


# -- CUDA -------------------------------------------------------------------------------------------------------------

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@needs_cuda
def test_cuda_alone_equals_in_a_pass_and_matches_the_cuda_opacus_run() -> None:
    mechanism = DPSGDMechanism.from_splits(DIGITS, sigma=1.0, batch_size=64, epochs=2)
    engine = VectorizedDPSGD("digits-mlp", mechanism, DIGITS.x_train, DIGITS.y_train, DIGITS.x_val, DIGITS.y_val,
                             options=EngineOptions(device="cuda"))
    candidates = [Candidate(lr=0.5 + 0.1 * k, clip=1.0, seed=300 + k) for k in range(4)]
    together = engine.run(candidates).results
    alone = engine.run(candidates[:1]).results[0]
    assert _same(alone.state_dict, together[0].state_dict, atol=1e-5)
    objective = DPSGDObjective("digits", "digits-mlp", mechanism, device="cuda")
    _, trained = objective({"lr": candidates[0].lr, "clip": 1.0}, Run(0, candidates[0].seed, None, 0, mechanism).open())
    torch.testing.assert_close(alone.state_dict, dict(trained.state_dict), rtol=1e-4, atol=1e-4)


@needs_cuda
def test_cuda_chunking_and_failures() -> None:
    n = 60
    x, y = _data("cnn", n)
    mechanism = _mechanism(n, 6, epochs=2)
    candidates = [Candidate(lr=0.2, clip=0.5, seed=1), Candidate(lr=1e12, clip=1e30, seed=2)]
    a = VectorizedDPSGD(_seeded(_cnn), mechanism, x, y, x, y, options=EngineOptions(device="cuda")).run(candidates)
    b = VectorizedDPSGD(_seeded(_cnn), mechanism, x, y, x, y,
                        options=EngineOptions(device="cuda", physical_batch_size=2)).run(candidates)
    assert a.results[1].failed and b.results[1].failed and not a.results[0].failed
    assert _same(a.results[0].state_dict, b.results[0].state_dict, atol=1e-5)


@pytest.mark.parametrize("kind", [*MODELS, "digits-mlp", "digits-cnn", "mnist-cnn"])
def test_the_memory_estimate_is_the_same_on_a_cpu_example_and_on_the_meta_device(kind: str) -> None:
    from dphypo.train.models import MODEL_INPUT_SHAPES, make_model

    if kind in MODELS:
        model, (x, _) = _seeded(MODELS[kind])(0), _data(kind, 2)
        shape, dtype = tuple(x.shape[1:]), x.dtype
    else:
        model, shape, dtype = make_model(kind), MODEL_INPUT_SHAPES[kind], torch.float32
    compiled = compile_model(model, torch.device("cpu"))
    on_meta = engine_module.example_bytes(compiled, shape, dtype, device="meta")
    assert engine_module.example_bytes(compiled, shape, dtype, device="cpu") == on_meta > 0
    assert engine_module.example_bytes(compiled, shape, dtype) == on_meta  # the default device for small models
