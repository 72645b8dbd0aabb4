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
from dphypo.privacy.validation import check_int_at_least, check_non_negative, check_positive, check_positive_int
from dphypo.simulation.landscapes import Landscape, save_landscape

__all__ = ["ENGINES", "MAX_BUILD_RUNS", "BuildSpec", "build_landscape", "check_build", "paper_grid"]

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
        check_positive_int("seeds", self.seeds)
        object.__setattr__(self, "seeds", int(self.seeds))
        runs = len(self.lr_grid) * len(self.clip_grid) * self.seeds
        if runs > MAX_BUILD_RUNS:  # checked before the job list or the score array is allocated
            raise ValueError(f"seeds={self.seeds} on a {len(self.lr_grid)} x {len(self.clip_grid)} grid is {runs:,} "
                             f"training runs; a landscape holds at most {MAX_BUILD_RUNS:,}")
        check_non_negative("score_noise", self.score_noise)

    def digest(self) -> str:
        """A hash of everything that determines the results (a checkpoint is only resumed for the same spec)."""
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]

    @property
    def shape(self) -> tuple[int, int]:
        """Grid shape ``(len(lr_grid), len(clip_grid))``."""
        return (len(self.lr_grid), len(self.clip_grid))


def _checkpoint_path(out: Path) -> Path:
    return out.with_name(out.name + ".partial.jsonl")


def check_build(
    spec: BuildSpec, out: str | os.PathLike[str], *, workers: int | None = None, engine: str = "vectorized",
    pass_size: int | None = None,
) -> Path:
    """Check a build before anything is written or trained; :func:`build_landscape` calls it first.

    Checked: the output path, the workers, the engine (and that it can train the model), the pass size, the model
    and the presence of the data files (nothing is read).

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
            :class:`~dphypo.train.data.DataNotFoundError`).
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
    return out


def _job_item(spec: BuildSpec, job: tuple[int, int, int]) -> dict[str, Any]:
    """:func:`_job` on one ``(lr index, clip index, seed)`` (the form an executor calls)."""
    return _job(spec, *job)


def _mechanism(spec: BuildSpec) -> Any:
    """The DP-SGD mechanism of every run of the build (exact scores: no score noise)."""
    from dphypo.train.data import load_dataset
    from dphypo.train.mechanism import DPSGDMechanism

    splits = load_dataset(spec.dataset, data_dir=spec.data_dir, seed=spec.data_seed)
    return DPSGDMechanism(sigma=spec.sigma, batch_size=spec.batch_size, epochs=spec.epochs,
                          n_train=len(splits.y_train), score_noise=None, n_val=len(splits.y_val))


def _run_seed(spec: BuildSpec, lr_index: int, clip_index: int, seed: int) -> int:
    """The (public) run seed of a job: the same for both engines, so they train the same streams."""
    return 1000 * seed + lr_index * len(spec.clip_grid) + clip_index


def _job(spec: BuildSpec, lr_index: int, clip_index: int, seed: int) -> dict[str, Any]:
    """One training run; returns a JSON-ready record (runs in a worker process)."""
    from dphypo.search.records import DataFailure, Run
    from dphypo.train.objective import DPSGDObjective

    mechanism = _mechanism(spec)
    objective = DPSGDObjective(spec.dataset, spec.model, mechanism, data_dir=spec.data_dir, data_seed=spec.data_seed)
    params = {"lr": spec.lr_grid[lr_index], "clip": spec.clip_grid[clip_index]}
    grid_index = lr_index * len(spec.clip_grid) + clip_index
    run = Run(number=grid_index, seed=_run_seed(spec, lr_index, clip_index, seed), privacy=None,
              grid_index=grid_index, mechanism=mechanism).open()
    start = time.perf_counter()
    try:
        score, _ = objective(params, run)
        failed = False
    except DataFailure:
        score, failed = FAILED_SCORE, True
    run.check(finished=not failed)
    return {"lr": lr_index, "clip": clip_index, "seed": seed, "score": float(score), "failed": failed,
            "seconds": time.perf_counter() - start}


@functools.lru_cache(maxsize=2)
def _engine(spec: BuildSpec) -> Any:
    """The vectorised engine of a build (one per worker process: data on the device, the model compiled once)."""
    from dphypo.train.data import load_dataset
    from dphypo.train.vectorized import VectorizedDPSGD

    splits = load_dataset(spec.dataset, data_dir=spec.data_dir, seed=spec.data_seed)
    return VectorizedDPSGD(spec.model, _mechanism(spec), splits.x_train, splits.y_train, splits.x_val, splits.y_val,
                           num_classes=splits.num_classes)


def _pass_item(spec: BuildSpec, jobs: list[tuple[int, int, int]]) -> list[dict[str, Any]]:
    """One vectorised pass over ``jobs`` (``(lr index, clip index, seed)``); one JSON-ready record per job.

    Each candidate is the Opacus job's run (same seed, lr, clip; :func:`_job`); a failed candidate scores
    :data:`FAILED_SCORE`; every candidate's booked steps are checked against the mechanism (as ``run.check`` does).
    ``seconds`` of a record is the pass's wall time divided by its size.
    """
    from dphypo.train.mechanism import check_budget
    from dphypo.train.vectorized import Candidate

    engine = _engine(spec)
    candidates = [Candidate(lr=spec.lr_grid[i], clip=spec.clip_grid[j], seed=_run_seed(spec, i, j, s))
                  for i, j, s in jobs]
    result = engine.run(candidates)
    n_val = engine.mechanism.n_val
    records = []
    for (i, j, s), outcome in zip(jobs, result.results, strict=True):
        check_budget(outcome.booked, engine.mechanism)
        score = FAILED_SCORE if outcome.failed else outcome.correct / n_val
        records.append({"lr": i, "clip": j, "seed": s, "score": float(score), "failed": outcome.failed,
                        "seconds": result.seconds / len(jobs)})
    return records


def _passes(
    spec: BuildSpec, jobs: list[tuple[int, int, int]], pass_size: int | None,
) -> list[list[tuple[int, int, int]]]:
    """The jobs split into passes of at most ``pass_size``.

    Default: :func:`~dphypo.train.vectorized.default_pass_size` on the device the engine will use.
    """
    if pass_size is None:
        from dphypo.train.models import MODEL_INPUT_SHAPES
        from dphypo.train.vectorized import default_pass_size

        pass_size = default_pass_size(spec.model, _mechanism(spec), MODEL_INPUT_SHAPES[spec.model])
    return [jobs[i : i + pass_size] for i in range(0, len(jobs), pass_size)]


def _read_checkpoint(path: Path, digest: str, engine: str) -> dict[tuple[int, int, int], dict[str, Any]]:
    """Finished jobs of the checkpoint at ``path``.

    A checkpoint without any finished job is discarded (it holds no work), one of a different build or engine
    (a header without one was written by the Opacus builder) with finished jobs is refused.
    """
    done: dict[tuple[int, int, int], dict[str, Any]] = {}
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
                key = (rec["lr"], rec["clip"], rec["seed"])
            except (json.JSONDecodeError, KeyError, TypeError):  # a line cut by a crash: that job is simply redone
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
    done = _read_checkpoint(checkpoint, digest, engine)
    jobs = [
        (i, j, s) for i in range(len(spec.lr_grid)) for j in range(len(spec.clip_grid)) for s in range(spec.seeds)
        if (i, j, s) not in done
    ]
    total = len(spec.lr_grid) * len(spec.clip_grid) * spec.seeds
    out.parent.mkdir(parents=True, exist_ok=True)
    if not checkpoint.exists():
        checkpoint.write_text(json.dumps({"digest": digest, "spec": asdict(spec), "engine": engine}) + "\n")
    started = time.time()
    with checkpoint.open("a") as fh:
        def record(rec: dict[str, Any]) -> None:
            done[(rec["lr"], rec["clip"], rec["seed"])] = rec
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


def _tabulate(
    spec: BuildSpec, done: dict[tuple[int, int, int], dict[str, Any]], wall_seconds: float, engine: str,
) -> Landscape:
    scores = np.full((*spec.shape, spec.seeds), np.nan)
    failed = np.zeros(spec.shape, dtype=int)
    seconds = []
    for (i, j, s), rec in done.items():
        scores[i, j, s] = rec["score"]
        failed[i, j] += bool(rec["failed"])
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
    }
    return Landscape.from_axes(
        mean, std, {"lr": np.array(spec.lr_grid), "clip": np.array(spec.clip_grid)},
        {"lr": "log", "clip": "linear"}, direction="maximize", metadata=metadata,
    )


def paper_grid() -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The DP-HyPO MNIST grid: 16 learning rates 1e-4..10 (factor 10^{1/3}) × 20 clipping norms 0.3..6."""
    from dphypo.simulation.synthetic import mnist_grid

    axes, _ = mnist_grid()
    return tuple(axes["lr"].tolist()), tuple(axes["clip"].tolist())
