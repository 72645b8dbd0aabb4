"""``dphypo tune`` and ``dphypo landscape build`` (one landscape, or a family: one per ``--sigma``).

The typer declarations of both commands; ``tune`` runs in :mod:`dphypo.cli.tune`, ``landscape build`` below:
:func:`landscape_specs` checks every option and output path and builds one
:class:`~dphypo.simulation.builder.BuildSpec` per σ, :func:`build_member` trains one landscape.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from dphypo.cli.common import (
    ClipGridOpt,
    DataDirOpt,
    DatasetOpt,
    FinalMeanOpt,
    JsonOpt,
    LrGridOpt,
    ModelOpt,
    SplitOpt,
    TopKOpt,
    app,
    check_epochs,
    check_pass_size,
    option_names,
    out_console,
    typed_grids,
)
from dphypo.cli.tune import TuneArgs, integer_grid, run_tune

if TYPE_CHECKING:
    from dphypo.simulation.builder import BuildSpec
    from dphypo.simulation.landscapes import Landscape

#: ``dphypo tune --help``.
TUNE_HELP = "Tune learning rate × clipping norm with DP-SGD privately and release the best model with its total ε."
#: ``dphypo landscape --help``: one string per paragraph.
LANDSCAPE_HELP = (
    "Build a landscape (mean/std of validation accuracy over a grid) by real DP-SGD training.\n\n"
    "Several ``--sigma`` build a landscape family (dphypo.simulation.family): every member on the same grid\n"
    "and plan, one after another, one file per σ named by the ``{sigma}`` pattern of ``--out``. Every member's\n"
    "options and output path are checked before the first one is trained."
)
#: Library parameter names -> the ``landscape build`` options that set them (one-line errors name the option).
LANDSCAPE_OPTION_NAMES = {
    "dataset": "--dataset", "dataset_name": "--dataset", "model": "--model", "sigma": "--sigma", "epochs": "--epochs",
    "batch_size": "--batch-size", "seeds": "--seeds", "score_noise": "--score-noise", "lr_grid": "--lr-grid",
    "clip_grid": "--clip-grid", "workers": "--workers", "out": "--out", "engine": "--engine",
    "pass_size": "--pass-size", "batch_size_grid": "--batch-size-grid", "epochs_grid": "--epochs-grid",
}


@app.command("tune", help=TUNE_HELP)
def tune_command(
    dataset: DatasetOpt = "digits",
    data_dir: DataDirOpt = None,
    model: ModelOpt = None,
    lr_grid: LrGridOpt = None,
    clip_grid: ClipGridOpt = None,
    strategy: Annotated[str, typer.Option(
        "--strategy", help="uniform (default) or gp (GP-UCB). Alone, gp selects a single-stage DP-HyPO search; with "
        "a two-stage option (--probes, ...) or --design two-stage it places the probes by GP-UCB (unchanged: "
        "DP-HyPO's softmax projected onto S_{C,c}; --probe-placement gp-ucb is BoTorch's qUCB instead).")
    ] = "uniform",
    runs: Annotated[str, typer.Option("--runs", help="negbin, geometric, logarithmic or poisson.")] = "geometric",
    theta: Annotated[float | None, typer.Option("--theta", help="θ of negbin runs.")] = None,
    gamma: Annotated[float | None, typer.Option("--gamma", help="γ of the TNB family.")] = None,
    mean: Annotated[float | None, typer.Option("--mean", help="E[T] (default 20).")] = None,
    C: Annotated[
        float | None, typer.Option("--C", help="Upper density-ratio bound C ≥ 1 of the gp strategy (default 2).")
    ] = None,
    c: Annotated[
        float | None,
        typer.Option("--c", help="Lower density-ratio bound c ∈ (0, 1] of the gp strategy (default 0.75)."),
    ] = None,
    tau: Annotated[float | None, typer.Option("--tau", help="GP-UCB exploration weight τ of the gp strategy "
                                              "(default 0.1).")] = None,
    beta: Annotated[float | None, typer.Option("--beta", help="Softmax inverse temperature β of the gp strategy "
                                               "(default 1).")] = None,
    epsilon: Annotated[float | None, typer.Option("--epsilon", help="Total ε of the search (default 8).")] = None,
    sigma: Annotated[float | None, typer.Option("--sigma", help="Fixed noise multiplier instead of --epsilon.")] = None,
    delta: Annotated[float, typer.Option("--delta", help="δ of the guarantee.")] = 1e-5,
    epochs: Annotated[int, typer.Option("--epochs", help="Epochs per candidate run.")] = 10,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Expected (Poisson) batch size.")] = 64,
    score_noise_accuracy: Annotated[
        float,
        typer.Option("--score-noise-accuracy", help="Std of the Gaussian noise on each run's validation accuracy "
                     "(0 = public validation data); dphypo.tune's score_noise is the same noise in counts "
                     "(this × n_val)."),
    ] = 0.02,
    score_noise: Annotated[float | None, typer.Option("--score-noise", hidden=True)] = None,
    seed: Annotated[
        int | None,
        typer.Option("--seed", help="Secret seed of the whole search (default: fresh OS entropy). Anyone who knows "
                     "it can recompute T and the noise: never publish it."),
    ] = None,
    max_lost: Annotated[
        int,
        typer.Option("--max-lost", help="Attempts the search (a two-stage search: each stage) may lose to a dead "
                     "worker or process and still release; each is charged in ε up front (default 0: any loss "
                     "stops the search)."),
    ] = 0,
    secure_mode: Annotated[
        bool,
        typer.Option("--secure-mode", help="Opacus secure mode: CSPRNG noise and batches (needs torchcsprng)."),
    ] = False,
    out: Annotated[str, typer.Option("--out", help="Directory for the released model and release.json, written "
                                     "all at once (never over another search's release).")] = "runs/tune",
    show_trials: Annotated[
        bool, typer.Option("--show-trials", help="NOT PRIVATE: also print T and every run (curator/debugging).")
    ] = False,
    as_json: JsonOpt = False,
    tune_fraction: Annotated[
        float | None,
        typer.Option("--tune-fraction", help="Tune on a Poisson subsample of rate q, then train one final model "
                     "(Koskela-Kulkarni 2023); the final run has no released score."),
    ] = None,
    variant: Annotated[
        int, typer.Option("--variant", help="With --tune-fraction: final run on X minus X1 (1) or on X (2).")
    ] = 1,
    journal: Annotated[
        str | None,
        typer.Option("--journal", help="Crash-safe journal (curator only), for every design: seals a new search, or "
                     "resumes this one without redrawing T (or T′). Publish only `dphypo release FILE`."),
    ] = None,
    executor: Annotated[
        str, typer.Option("--executor", help="Where runs execute: sequential, process (local pool) or ray.")
    ] = "sequential",
    workers: Annotated[
        int | None, typer.Option("--workers", help="Parallel runs (process/ray; default: all CPUs or one per GPU).")
    ] = None,
    address: Annotated[
        str | None, typer.Option("--address", help="Ray cluster to join (ray.init(address=...)); default: local.")
    ] = None,
    runs_per_update: Annotated[
        int | None,
        typer.Option("--runs-per-update", help="Candidates drawn from one projected density (default: workers; "
                     "uniform with --engine vectorized: the pass size)."),
    ] = None,
    engine: Annotated[
        str | None, typer.Option("--engine", help="vectorized (default: candidates trained in passes, the same "
                                 "DP-SGD mechanism and streams) or opacus (one Opacus run at a time; the default "
                                 "with --secure-mode).")
    ] = None,
    pass_size: Annotated[
        int | None, typer.Option("--pass-size", help="Candidates per pass of a uniform search (default 32 on a CPU, "
                                 "from free memory on CUDA). A kill -9 mid-pass loses the whole pass: --max-lost "
                                 "must then be ≥ it.")
    ] = None,
    batch_size_grid: Annotated[
        str | None, typer.Option("--batch-size-grid", help="Search the batch size too, e.g. 32,64,128: each "
                                 "candidate runs at its own σ, dominated by one reference run (privacy rule 8).")
    ] = None,
    epochs_grid: Annotated[
        str | None, typer.Option("--epochs-grid", help="Search the epochs too, e.g. 5,10,20 (each candidate at its "
                                 "own σ).")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print every candidate's σ, sampling rate and steps and the reference, "
                           "then stop: nothing is trained or drawn.")
    ] = False,
    design: Annotated[
        str, typer.Option("--design", help="auto (default), two-stage (probes at a cheaper fidelity whose scores are "
                          "released, then one committed run) or single (one private search). auto: a two-stage "
                          "option (--probes, --probe-mode, --probe-epochs, --split, --top-k, --final-mean) selects "
                          "two-stage; an option only a single-stage search takes (--runs/--mean/--gamma/--theta, "
                          "--sigma, --tune-fraction, --batch-size-grid/--epochs-grid) or "
                          "--strategy gp alone selects single-stage; with none, the rule of dphypo.auto_design picks "
                          "for --epsilon (20 released probes at ε ≥ 8; below, 20 with noisier scores where 10 probes' "
                          "scores would starve their training, else 10; a probe selection or single-stage where those "
                          "cannot run) and the release says why.")
    ] = "auto",
    design_from: Annotated[
        str | None, typer.Option("--design-from", help="Run the design a `dphypo plan --json` output picked (or a "
                                 "release.json ran), exactly as written there.")
    ] = None,
    probes: Annotated[
        float | None, typer.Option("--probes", help="Two-stage: released probes (default 20), or E[T] of the probe "
                                   "selection with --probe-mode select.")
    ] = None,
    probe_mode: Annotated[
        str, typer.Option("--probe-mode", help="Two-stage: release (every probe's noisy score released, paid by "
                          "composition) or select (a private selection releasing its best probe).")
    ] = "release",
    probe_epochs: Annotated[
        int | None, typer.Option("--probe-epochs", help="Two-stage: epochs of a probe, ≤ --epochs (default a fifth "
                                 "of --epochs).")
    ] = None,
    split: SplitOpt = 0.5,
    top_k: TopKOpt = 1,
    final_mean: FinalMeanOpt = None,
    probe_placement: Annotated[
        str | None, typer.Option("--probe-placement", help="Two-stage, released probes: uniform (draws from the "
                                 "prior; the default of an explicit --probes design; the automatic design places by "
                                 "gp-log-nei), gp-ucb or gp-log-nei (batches placed by BoTorch's qUCB or "
                                 "qLogNoisyExpectedImprovement on the GP fitted to the released probes; free: "
                                 "post-processing). Replaces --strategy gp.")
    ] = None,
    recommend: Annotated[
        str | None, typer.Option("--recommend", help="Two-stage, released probes: the committed point is the "
                                 "best-probe (the default of an explicit --probes design; the automatic design "
                                 "commits by gp-mean), or the GP's posterior-mean argmax among the probes "
                                 "(gp-mean) or over the grid (gp-mean-grid), or gp-near-best. The release names "
                                 "the rule.")
    ] = None,
    probe_score_noise_accuracy: Annotated[
        float | None, typer.Option("--probe-score-noise-accuracy", help="Two-stage: std of the noise on each "
                                   "probe's released validation accuracy (default: --score-noise-accuracy). "
                                   "Noisier probe scores cost less ε each, so more probes fit.")
    ] = None,
    data_split: Annotated[
        str | None, typer.Option("--data-split", help="How records are split into train / validation / test: "
                                 "per-record (default: an independent secret draw per record, so each run is charged "
                                 "the worse of its training and its score release, Theorem S of "
                                 "docs/proofs/split.md; sizes are the public nominal ones, and a test accuracy on "
                                 "test records drawn from the pool is curator-only) or permutation (a seeded "
                                 "stratified permutation; each run charged the sum of both; the default with "
                                 "--tune-fraction).")
    ] = None,
) -> None:
    """``dphypo tune`` (help: :data:`TUNE_HELP`); runs :func:`dphypo.cli.tune.run_tune`.

    Typer declares one parameter per option; the body only collects them into one
    :class:`~dphypo.cli.tune.TuneArgs`, which :func:`~dphypo.cli.tune.run_tune` builds, runs and renders.
    """
    run_tune(TuneArgs(**locals()))  # every local is a parameter


@app.command("landscape", help=LANDSCAPE_HELP)
def landscape_command(
    action: Annotated[str, typer.Argument(metavar="ACTION", help="build")],
    dataset: DatasetOpt = "digits",
    data_dir: DataDirOpt = None,
    model: ModelOpt = None,
    lr_grid: LrGridOpt = None,
    clip_grid: ClipGridOpt = None,
    sigma: Annotated[
        list[float] | None,
        typer.Option("--sigma", help="DP-SGD noise multiplier of every run, > 0 (default 1). Repeat it to build a "
                     "landscape family: one file per σ on the same grid and plan (--out then holds {sigma})."),
    ] = None,
    epochs: Annotated[int, typer.Option("--epochs", help="Epochs per run, ≥ 1.")] = 10,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Expected batch size, ≥ 1.")] = 64,
    seeds: Annotated[int, typer.Option("--seeds", help="Runs per grid point, ≥ 1.")] = 5,
    score_noise: Annotated[
        float, typer.Option("--score-noise", help="Std of the private score's noise on the validation accuracy, "
                            "folded into std (default 0.02, dphypo tune's --score-noise-accuracy; 0 builds a "
                            "landscape of public scores, which an equal-ε study cannot use).")
    ] = 0.02,
    workers: Annotated[
        int | None, typer.Option("--workers", help="Processes, ≥ 1 (default: all cores; 1: in this process).")
    ] = None,
    out: Annotated[
        str,
        typer.Option("--out", help="Output file, must end in .npz (resumes from <out>.partial.jsonl). {sigma} in it "
                     "becomes each σ in Python's shortest form (1.0, 0.7, 1.2226); required with several --sigma, "
                     "e.g. landscapes/digits_mlp_sigma{sigma}.npz."),
    ] = "",
    force: Annotated[bool, typer.Option("--force", help="Replace an existing --out file.")] = False,
    engine: Annotated[
        str, typer.Option("--engine", help="vectorized (default: K runs per pass, checkpointed per pass) or opacus "
                          "(one Opacus run per job). Same mechanism; results agree up to float round-off.")
    ] = "vectorized",
    pass_size: Annotated[
        int | None, typer.Option("--pass-size", help="Runs per vectorised pass, ≥ 1 (default 32 on a CPU, from free "
                                 "memory on CUDA).")
    ] = None,
    batch_size_grid: Annotated[
        str | None, typer.Option("--batch-size-grid", help="Add a batch-size axis, e.g. 32,64,128: each (batch size, "
                                 "epochs) setting trains at its own σ_i, dominated by the reference run (--batch-size, "
                                 "--epochs, --sigma = σ_ref); stored in the landscape's metadata.")
    ] = None,
    epochs_grid: Annotated[
        str | None, typer.Option("--epochs-grid", help="Add an epochs axis, e.g. 5,10,20 (as --batch-size-grid).")
    ] = None,
) -> None:
    """``dphypo landscape build`` (help: :data:`LANDSCAPE_HELP`).

    Typer declares one parameter per option; the body only collects them into one :class:`LandscapeArgs`, builds
    the specs (every member checked before the first is trained), trains each member and prints where it went.
    """
    if action != "build":
        raise ValueError(f"landscape action must be 'build', got {action!r}")
    if not out:
        raise ValueError("--out is required (e.g. landscapes/digits.npz)")
    args = LandscapeArgs(dataset, data_dir, model, lr_grid, clip_grid, tuple(sigma or (1.0,)), epochs, batch_size,
                         seeds, score_noise, workers, out, force, engine, pass_size, batch_size_grid, epochs_grid)
    with option_names(**LANDSCAPE_OPTION_NAMES):
        members = landscape_specs(args)
        for index, (spec, path) in enumerate(members):  # members one after another, each on every worker
            try:
                landscape = build_member(spec, path, workers=workers, engine=engine, pass_size=pass_size)
            except KeyboardInterrupt:
                typer.echo(build_interrupted_message(spec, path, written=index), err=True)
                raise typer.Exit(code=130) from None
            best = landscape.space.params(landscape.best_index)
            typer.echo(f"wrote {path}: best mean {landscape.best_value:.4f} at {best}")


def build_interrupted_message(spec: BuildSpec, path: str, *, written: int = 0) -> str:
    """What an interrupted ``landscape build`` tells the user (one line): what is saved and how to resume.

    Finished runs are appended to the checkpoint ``<out>.partial.jsonl`` (a vectorised pass when it completes), so
    rerunning the same command trains only the rest; the members written before this one are complete files.

    Args:
        spec: The member being built.
        path: Its output file.
        written: Members of a family this command completed before this one.
    """
    checkpoint = Path(path).with_name(Path(path).name + ".partial.jsonl")
    total = math.prod(spec.shape) * spec.seeds
    try:
        with checkpoint.open() as fh:
            saved = max(0, sum(1 for line in fh if line.strip()) - 1)  # the first line is the spec's header
    except OSError:
        saved = 0
    where = f"{saved} of {total} runs of {path} are saved in {checkpoint}" if saved else f"no run of {path} finished"
    family = f" ({written} member(s) written before it are complete)" if written else ""
    return (f"interrupted: {where}{family}; run the same command again to resume: finished runs are not "
            f"trained again")


@dataclass(frozen=True)
class LandscapeArgs:
    """The options of ``dphypo landscape build`` as typed (``sigmas``: every ``--sigma``, default ``(1.0,)``)."""

    dataset: str
    data_dir: str | None
    model: str | None
    lr_grid: str | None
    clip_grid: str | None
    sigmas: tuple[float, ...]
    epochs: int
    batch_size: int
    seeds: int
    score_noise: float
    workers: int | None
    out: str
    force: bool
    engine: str = "vectorized"
    pass_size: int | None = None
    batch_size_grid: str | None = None
    epochs_grid: str | None = None


def landscape_specs(args: LandscapeArgs) -> list[tuple[BuildSpec, str]]:
    """One build spec and output file per σ, every option, output path and data file checked first.

    Raises:
        ValueError: An invalid option, or an output file that exists without ``--force``.
    """
    from dphypo.simulation.builder import BuildSpec, check_build
    from dphypo.train.models import default_model

    lrs, clips = typed_grids(args.lr_grid, args.clip_grid)
    check_pass_size(args.pass_size)  # capped: a pass is padded to this many model copies
    check_epochs(args.epochs)  # capped: beyond it one run trains for days
    batches = None if args.batch_size_grid is None else integer_grid(args.batch_size_grid, "--batch-size-grid")
    epochs = None if args.epochs_grid is None else integer_grid(args.epochs_grid, "--epochs-grid")
    for value in epochs or ():
        check_epochs(value, "--epochs-grid values")
    specs = [
        BuildSpec(dataset=args.dataset, model=args.model or default_model(args.dataset), lr_grid=lrs,
                  clip_grid=clips, sigma=s, epochs=args.epochs, batch_size=args.batch_size, seeds=args.seeds,
                  score_noise=args.score_noise, data_dir=args.data_dir, batch_size_grid=batches, epochs_grid=epochs)
        for s in args.sigmas
    ]
    outs = _member_paths(args.out, [spec.sigma for spec in specs])
    for spec, path in zip(specs, outs, strict=True):
        check_build(spec, path, workers=args.workers, engine=args.engine, pass_size=args.pass_size)
        if not args.force and Path(path).exists():
            raise ValueError(f"--out {path!r} already exists; pass --force to replace it")
    return list(zip(specs, outs, strict=True))


def build_member(
    spec: BuildSpec, path: str, *, workers: int | None, engine: str = "vectorized", pass_size: int | None = None,
) -> Landscape:
    """Train the landscape of ``spec`` into ``path`` with a progress bar on standard error.

    ``engine`` and ``pass_size``: see :func:`~dphypo.simulation.builder.build_landscape`.
    """
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskID,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from dphypo.simulation.builder import build_landscape

    columns = ("{task.description}", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=out_console(stderr=True)) as bar:
        task = bar.add_task(f"building {path}", total=math.prod(spec.shape) * spec.seeds)

        def advance(done: int, total: int, bar: Progress = bar, task: TaskID = task) -> None:
            bar.update(task, completed=done)

        return build_landscape(spec, path, workers=workers, progress=advance, engine=engine, pass_size=pass_size)


def _member_paths(out: str, sigmas: list[float]) -> list[str]:
    """The output file of every σ: ``out`` with ``{sigma}`` replaced by the σ's shortest repr (one-line errors)."""
    if len(set(sigmas)) != len(sigmas):
        raise ValueError(f"--sigma values must be distinct (one landscape per σ), got {sigmas}")
    if len(sigmas) > 1 and "{sigma}" not in out:
        raise ValueError(f"--out must hold {{sigma}} when several --sigma are given (one file per σ, e.g. "
                         f"landscapes/digits_mlp_sigma{{sigma}}.npz), got {out!r}")
    # str.replace, not str.format: any other brace in the path stays as typed
    return [out.replace("{sigma}", repr(float(s))) for s in sigmas]
