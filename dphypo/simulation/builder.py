"""Build a real landscape: train every grid point ``seeds`` times with DP-SGD and tabulate the score.

Each (grid point, seed) job is one DP-SGD run with the *exact* validation accuracy (no score noise: the landscape
stores the accuracy's seed-to-seed spread, and the score noise a private search adds is folded into ``std``
analytically, see :func:`build_landscape`). Two engines train the jobs (the same mechanism; results agree up to
float round-off): ``"vectorized"`` (default) trains a *pass* of up to K jobs at once with
:class:`~dphypo.train.vectorized.VectorizedDPSGD`, ``"opacus"`` trains one
:class:`~dphypo.train.objective.DPSGDObjective` run per job. Jobs (or passes) run in the project's worker pool
(:class:`~dphypo.search.execution.ProcessExecutor`: one torch thread per worker, and workers that exit with their
parent, even after ``kill -9``) and every finished job (all jobs of a pass at once, when the pass finishes) is
appended to a JSON-lines checkpoint, so an interrupted build resumes where it stopped: a pass killed mid-way is
trained again whole (landscape seeds are public, so nothing is charged). Every option, the output path and the
presence of the data files are checked before the checkpoint is written or any job starts (:func:`check_build`). A
run that diverges (NaN) scores 0.0, the worst accuracy, as the tuner would treat it.

**Privacy axes** (issue #25). A spec with ``batch_size_grid`` and/or ``epochs_grid`` builds an N-D landscape
lr × clip × batch size × epochs. Every (batch size, epochs) setting is its own DP-SGD mechanism and trains at its own
σ_i: the smallest σ whose per-run mechanism (DP-SGD + the score release a private search adds) is dominated by the
*reference* run, DP-SGD at (``batch_size``, ``epochs``) with σ_ref = ``sigma``
(:func:`~dphypo.privacy.heterogeneous.plan_heterogeneous`; Koskela, Redberg & Wang 2024, Sec. 6.2; proof in
docs/proofs/heterogeneous.md). The plan dominates the reference's RDP curve at every order *and* its privacy profile
(``profiles=True``), so one landscape serves a uniform search (accounted with the profile bounds) and an adaptive one
(RDP only) alike; for an adaptive search this is conservative, its σ_i could be smaller. The plan (σ_i, q, steps per
setting) and the reference are stored in the landscape's metadata (:func:`build_plan` recomputes them from the
reference). A candidate that no σ_i ≤ :data:`~dphypo.privacy.heterogeneous.DEFAULT_SIGMA_CAP` dominates, a batch
size above the training set or an axis value of 0 is refused in one line naming the option, before anything is
written or trained.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dphypo._paths import check_output_file
from dphypo.privacy.heterogeneous import (
    CandidateRun,
    DominanceError,
    HeterogeneousPlan,
    ReferenceRun,
    opacus_sample_rate,
    opacus_steps,
    plan_heterogeneous,
)
from dphypo.privacy.validation import check_int_at_least, check_non_negative, check_positive, check_positive_int
from dphypo.simulation.landscapes import Landscape, save_landscape

__all__ = ["ENGINES", "MAX_BUILD_RUNS", "PRIVACY_AXES", "BuildSpec", "build_landscape", "build_plan", "check_build",
           "paper_grid", "reference_run"]

#: The privacy-affecting grids a spec may add, in axis order after lr and clip: spec field → axis name (= role).
PRIVACY_AXES: dict[str, str] = {"batch_size_grid": "batch_size", "epochs_grid": "epochs"}

#: Training engines of a build: one vectorised pass of K jobs (default) or one Opacus run per job.
ENGINES: tuple[str, ...] = ("vectorized", "opacus")

#: Most training runs one landscape build accepts (grid points × seeds).
MAX_BUILD_RUNS = 1_000_000

#: Score recorded for a run that failed because of the data (privacy rule 5: failed runs score worst).
FAILED_SCORE = 0.0


@dataclass(frozen=True)
class BuildSpec:
    """What to build.

    Args:
        dataset: Dataset name (see :data:`dphypo.train.DATASETS`).
        model: Model name (see :func:`dphypo.train.make_model`).
        lr_grid: Learning rates (strictly increasing, log-scaled axis).
        clip_grid: Clipping norms (strictly increasing, linear axis).
        sigma: DP-SGD noise multiplier of every run.
        epochs: Epochs per run.
        batch_size: Expected (Poisson) batch size.
        seeds: Repeats per grid point.
        score_noise: Std (in accuracy units) of the Gaussian noise a private search adds to each score; folded
            into the landscape's ``std`` so simulations see the score a private search would see.
        data_dir: Directory of on-disk datasets (full MNIST, CIFAR-10).
        data_seed: Seed of the train/validation/test split.
        batch_size_grid: Batch sizes to search (integers ≥ 1, strictly increasing, ≥ 2 values; a log-scaled axis
            ``batch_size``), or None. With a privacy grid, ``sigma``, ``batch_size`` and ``epochs`` describe the
            *reference* run every setting's σ_i is calibrated against (module docstring).
        epochs_grid: Epochs to search (same rules; axis ``epochs``), or None.
    """

    dataset: str
    model: str
    lr_grid: tuple[float, ...]
    clip_grid: tuple[float, ...]
    sigma: float
    epochs: int
    batch_size: int
    seeds: int
    score_noise: float = 0.0
    data_dir: str | None = None
    data_seed: int = 0
    batch_size_grid: tuple[int, ...] | None = None
    epochs_grid: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        from dphypo.train.data import DATASETS

        if self.dataset not in DATASETS:
            raise ValueError(f"dataset must be one of {', '.join(DATASETS)}, got {self.dataset!r}")
        check_positive("sigma", self.sigma)
        for name in ("epochs", "batch_size"):
            check_int_at_least(name, getattr(self, name), 1)
            object.__setattr__(self, name, int(getattr(self, name)))  # a numpy integer would not hash to JSON
        for name in ("lr_grid", "clip_grid"):
            values = tuple(float(v) for v in getattr(self, name))
            if len(values) < 2 or any(b <= a for a, b in itertools.pairwise(values)):
                raise ValueError(f"{name} must hold at least 2 strictly increasing values, got {values!r}")
            if not all(math.isfinite(v) and v > 0 for v in values):
                raise ValueError(f"{name} values must be finite and > 0, got {values!r}")
            object.__setattr__(self, name, values)
        for name in PRIVACY_AXES:
            object.__setattr__(self, name, _integer_grid(name, getattr(self, name)))
        check_positive_int("seeds", self.seeds)
        object.__setattr__(self, "seeds", int(self.seeds))
        runs = math.prod(self.shape) * self.seeds
        if runs > MAX_BUILD_RUNS:  # checked before the job list or the score array is allocated
            grid = " x ".join(str(n) for n in self.shape)
            raise ValueError(f"seeds={self.seeds} on a {grid} grid is {runs:,} training runs; a landscape holds at "
                             f"most {MAX_BUILD_RUNS:,}")
        check_non_negative("score_noise", self.score_noise)

    def digest(self) -> str:
        """A hash of everything that determines the results (a checkpoint is only resumed for the same spec).

        An absent privacy grid is left out of the hash, so a 2-D spec keeps the digest it had before privacy grids
        existed (the shipped families' ``spec_digest`` rely on it).
        """
        fields = asdict(self)
        for name in PRIVACY_AXES:
            if fields[name] is None:
                del fields[name]
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]

    @property
    def axes(self) -> dict[str, tuple[float, ...] | tuple[int, ...]]:
        """Axis name → grid values, in axis order: lr, clip, then batch_size and epochs where they are searched."""
        axes: dict[str, tuple[float, ...] | tuple[int, ...]] = {"lr": self.lr_grid, "clip": self.clip_grid}
        for field, name in PRIVACY_AXES.items():
            values = getattr(self, field)
            if values is not None:
                axes[name] = values
        return axes

    @property
    def shape(self) -> tuple[int, ...]:
        """Grid shape, one length per axis of :attr:`axes` (``(len(lr_grid), len(clip_grid))`` for a 2-D spec)."""
        return tuple(len(values) for values in self.axes.values())

    @property
    def has_privacy_axes(self) -> bool:
        """Whether the spec searches batch size or epochs (every setting then has its own σ_i)."""
        return any(getattr(self, field) is not None for field in PRIVACY_AXES)

    def settings(self) -> tuple[tuple[int, int], ...]:
        """Every (batch size, epochs) setting in grid order (batch size outer); ``((batch_size, epochs),)`` in 2-D."""
        batches = self.batch_size_grid or (self.batch_size,)
        epochs = self.epochs_grid or (self.epochs,)
        return tuple(itertools.product(batches, epochs))

    def setting_of(self, indices: tuple[int, ...]) -> tuple[int, int]:
        """The (batch size, epochs) of the grid point with axis indices ``indices`` (one index per axis)."""
        position = dict(zip(self.axes, indices, strict=True))
        batch = self.batch_size if self.batch_size_grid is None else self.batch_size_grid[position["batch_size"]]
        epochs = self.epochs if self.epochs_grid is None else self.epochs_grid[position["epochs"]]
        return batch, epochs


def _integer_grid(name: str, values: Any) -> tuple[int, ...] | None:
    """A privacy grid as a tuple of ints: at least 2 strictly increasing integers ≥ 1 (one line naming ``name``)."""
    if values is None:
        return None
    values = tuple(values)
    for value in values:
        check_int_at_least(f"{name} values", value, 1)
    grid = tuple(int(v) for v in values)  # a numpy integer would not hash to JSON
    if len(grid) < 2 or any(b <= a for a, b in itertools.pairwise(grid)):
        raise ValueError(f"{name} must hold at least 2 strictly increasing values, got {grid!r}")
    return grid


def _checkpoint_path(out: Path) -> Path:
    return out.with_name(out.name + ".partial.jsonl")


def check_build(
    spec: BuildSpec, out: str | os.PathLike[str], *, workers: int | None = None, engine: str = "vectorized",
    pass_size: int | None = None,
) -> Path:
    """Check a build before anything is written or trained; :func:`build_landscape` calls it first.

    Checked: the output path, the workers, the engine (and that it can train the model), the pass size, the model,
    the presence of the data files and, for a spec with privacy grids, every setting's batch size against the
    training set and its σ_i under the reference (:func:`build_plan`; the split sizes are read, nothing is trained).

    Args:
        spec: What to build (its fields are checked when it is created).
        out: Output path; it must end in ``.npz`` and must not be a directory.
        workers: Processes, a positive integer or None.
        engine: One of :data:`ENGINES`.
        pass_size: Jobs per vectorised pass, a positive integer or None (default
            :func:`~dphypo.train.vectorized.default_pass_size`); ``"vectorized"`` only.

    Returns:
        ``out`` as a Path.

    Raises:
        ValueError: Any invalid option, with the parameter's name (a missing dataset: a
            :class:`~dphypo.train.data.DataNotFoundError`; a setting no σ_i under the cap dominates: a
            :class:`~dphypo.privacy.heterogeneous.DominanceError`).
    """
    from dphypo.train.data import check_dataset_files

    if isinstance(out, str) and out.endswith(("/", os.sep)):
        raise ValueError(f"out must be a file name ending in .npz, got the directory path {out!r}")
    out = Path(out)
    if out.suffix != ".npz":
        raise ValueError(f"out must be a file name ending in .npz (the landscape is an npz archive), got {str(out)!r}")
    check_output_file(out, "out", create_parents=True)  # a probe file, not os.access (root passes that anywhere)
    if _checkpoint_path(out).is_dir():
        raise ValueError(f"out: the checkpoint path {str(_checkpoint_path(out))!r} is a directory")
    if workers is not None:
        check_positive_int("workers", workers)
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    check_positive_int("pass_size", pass_size, optional=True)
    if pass_size is not None and engine != "vectorized":
        raise ValueError(f"pass_size is for the vectorized engine only, got pass_size={pass_size!r} with {engine!r}")
    from dphypo.train.models import check_model_for_dataset

    check_model_for_dataset(spec.model, spec.dataset)
    if engine == "vectorized":
        from dphypo.train.vectorized import check_model

        check_model(spec.model)  # one line naming a layer the engine refuses
    check_dataset_files(spec.dataset, spec.data_dir)
    build_plan(spec)  # a privacy grid's refusals (batch above the data, σ_i beyond the cap) before anything is written
    return out


@functools.lru_cache(maxsize=8)
def _split_sizes(spec: BuildSpec) -> tuple[int, int]:
    """(n_train, n_val) of the spec's dataset split (read once per process)."""
    from dphypo.train.data import load_dataset

    splits = load_dataset(spec.dataset, data_dir=spec.data_dir, seed=spec.data_seed)
    return len(splits.y_train), len(splits.y_val)


def reference_run(spec: BuildSpec) -> ReferenceRun:
    """The reference of a spec with privacy grids: DP-SGD at (``batch_size``, ``epochs``), then the score release.

    The score release is the one a private search adds (``score_noise`` accuracy units × n_val, on the count of
    correct validation predictions; none when ``score_noise`` is 0), the same for every setting.

    Raises:
        ValueError: The reference batch size exceeds the training set (naming ``batch_size``).
    """
    n_train, n_val = _split_sizes(spec)
    if spec.batch_size > n_train:
        raise ValueError(f"batch_size must be <= the training set of {spec.dataset} ({n_train} examples), got "
                         f"{spec.batch_size}")
    noise = spec.score_noise * n_val if spec.score_noise > 0 else None
    return ReferenceRun(opacus_sample_rate(n_train, spec.batch_size), opacus_steps(n_train, spec.batch_size,
                                                                                    spec.epochs), noise)


@functools.lru_cache(maxsize=8)
def build_plan(spec: BuildSpec) -> HeterogeneousPlan | None:
    """Every (batch size, epochs) setting's σ_i under the reference at σ_ref = ``spec.sigma``; None in 2-D.

    :func:`~dphypo.privacy.heterogeneous.plan_heterogeneous` with ``profiles=True`` (RDP at every accountant order
    and the privacy profile, both directions), candidates in :meth:`BuildSpec.settings` order. Cached per process:
    a plan with profiles takes seconds to tens of seconds.

    Raises:
        ValueError: A batch size above the training set (naming ``batch_size_grid`` or ``batch_size``).
        DominanceError: A setting no σ_i ≤ the cap dominates (one line naming ``batch_size_grid``,
            ``epochs_grid`` and the setting).
    """
    if not spec.has_privacy_axes:
        return None
    n_train, _ = _split_sizes(spec)
    too_large = [b for b in spec.batch_size_grid or () if b > n_train]
    if too_large:
        raise ValueError(f"batch_size_grid values must be <= the training set of {spec.dataset} ({n_train} "
                         f"examples), got {too_large[0]}")
    reference = reference_run(spec)
    candidates = [CandidateRun.from_batch(n_train, b, e) for b, e in spec.settings()]
    try:
        return plan_heterogeneous(candidates, reference, spec.sigma, profiles=True)
    except DominanceError as err:
        raise DominanceError(f"batch_size_grid or epochs_grid must be narrowed (or sigma lowered; reference "
                             f"batch_size={spec.batch_size}, epochs={spec.epochs}, sigma={spec.sigma:g}): {err}"
                             ) from None


#: A job: one axis index per axis of :attr:`BuildSpec.axes`, then the seed (``(lr, clip, seed)`` in 2-D).
Job = tuple[int, ...]


def _job_item(spec: BuildSpec, job: Job) -> dict[str, Any]:
    """:func:`_job` on one job (the form an executor calls)."""
    return _job(spec, *job)


def _mechanism(spec: BuildSpec, setting: tuple[int, int] | None = None) -> Any:
    """The DP-SGD mechanism of the runs of one (batch size, epochs) setting (exact scores: no score noise).

    ``setting=None``: the spec's own (``batch_size``, ``epochs``) at ``sigma``, every run's mechanism in 2-D. With
    privacy grids a setting trains at its planned σ_i (:func:`build_plan`).
    """
    from dphypo.train.mechanism import DPSGDMechanism

    n_train, n_val = _split_sizes(spec)
    plan = build_plan(spec)
    if setting is None or plan is None:
        return DPSGDMechanism(sigma=spec.sigma, batch_size=spec.batch_size, epochs=spec.epochs, n_train=n_train,
                              score_noise=None, n_val=n_val)
    sigma = plan.sigmas[spec.settings().index(setting)]
    return DPSGDMechanism(sigma=sigma, batch_size=setting[0], epochs=setting[1], n_train=n_train, score_noise=None,
                          n_val=n_val)


def _grid_index(spec: BuildSpec, indices: tuple[int, ...]) -> int:
    """The flat (C-order) grid index of axis indices ``indices``."""
    return int(np.ravel_multi_index(indices, spec.shape))


def _run_seed(spec: BuildSpec, *job: int) -> int:
    """The (public) run seed of a job: the same for both engines, so they train the same streams.

    2-D: ``1000·seed + flat index`` (the shipped builds' seeds); with privacy grids ``seed·grid size + flat index``,
    distinct for every job of the build.
    """
    *indices, seed = job
    flat = _grid_index(spec, tuple(indices))
    return (1000 if not spec.has_privacy_axes else math.prod(spec.shape)) * seed + flat


def _params(spec: BuildSpec, indices: tuple[int, ...]) -> dict[str, float]:
    """The lr and clip of the grid point ``indices`` (the privacy axes select the mechanism, not a parameter)."""
    return {"lr": spec.lr_grid[indices[0]], "clip": spec.clip_grid[indices[1]]}


def _record(spec: BuildSpec, job: Job, score: float, failed: bool, seconds: float) -> dict[str, Any]:
    """The JSON-ready checkpoint record of a finished job: one index per axis name, the seed and the outcome."""
    *indices, seed = job
    return {**dict(zip(spec.axes, indices, strict=True)), "seed": seed, "score": float(score), "failed": failed,
            "seconds": seconds}


def _job(spec: BuildSpec, *job: int) -> dict[str, Any]:
    """One training run of ``job`` (axis indices, then the seed); returns a JSON-ready record (in a worker)."""
    from dphypo.search.records import DataFailure, Run
    from dphypo.train.objective import DPSGDObjective

    indices = tuple(job[:-1])
    mechanism = _mechanism(spec, spec.setting_of(indices))
    objective = DPSGDObjective(spec.dataset, spec.model, mechanism, data_dir=spec.data_dir, data_seed=spec.data_seed)
    grid_index = _grid_index(spec, indices)
    run = Run(number=grid_index, seed=_run_seed(spec, *job), privacy=None, grid_index=grid_index,
              mechanism=mechanism).open()
    start = time.perf_counter()
    try:
        score, _ = objective(_params(spec, indices), run)
        failed = False
    except DataFailure:
        score, failed = FAILED_SCORE, True
    run.check(finished=not failed)
    return _record(spec, tuple(job), score, failed, time.perf_counter() - start)


@functools.lru_cache(maxsize=2)
def _engine(spec: BuildSpec, setting: tuple[int, int] | None = None) -> Any:
    """The vectorised engine of one setting of a build (per worker: data on the device, the model compiled once).

    Passes are grouped by setting (:func:`_passes`), so two cached engines suffice.
    """
    from dphypo.train.data import load_dataset
    from dphypo.train.vectorized import VectorizedDPSGD

    splits = load_dataset(spec.dataset, data_dir=spec.data_dir, seed=spec.data_seed)
    return VectorizedDPSGD(spec.model, _mechanism(spec, setting), splits.x_train, splits.y_train, splits.x_val,
                           splits.y_val, num_classes=splits.num_classes)


def _pass_item(spec: BuildSpec, jobs: list[Job]) -> list[dict[str, Any]]:
    """One vectorised pass over ``jobs`` (axis indices, then the seed; one setting); one JSON-ready record per job.

    Each candidate is the Opacus job's run (same seed, lr, clip, mechanism; :func:`_job`); a failed candidate scores
    :data:`FAILED_SCORE`; every candidate's booked steps are checked against the mechanism (as ``run.check`` does).
    ``seconds`` of a record is the pass's wall time divided by its size.
    """
    from dphypo.train.mechanism import check_budget
    from dphypo.train.vectorized import Candidate

    settings = {spec.setting_of(tuple(job[:-1])) for job in jobs}
    if len(settings) != 1:
        raise ValueError(f"a pass must hold one (batch size, epochs) setting, got {sorted(settings)}")
    engine = _engine(spec, None if not spec.has_privacy_axes else settings.pop())
    candidates = [Candidate(**_params(spec, tuple(job[:-1])), seed=_run_seed(spec, *job)) for job in jobs]
    result = engine.run(candidates)
    n_val = engine.mechanism.n_val
    records = []
    for job, outcome in zip(jobs, result.results, strict=True):
        check_budget(outcome.booked, engine.mechanism)
        score = FAILED_SCORE if outcome.failed else outcome.correct / n_val
        records.append(_record(spec, tuple(job), score, outcome.failed, result.seconds / len(jobs)))
    return records


def _passes(spec: BuildSpec, jobs: list[Job], pass_size: int | None) -> list[list[Job]]:
    """The jobs split into passes of at most ``pass_size``, each within one (batch size, epochs) setting.

    Default: :func:`~dphypo.train.vectorized.default_pass_size` on the device the engine will use (sized for the
    largest batch size of the build).
    """
    if pass_size is None:
        from dphypo.train.models import MODEL_INPUT_SHAPES
        from dphypo.train.vectorized import default_pass_size

        largest = max(spec.settings()) if spec.has_privacy_axes else None
        pass_size = default_pass_size(spec.model, _mechanism(spec, largest), MODEL_INPUT_SHAPES[spec.model])
    passes: list[list[Job]] = []
    for _, group in itertools.groupby(jobs, key=lambda job: spec.setting_of(tuple(job[:-1]))):
        chunk = list(group)
        passes.extend(chunk[i : i + pass_size] for i in range(0, len(chunk), pass_size))
    return passes


def _jobs(spec: BuildSpec) -> list[Job]:
    """Every job of the build, grouped by (batch size, epochs) setting (so a pass holds one mechanism)."""
    points = itertools.product(*(range(n) for n in spec.shape))
    jobs = [(*point, s) for point in points for s in range(spec.seeds)]
    settings = spec.settings()
    return sorted(jobs, key=lambda job: settings.index(spec.setting_of(tuple(job[:-1]))))  # stable: grid order kept


def _key(spec: BuildSpec, rec: dict[str, Any]) -> Job:
    """The job a checkpoint record finished."""
    return (*(int(rec[name]) for name in spec.axes), int(rec["seed"]))


def _read_checkpoint(path: Path, digest: str, engine: str, spec: BuildSpec) -> dict[Job, dict[str, Any]]:
    """Finished jobs of the checkpoint at ``path``.

    A checkpoint without any finished job is discarded (it holds no work), one of a different build or engine
    (a header without one was written by the Opacus builder) with finished jobs is refused.
    """
    done: dict[Job, dict[str, Any]] = {}
    if not path.exists():
        return done
    with path.open() as fh:
        try:
            header = json.loads(fh.readline() or "{}")
        except json.JSONDecodeError:
            header = {}
        for line in fh:
            try:
                rec = json.loads(line)
                key = _key(spec, rec)
            # a line cut by a crash: that job is simply redone
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                continue
            done[key] = rec
    if not isinstance(header, dict) or header.get("digest") != digest:
        if not done:
            path.unlink()
            return done
        found = header.get("digest") if isinstance(header, dict) else None
        raise ValueError(
            f"checkpoint {path} belongs to a different build (spec digest {found!r}, expected {digest!r}) and "
            f"holds {len(done)} finished run(s); rerun with that build's options to resume it, or remove it or "
            "change --out"
        )
    found_engine = header.get("engine", "opacus")
    if done and found_engine != engine:
        raise ValueError(f"checkpoint {path} was trained with --engine {found_engine} ({len(done)} finished run(s)); "
                         f"resume it with --engine {found_engine}, or remove it or change --out")
    return done


def build_landscape(
    spec: BuildSpec,
    out: str | os.PathLike[str],
    *,
    workers: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    engine: str = "vectorized",
    pass_size: int | None = None,
) -> Landscape:
    """Train every grid point ``spec.seeds`` times and write the landscape to ``out`` (.npz).

    ``std`` of the landscape is ``sqrt(seed_std² + score_noise²)``: the spread across training seeds plus the
    independent noise of the private score release, i.e. the spread of the score a private search observes.

    Args:
        spec: What to build.
        out: Output ``.npz`` path; the checkpoint ``<out>.partial.jsonl`` is kept until the build completes.
        workers: Processes (default: all cores; 1 runs the jobs in this process).
        progress: Called with (jobs done, jobs total).
        engine: ``"vectorized"`` (default: passes of up to ``pass_size`` jobs, checkpointed per pass) or
            ``"opacus"`` (one Opacus run per job); a checkpoint resumes only with the engine that wrote it.
        pass_size: Jobs per vectorised pass (default :func:`~dphypo.train.vectorized.default_pass_size`: 32 on a
            CPU, from free memory on CUDA).

    Returns:
        The landscape (also saved to ``out``).

    Raises:
        ValueError: An invalid option, output path or missing data (see :func:`check_build`), raised before
            anything is written.
    """
    from dphypo.search.execution import executor_scope

    out = check_build(spec, out, workers=workers, engine=engine, pass_size=pass_size)
    checkpoint = _checkpoint_path(out)
    digest = spec.digest()
    done = _read_checkpoint(checkpoint, digest, engine, spec)
    jobs = [job for job in _jobs(spec) if job not in done]
    total = math.prod(spec.shape) * spec.seeds
    out.parent.mkdir(parents=True, exist_ok=True)
    if not checkpoint.exists():
        checkpoint.write_text(json.dumps({"digest": digest, "spec": asdict(spec), "engine": engine}) + "\n")
    started = time.time()
    with checkpoint.open("a") as fh:
        def record(rec: dict[str, Any]) -> None:
            done[_key(spec, rec)] = rec
            fh.write(json.dumps(rec) + "\n")
            fh.flush()
            if progress is not None:
                progress(len(done), total)

        # The project's pool (dphypo.search.execution.pool): spawned workers that exit with this process, even
        # after kill -9.
        with executor_scope(None, workers=workers) as executor:
            if engine == "opacus":
                executor.run(functools.partial(_job_item, spec), jobs, on_result=lambda _, rec: record(rec))
            else:  # a pass's records are appended together when it finishes: a pass killed mid-way is redone
                def record_pass(_: int, records: list[dict[str, Any]]) -> None:
                    for rec in records:
                        record(rec)

                executor.run(functools.partial(_pass_item, spec), _passes(spec, jobs, pass_size),
                             on_result=record_pass)
    landscape = _tabulate(spec, done, wall_seconds=time.time() - started, engine=engine)
    save_landscape(landscape, out)
    checkpoint.unlink()
    return landscape


def _tabulate(spec: BuildSpec, done: dict[Job, dict[str, Any]], wall_seconds: float, engine: str) -> Landscape:
    scores = np.full((*spec.shape, spec.seeds), np.nan)
    failed = np.zeros(spec.shape, dtype=int)
    seconds = []
    for job, rec in done.items():
        scores[job] = rec["score"]
        failed[job[:-1]] += bool(rec["failed"])
        seconds.append(rec["seconds"])
    if np.isnan(scores).any():
        raise RuntimeError("landscape build is incomplete; resume it to finish the missing jobs")
    mean = scores.mean(axis=-1)
    seed_std = scores.std(axis=-1, ddof=1) if spec.seeds > 1 else np.zeros(spec.shape)
    std = np.sqrt(seed_std**2 + spec.score_noise**2)
    metadata = {
        "dataset": spec.dataset,
        "model": spec.model,
        "sigma": spec.sigma,
        "epochs": spec.epochs,
        "batch_size": spec.batch_size,
        "seeds": spec.seeds,
        "data_seed": spec.data_seed,
        "score": "validation accuracy (exact), mean over seeds",
        "std_model": "sqrt(seed_std^2 + score_noise^2)",
        "score_noise": spec.score_noise,
        "failed_runs": int(failed.sum()),
        "failed_score": FAILED_SCORE,
        "seconds_per_run_mean": float(np.mean(seconds)),
        "build_wall_seconds_last_session": wall_seconds,
        "built_by": "dphypo.simulation.builder.build_landscape",
        "engine": engine,
        "spec_digest": spec.digest(),
        "seed_std_mean": float(seed_std.mean()),
        **_plan_metadata(spec),
    }
    scales = {"lr": "log", "clip": "linear", "batch_size": "log", "epochs": "log"}
    return Landscape.from_axes(
        mean, std, {name: np.array(values) for name, values in spec.axes.items()},
        {name: scales[name] for name in spec.axes}, direction="maximize", metadata=metadata,
    )


def _plan_metadata(spec: BuildSpec) -> dict[str, Any]:
    """The metadata of a build with privacy grids (nothing in 2-D, so 2-D landscapes are unchanged).

    ``sigma``, ``batch_size`` and ``epochs`` of the landscape's metadata are the reference's (so the per-run
    mechanism :func:`~dphypo.simulation.studies.mechanism_from_metadata` reads is the one the search is accounted
    with); ``privacy_axes`` maps axis names to roles, ``reference`` holds its q and steps, ``settings`` one row per
    setting (batch size, epochs, q, steps: what a family's members share) and ``plan`` the same rows with this
    member's σ_i, in :meth:`BuildSpec.settings` order.
    """
    plan = build_plan(spec)
    if plan is None:
        return {}
    n_train, n_val = _split_sizes(spec)
    rows = [{"batch_size": b, "epochs": e, "sigma": sigma, "sample_rate": c.sample_rate, "steps": c.steps}
            for (b, e), sigma, c in zip(spec.settings(), plan.sigmas, plan.candidates, strict=True)]
    return {
        "n_train": n_train,
        "n_val": n_val,
        "privacy_axes": {name: name for name in spec.axes if name in PRIVACY_AXES.values()},
        "reference": {"batch_size": spec.batch_size, "epochs": spec.epochs,
                      "sample_rate": plan.reference.sample_rate, "steps": plan.reference.steps},
        "settings": [{key: row[key] for key in ("batch_size", "epochs", "sample_rate", "steps")} for row in rows],
        "plan": rows,
        "plan_profiles": plan.profiles,
        "plan_profile_slack": plan.profile_slack,
        "sigma_rule": "each setting's sigma_i is the smallest dominated by the reference at sigma (RDP + profile; "
                      "dphypo.privacy.heterogeneous.plan_heterogeneous)",
    }


def paper_grid() -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The DP-HyPO MNIST grid: 16 learning rates 1e-4..10 (factor 10^{1/3}) × 20 clipping norms 0.3..6."""
    from dphypo.simulation.synthetic import mnist_grid

    axes, _ = mnist_grid()
    return tuple(axes["lr"].tolist()), tuple(axes["clip"].tolist())
