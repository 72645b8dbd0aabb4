"""Vectorised DP-SGD: train K hyperparameter candidates of one model at once, each exactly as Opacus would.

One pass trains K candidates (each its own learning rate, clipping norm, momentum and secret seed) over stacked
parameters ``(K, *p.shape)``: every layer runs once for all K candidates on a folded batch ``(K * B, ...)``, and
every per-example gradient is computed in closed form from the layer's input and output gradient (Opacus's
per-example rules, with ghost norms for linear layers), so a small model costs a few kernel launches per step for
all K candidates instead of K Python training loops.

**The mechanism is the one the accountant charges.** For each candidate, independently of the others, the engine
runs DP-SGD (Abadi et al. 2016, "Deep Learning with Differential Privacy") exactly as Opacus runs it (Yousefpour
et al. 2021, "Opacus: User-Friendly Differential Privacy Library in PyTorch"; ``DPDataLoader`` with Poisson
sampling and ``DPOptimizer``, Opacus 1.6):

1. ``mechanism.steps`` = ``mechanism.epochs × mechanism.steps_per_epoch`` steps; at each, a Poisson batch: every
training example
   independently with probability ``1 / mechanism.batches_per_epoch`` (Opacus's ``1 / len(data_loader)``), drawn from
   the candidate's own sampling generator, call for call as the ``DPDataLoader`` draws it;
2. each selected example's gradient of its cross-entropy loss, clipped to the candidate's norm C with Opacus's
   factor ``min(1, C / (‖g_i‖ + 1e-6))`` (``DPOptimizer.clip_and_accumulate``), and summed;
3. Gaussian noise N(0, σ²C²) added to every parameter's sum, drawn parameter by parameter in ``parameters()`` order
   from the candidate's own noise generator (``DPOptimizer.add_noise``);
4. division by Opacus's expected batch size ``int(n * mechanism.sample_rate)`` (``PrivacyEngine.make_private``);
5. the candidate's SGD step (its learning rate; momentum as ``torch.optim.SGD``).

That is the Poisson-subsampled Gaussian mechanism at the mechanism's σ and rate, composed ``mechanism.steps`` times,
which :meth:`~dphypo.train.mechanism.DPSGDMechanism.training_rdp` charges (the accountant books the rate
``mechanism.sample_rate`` ≥ the sampling rate, as it does for Opacus). A batch larger than the fixed padded size is
processed in several chunks and never truncated; padded rows hold a public zero example with weight 0.

**Randomness** (privacy rule 6): each candidate's initialisation, Poisson batches and noise come from
``run_stream_seed(seed, INIT_STREAM / SAMPLING_STREAM / NOISE_STREAM)`` of its own secret run seed (explicit
``torch.Generator`` objects; the initialisation through :func:`~dphypo.train.models.make_model`, which forks the
global RNG), exactly as the Opacus path derives them, so a candidate reproduces the Opacus run of the same seed.

**Failures** (privacy rule 5): a candidate whose training loss (on a non-empty batch) or parameters become non-finite
is frozen from that step and marked failed (it must score worst and not be retried); nothing in the other
candidates' computation depends on it.

**Supported models**: ``nn.Sequential`` (nested allowed) of ``Linear``, ``Conv2d``, ``Embedding``, ``GroupNorm``,
``LayerNorm`` and parameter-free per-example layers (activations, pooling, ``Flatten``, ``Dropout(p=0)``); anything
else (BatchNorm, recurrent layers, custom modules, buffers) is refused with a one-line ``ValueError`` naming the
module. Plain SGD (with optional momentum) only; secure mode (CSPRNG) is not available here.

Typical use::

    from dphypo.train import DPSGDMechanism, load_dataset
    from dphypo.train.vectorized import Candidate, VectorizedDPSGD

    splits = load_dataset("digits")
    mechanism = DPSGDMechanism.from_splits(splits, sigma=1.0, batch_size=64, epochs=10)
    engine = VectorizedDPSGD("digits-mlp", mechanism, splits.x_train, splits.y_train, splits.x_val, splits.y_val)
    result = engine.run([Candidate(lr=lr, clip=1.0, seed=run_seed) for lr, run_seed in ...])  # secret run seeds
    for r in result.results:  # r.failed -> score worst; else mechanism.private_score(run, r.correct)
        ...
"""

from __future__ import annotations

from dphypo.train.vectorized.batches import expected_batch_size, physical_batch_size, poisson_rate
from dphypo.train.vectorized.engine import (
    Booked,
    Candidate,
    CandidateResult,
    EngineOptions,
    PassResult,
    VectorizedDPSGD,
    check_model,
    default_pass_size,
)
from dphypo.train.vectorized.layers import compile_model, supported_modules

__all__ = [
    "Booked",
    "Candidate",
    "CandidateResult",
    "EngineOptions",
    "PassResult",
    "VectorizedDPSGD",
    "check_model",
    "compile_model",
    "default_pass_size",
    "expected_batch_size",
    "physical_batch_size",
    "poisson_rate",
    "supported_modules",
]
