"""``dphypo tune``: the main job — a private lr × clip search on a dataset, printing only the release.

The command runs in four steps: :func:`build_request` checks every option and output path, then loads the data and
builds the objects of the search (:class:`TuneRequest`); :func:`run_search` runs it through :func:`dphypo.tune` or
:func:`dphypo.tune_subsampled` with one :class:`~dphypo.search.options.SearchOptions` (:func:`search_options`);
:func:`save_release` writes the released model, ``release.json`` and the journal's extras; :func:`render_release`
prints the release (a table, or one JSON object).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from dphypo._paths import check_output_dir, check_output_file
from dphypo.cli.common import (
    DATA_SPLITS,
    DEFAULT_C,
    DEFAULT_LOWER_C,
    _report_table,
    check_epochs,
    check_pass_size,
    make_strategy,
    option_names,
    out_console,
    typed_grids,
)
from dphypo.privacy.validation import check_non_negative, check_non_negative_int, check_positive, check_positive_int

if TYPE_CHECKING:
    from dphypo.api import SubsampledTuning, TwoStageSearchResult
    from dphypo.api.design import Design
    from dphypo.privacy import RunCountDistribution
    from dphypo.privacy.two_stage import TwoStage
    from dphypo.search.execution import Executor
    from dphypo.search.options import SearchOptions
    from dphypo.search.tuner import Release, SearchHistory, SearchResult
    from dphypo.space import SearchSpace
    from dphypo.strategies import Strategy
    from dphypo.strategies.gp.placement import ProbePlacement
    from dphypo.train import DPSGD, DPSGDObjective, Splits
    from dphypo.train.data import PerRecordSplit
    from dphypo.train.mechanism import DPSGDMechanism

#: Total ε of the default search.
DEFAULT_EPSILON = 8.0
#: GP-UCB exploration weight and softmax inverse temperature of ``--strategy gp`` (DP-HyPO §5's τ = 0.1, β = 1).
DEFAULT_TAU, DEFAULT_BETA = 0.1, 1.0
#: Default E[T] when no run-count parameter is given.
DEFAULT_MEAN_RUNS = 20.0
#: ``--design``: chosen from the options (``auto``), one private search, or probes then one committed run.
DESIGNS = ("auto", "single", "two-stage")
#: Released probes of the default two-stage design (:data:`dphypo.api.DEFAULT_TWO_STAGE`).
DEFAULT_PROBES = 20
#: ``--probe-placement``: today's uniform draws (the default), or a BoTorch acquisition on the released probes' GP.
PROBE_PLACEMENTS = ("uniform", "gp-ucb", "gp-log-nei")


@dataclass(frozen=True)
class TuneArgs:
    """The options of ``dphypo tune`` as typed (fields: the command's parameter names; checked by the build)."""

    dataset: str
    data_dir: str | None
    model: str | None
    lr_grid: str | None
    clip_grid: str | None
    strategy: str
    runs: str
    theta: float | None
    gamma: float | None
    mean: float | None
    C: float | None
    c: float | None
    tau: float | None
    beta: float | None
    epsilon: float | None
    sigma: float | None
    delta: float
    epochs: int
    batch_size: int
    score_noise_accuracy: float
    score_noise: float | None
    seed: int | None
    max_lost: int
    secure_mode: bool
    out: str
    show_trials: bool
    as_json: bool
    tune_fraction: float | None
    variant: int
    journal: str | None
    executor: str
    workers: int | None
    address: str | None
    runs_per_update: int | None
    engine: str | None = None
    pass_size: int | None = None
    batch_size_grid: str | None = None
    epochs_grid: str | None = None
    dry_run: bool = False
    design: str = "auto"
    design_from: str | None = None
    probes: float | None = None
    probe_mode: str = "release"
    probe_epochs: int | None = None
    split: float = 0.5
    top_k: int = 1
    final_mean: float | None = None
    probe_placement: str | None = None
    recommend: str | None = None
    probe_score_noise_accuracy: float | None = None
    data_split: str | None = None


@dataclass(frozen=True)
class TuneRequest:
    """What ``dphypo tune`` searches, built from its options (the data loaded, every default filled in).

    Attributes:
        args: The options as typed.
        epsilon: Total ε to calibrate σ for (``--epsilon``, default :data:`DEFAULT_EPSILON` without ``--sigma``).
        runs: The law of T.
        space: The lr × clip grid.
        splits: The dataset's splits (the public test split scores the released model); ``None`` for a dry run,
            which reads no data.
        model: The model's name.
        training: How every run trains (DP-SGD; the score noise in counts).
        strategy: The search strategy.
        tau: GP-UCB exploration weight of ``--strategy gp``.
        beta: Softmax inverse temperature of ``--strategy gp``.
        objective: One DP-SGD training run per candidate.
        two_stage: The two-stage design (``--design``), ``None`` for a single-stage search.
        probe_epochs: Epochs of a two-stage search's probes.
        design: The search design as one value (:mod:`dphypo.api.design`), what :func:`dphypo.tune` runs.
        design_reason: Why this design (``--design auto``'s rule, ``--design-from``, or the options given).
    """

    args: TuneArgs
    epsilon: float | None
    runs: RunCountDistribution
    space: SearchSpace
    splits: Splits | None
    model: str
    training: DPSGD
    strategy: Strategy
    tau: float
    beta: float
    objective: DPSGDObjective
    two_stage: TwoStage | None = None
    probe_epochs: int | None = None
    design: Design | None = None
    design_reason: str = ""


@dataclass(frozen=True)
class SavedModel:
    """Where the released model was saved (all ``None`` when nothing was released: T = 0).

    Attributes:
        path: The model file, where it will be once the release is published in ``--out``.
        sha256: Its fingerprint.
        test_accuracy: Its accuracy on the dataset's test split (public data, not covered by ε); ``None`` when the
            test split is drawn from the protected pool (``--data-split per-record`` with a test share).
        curator_test_accuracy: That exact accuracy when the test split is protected: curator-only, never in the
            release (docs/proofs/split.md §6.2, assumption (T)).
        staging: The temporary folder beside ``--out`` the model was written to; :func:`record_release` adds
            ``release.json`` and moves the folder into place in one step (:mod:`dphypo.cli.outdir`).
    """

    path: Path | None = None
    sha256: str | None = None
    test_accuracy: float | None = None
    staging: Path | None = None
    curator_test_accuracy: float | None = None


class _SearchArguments(TypedDict):
    """Keyword arguments :func:`dphypo.tune` and :func:`dphypo.tune_subsampled` share."""

    epsilon: float | None
    sigma: float | None
    delta: float
    runs: RunCountDistribution
    strategy: Strategy
    max_lost: int
    options: SearchOptions


#: Library parameter names in error messages → the ``dphypo tune`` option that sets them.
TUNE_OPTION_NAMES = {
    "name": "--dataset", "dataset_name": "--dataset", "dataset": "--dataset", "data_dir": "--data-dir",
    "model": "--model", "tuning_rate": "--tune-fraction", "fraction": "--tune-fraction", "variant": "--variant",
    "runs": "--runs", "theta": "--theta", "gamma": "--gamma", "mean": "--mean", "C": "--C", "c": "--c",
    "tau": "--tau", "beta": "--beta", "epsilon": "--epsilon", "target_epsilon": "--epsilon", "sigma": "--sigma",
    "delta": "--delta", "epochs": "--epochs", "batch_size": "--batch-size", "max_lost": "--max-lost",
    "seed": "--seed", "executor": "--executor", "workers": "--workers", "address": "--address",
    "runs_per_update": "--runs-per-update", "journal": "--journal", "out": "--out", "engine": "--engine",
    "pass_size": "--pass-size", "split": "--data-split", "data_split": "--data-split",
}
#: Run-count families ``dphypo tune`` draws T from (binomial T is for ``account``/``calibrate``).
TUNE_RUNS = ("negbin", "geometric", "logarithmic", "poisson")


def run_tune(args: TuneArgs) -> None:
    """Implementation of ``dphypo tune``: build, run, save, render; errors name tune's options."""
    with option_names(**TUNE_OPTION_NAMES):
        request = build_request(args)
        if args.dry_run:
            render_dry_run(request)
            return
        result, seconds = run_search(request)
        saved = save_model(request, result.release)
        payload = release_payload(request, result, saved, seconds)
        record_release(args, payload, saved)
        render_release(request, result, saved, payload)


def build_request(args: TuneArgs) -> TuneRequest:
    """Check every option and output path (before any data is read), then load the data and build the search.

    Raises:
        ValueError: An invalid option or an unusable path, named by its option.
    """
    from dphypo.api.design import Subsampled
    from dphypo.privacy import make_run_count
    from dphypo.train import DPSGD, DPSGDObjective, default_model, load_dataset
    from dphypo.train.data import load_dataset_per_record, per_record_split_sizes, split_sizes

    C, c = _check_options_and_paths(args)  # before any data is touched or any noise calibrated
    loaded = load_design(args)
    two_stage = resolve_design(args, C, c) if loaded is None else None
    probe_epochs = None if two_stage is None else _probe_epochs(args)
    _warn_if_seeded(args.seed)
    runs = make_run_count(args.runs, theta=args.theta, gamma=args.gamma, mean=_mean_runs(args))
    check_non_negative("--score-noise-accuracy", args.score_noise_accuracy)
    lrs, clips = typed_grids(args.lr_grid, args.clip_grid)
    space = tune_space(lrs, clips, args.batch_size_grid, args.epochs_grid)

    # a dry run reads no data: the split sizes follow from the datasets' public class counts
    per_record = per_record_split(args, subsampled=isinstance(loaded, Subsampled))
    if per_record is not None:  # nominal sizes from the published pool size (docs/proofs/split.md §5)
        splits = None if args.dry_run else load_dataset_per_record(args.dataset, per_record, data_dir=args.data_dir)
        n_train, n_val = per_record_split_sizes(args.dataset, per_record)
    else:
        splits = None if args.dry_run else load_dataset(args.dataset, data_dir=args.data_dir)
        n_train, n_val = split_sizes(args.dataset) if splits is None else (len(splits.y_train), len(splits.y_val))
    model = args.model or default_model(args.dataset)
    noise = args.score_noise_accuracy
    count_noise = noise * n_val if noise > 0 else None  # the mechanism's unit: counts (sensitivity 1)
    training = DPSGD(batch_size=args.batch_size, epochs=args.epochs, n_train=n_train, n_val=n_val,
                     score_noise=count_noise, secure_mode=args.secure_mode,
                     split_rule=None if per_record is None else per_record.rule)
    tau = DEFAULT_TAU if args.tau is None else args.tau
    beta = DEFAULT_BETA if args.beta is None else args.beta
    strategy = make_strategy(args.strategy, C=C, c=c, tau=tau, beta=beta)
    # trains under run.mechanism; in vectorised passes unless --engine opacus
    objective = DPSGDObjective(args.dataset, model, data_dir=args.data_dir, engine=tune_engine(args),
                               pass_size=args.pass_size, split=per_record)
    epsilon = DEFAULT_EPSILON if args.epsilon is None and args.sigma is None else args.epsilon
    request = TuneRequest(args, epsilon, runs, space, splits, model, training, strategy, tau, beta, objective,
                          two_stage, probe_epochs)
    return with_design(request, loaded)


_PER_RECORD_TAG = 0x5350_4C54  # "SPLT": the split seed's stream under a curator's --seed


def data_split_of(args: TuneArgs, *, subsampled: bool = False) -> str:
    """The split ``dphypo tune`` uses: ``--data-split`` as given, else ``per-record`` (Theorem S's max bound).

    Without ``--data-split``, subsampled tuning (``--tune-fraction``, or a subsampled design from ``--design-from``)
    keeps the permutation split: Theorem S is not proven for it (docs/proofs/split.md §8), so its runs are charged the
    sum of their two parts, as before.

    Raises:
        ValueError: An unknown ``--data-split``, or ``per-record`` given with subsampled tuning.
    """
    if args.data_split is not None and args.data_split not in DATA_SPLITS:
        raise ValueError(f"--data-split must be one of {', '.join(DATA_SPLITS)}, got {args.data_split!r}")
    subsampled = subsampled or args.tune_fraction is not None
    if args.data_split == "per-record" and subsampled:  # its Poisson masks per split are not checked under Theorem S
        raise ValueError("--data-split per-record does not combine with --tune-fraction yet (docs/proofs/split.md "
                         "§8); use --data-split permutation")
    if args.data_split is not None:
        return args.data_split
    return "permutation" if subsampled else "per-record"


def per_record_split(args: TuneArgs, *, subsampled: bool = False) -> PerRecordSplit | None:
    """The per-record split ``dphypo tune`` uses by default (docs/proofs/split.md), ``None`` for ``permutation``.

    Each record's side is an independent draw (shares 0.6 / 0.2 / 0.2 of the pool; for datasets with an official
    test set that set is the test split and the pool is shared 0.8 / 0.2). Its seed is the search's secret
    (privacy rule 6): drawn from ``--seed`` when the curator gave one, else read back from the journal of a resumed
    search (sealed in it with the objective), else 128 bits of fresh OS entropy. Never released.

    Args:
        args: The options (``--data-split``, ``--tune-fraction``, ``--seed``, ``--journal``, ``--dataset``).
        subsampled: Whether the design is subsampled tuning (from ``--design-from``).

    Raises:
        ValueError: As :func:`data_split_of`.
    """
    from dphypo.train.data import PerRecordSplit

    if data_split_of(args, subsampled=subsampled) == "permutation":
        return None
    test = 0.0 if args.dataset in ("mnist", "fashion-mnist", "cifar10") else 0.2
    seed: int | None
    if args.seed is not None:
        import numpy as np

        state = np.random.SeedSequence([int(args.seed), _PER_RECORD_TAG]).generate_state(4, dtype=np.uint32)
        seed = int.from_bytes(state.tobytes(), "little")  # 128 bits, a stream of the curator's secret seed
    else:
        seed = _journaled_split_seed(args.journal)
    return PerRecordSplit("draw", val_fraction=0.2, test_fraction=test, seed=seed)


def _journaled_split_seed(journal: str | None) -> int | None:
    """The per-record split's seed sealed in a resumed search's journal (``None``: a new search)."""
    if journal is None or not Path(journal).is_file() or Path(journal).stat().st_size == 0:
        return None
    from dphypo.search.storage import SQLiteJournal

    with SQLiteJournal.open(journal, read_only=True) as opened:
        sealed = opened.sealed()
    found = None if sealed is None else _find_split_seed(sealed.config)
    return None if found is None else int(found)


def _find_split_seed(node: Any) -> int | None:
    if isinstance(node, dict):
        if node.get("type") == "dphypo.train.data.PerRecordSplit" and isinstance(node.get("seed"), int):
            return int(node["seed"])
        values: Any = node.values()
    elif isinstance(node, list):
        values = node
    else:
        return None
    for value in values:
        found = _find_split_seed(value)
        if found is not None:
            return found
    return None


def with_design(request: TuneRequest, loaded: Design | None = None) -> TuneRequest:
    """The request with its design as one value and why it was chosen (nothing trained or drawn, no data read).

    ``--design-from`` (``loaded``) runs the file's design as it is; ``--design auto`` with no design option runs
    :func:`~dphypo.api.design.auto_design`'s pick for the total ε (``--design two-stage`` alone: its two-stage
    pick); otherwise the options describe the design.

    Raises:
        ValueError: No design runs at this ε (``--design auto``), in one line.
    """
    import dataclasses

    from dphypo.api.design import SingleStage, Subsampled, TwoStageSearch, auto_design

    args, training = request.args, request.training
    design: Design
    if loaded is not None:
        design, reason = loaded, f"read from --design-from {args.design_from}"
    elif _auto_default(args) and request.epsilon is not None:
        design, reason = auto_design(training, request.epsilon, args.delta, max_lost=args.max_lost,
                                     two_stage_only=args.design == "two-stage")
    elif request.two_stage is not None:
        placement, rule = probe_placement(args)
        design = TwoStageSearch(request.two_stage, request.strategy, args.probe_epochs, placement, rule,
                                probe_noise_factor(args))
        reason = (f"the two-stage options given ({', '.join(_two_stage_options(args))})" if args.design == "auto"
                  else "--design two-stage")
    elif args.tune_fraction is not None:
        design = Subsampled(args.tune_fraction, args.variant, request.strategy, request.runs)
        reason = "--tune-fraction"
    else:
        design = SingleStage(request.strategy, request.runs)
        given = _single_stage_options(args) + (["--strategy gp"] if args.strategy == "gp" else [])
        reason = ("--design single" if args.design == "single"
                  else f"the single-stage options given ({', '.join(given)})")
    if isinstance(design, TwoStageSearch):
        epochs = design.epochs_of_probes(training)
        if epochs > training.epochs:
            from dphypo.privacy.two_stage import TwoStageDesignError

            raise TwoStageDesignError(f"the design's probe epochs ({epochs}) must be at most --epochs "
                                      f"({training.epochs}): a probe fidelity above the final one buys nothing")
        return dataclasses.replace(request, two_stage=design.two_stage, probe_epochs=epochs,
                                   strategy=design.probe_strategy, design=design, design_reason=reason)
    runs = design.runs
    if isinstance(design, Subsampled) and args.tune_fraction is None:  # from a file: the search _search runs
        request = dataclasses.replace(request, args=dataclasses.replace(args, tune_fraction=design.fraction,
                                                                        variant=design.variant))
    return dataclasses.replace(request, two_stage=None, probe_epochs=None, strategy=design.search_strategy,
                               runs=runs, design=design, design_reason=reason)


def _auto_default(args: TuneArgs) -> bool:
    """``--design auto`` (or ``two-stage``) with no option that describes the design: the rule picks it."""
    if args.design_from is not None or _two_stage_options(args) or args.strategy != "uniform":
        return False
    return args.design == "two-stage" or (args.design == "auto" and not _single_stage_options(args))


def load_design(args: TuneArgs) -> Design | None:
    """``--design-from FILE``: the design a ``dphypo plan --json`` output picked (or a ``release.json`` ran).

    Raises:
        ValueError: An unreadable file or no design in it, or options that would describe another design, in one
            line naming them.
    """
    if args.design_from is None:
        return None
    from dphypo.api.design import design_from_dict

    described = [option for option, given in (
        ("--design", args.design != "auto"), ("--strategy", args.strategy != "uniform"),
        ("--C/--c", (args.C, args.c) != (None, None)), ("--tau/--beta", (args.tau, args.beta) != (None, None)),
        ("--runs/--theta/--gamma/--mean", args.runs != "geometric" or (args.theta, args.gamma, args.mean)
         != (None, None, None)),
        ("--tune-fraction/--variant", args.tune_fraction is not None or args.variant != 1),
        ("--batch-size-grid/--epochs-grid", args.batch_size_grid is not None or args.epochs_grid is not None),
    ) if given] + _two_stage_options(args)
    if described:
        raise ValueError(f"--design-from sets the design: drop {', '.join(described)}")
    try:
        data = json.loads(Path(args.design_from).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"--design-from {args.design_from!r} is not a readable JSON file: {exc}") from None
    try:
        return design_from_dict(data)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"--design-from {args.design_from!r}: {exc}") from None


def _single_stage_options(args: TuneArgs) -> list[str]:
    """The options given that only a single-stage search takes (they make ``--design auto`` single-stage)."""
    given = {
        "--runs": args.runs != "geometric", "--theta": args.theta is not None, "--gamma": args.gamma is not None,
        "--mean": args.mean is not None, "--sigma": args.sigma is not None,
        "--tune-fraction": args.tune_fraction is not None,
        "--batch-size-grid": args.batch_size_grid is not None, "--epochs-grid": args.epochs_grid is not None,
    }
    return [option for option, present in given.items() if present]


def _two_stage_options(args: TuneArgs) -> list[str]:
    """The two-stage options given (they make ``--design auto`` two-stage)."""
    given = {
        "--probes": args.probes is not None, "--probe-mode": args.probe_mode != "release",
        "--probe-epochs": args.probe_epochs is not None, "--split": args.split != 0.5, "--top-k": args.top_k != 1,
        "--final-mean": args.final_mean is not None, "--probe-placement": args.probe_placement is not None,
        "--recommend": args.recommend is not None,
        "--probe-score-noise-accuracy": args.probe_score_noise_accuracy is not None,
    }
    return [option for option, present in given.items() if present]


def probe_placement(args: TuneArgs) -> tuple[ProbePlacement | None, str]:
    """``--probe-placement`` and ``--recommend`` as a design's ``placement`` and ``recommend`` (no data read).

    ``uniform`` (the default) is today's placement (``None``: the strategy places the probes); ``gp-ucb`` and
    ``gp-log-nei`` are :class:`~dphypo.strategies.gp.placement.ProbePlacement` with that BoTorch acquisition.

    Raises:
        ValueError: An unknown name, a GP placement with ``--strategy gp`` (both place the probes), or either
            option with ``--probe-mode select`` (a selection releases its best probe only), in one line.
    """
    from dphypo.strategies.gp.placement import ProbePlacement
    from dphypo.strategies.recommend import RECOMMENDATIONS

    name = args.probe_placement or "uniform"
    rule = args.recommend or "best-probe"
    if name not in PROBE_PLACEMENTS:
        raise ValueError(f"--probe-placement must be one of {', '.join(PROBE_PLACEMENTS)}, got {name!r}")
    if rule not in RECOMMENDATIONS:
        raise ValueError(f"--recommend must be one of {', '.join(RECOMMENDATIONS)}, got {rule!r}")
    if name != "uniform" and args.strategy != "uniform":
        raise ValueError(f"--probe-placement {name} places the probes: drop --strategy {args.strategy}")
    if args.probe_mode == "select" and (name != "uniform" or rule != "best-probe"):
        given = "--probe-placement" if name != "uniform" else "--recommend"
        raise ValueError(f"{given} reads every released probe: it needs --probe-mode release (a probe selection "
                         "releases its best probe only, its densities projected onto S_{C,c})")
    placement = None if name == "uniform" else ProbePlacement("gp", name.removeprefix("gp-"))
    return placement, rule


def probe_noise_factor(args: TuneArgs) -> float:
    """``--probe-score-noise-accuracy`` as a multiple of ``--score-noise-accuracy`` (1 when not given).

    Raises:
        ValueError: A value not > 0, or one without a score noise to scale (``--score-noise-accuracy 0``).
    """
    if args.probe_score_noise_accuracy is None:
        return 1.0
    check_positive("--probe-score-noise-accuracy", args.probe_score_noise_accuracy)
    if not args.score_noise_accuracy > 0:
        raise ValueError("--probe-score-noise-accuracy needs a private score release: set --score-noise-accuracy > 0")
    return args.probe_score_noise_accuracy / args.score_noise_accuracy


def resolve_design(args: TuneArgs, C: float, c: float) -> TwoStage | None:
    """The two-stage design ``--design`` and its options describe, or ``None`` for a single-stage search.

    ``auto`` (the default): a two-stage option (:func:`_two_stage_options`) selects two-stage, an option only a
    single-stage search takes (:func:`_single_stage_options`) or ``--strategy gp`` selects single-stage, both at
    once are refused naming them; with none, :func:`with_design` replaces the design returned here (20 released
    probes) by :func:`~dphypo.api.design.auto_design`'s pick for ``--epsilon``. Nothing here reads data.

    Raises:
        ValueError: An unknown design, or options of the other design, named.
    """
    from dphypo.cli.two_stage import two_stage_design

    if args.design not in DESIGNS:
        raise ValueError(f"--design must be one of {', '.join(DESIGNS)}, got {args.design!r}")
    single, staged = _single_stage_options(args), _two_stage_options(args)
    design = args.design
    if design == "auto" and single and staged:  # the user wrote no --design: name what they wrote
        raise ValueError(f"{', '.join(staged)} select a two-stage search but {', '.join(single)} a single-stage one: "
                         "drop one side (or choose with --design two-stage / --design single)")
    if design == "auto":
        design = "single" if (single or args.strategy == "gp") and not staged else "two-stage"
    if design == "single":
        if staged:
            raise ValueError(f"{', '.join(staged)} set a two-stage search: drop them, or use --design two-stage")
        return None
    if single:
        raise ValueError(f"--design two-stage does not take {', '.join(single)} (options of a single-stage search): "
                         "drop them, or use --design single")
    probe_placement(args)  # refused here, before any data is read
    probe_noise_factor(args)
    probes = float(DEFAULT_PROBES) if args.probes is None else args.probes
    if args.strategy == "uniform":
        C, c = 1.0, 1.0
    return two_stage_design(probes, args.probe_mode, args.split, args.top_k, args.final_mean, C=C, c=c)


def _probe_epochs(args: TuneArgs) -> int:
    """``--probe-epochs`` (default a fifth of ``--epochs``), refused above ``--epochs`` before any data is read."""
    from dphypo.api.two_stage import default_probe_epochs
    from dphypo.privacy.two_stage import TwoStageDesignError

    check_positive_int("--epochs", args.epochs)
    if args.probe_epochs is None:
        return default_probe_epochs(args.epochs)
    check_positive_int("--probe-epochs", args.probe_epochs)
    if args.probe_epochs > args.epochs:
        raise TwoStageDesignError(f"--probe-epochs must be at most --epochs ({args.epochs}): a probe fidelity above "
                                  f"the final one buys nothing, got {args.probe_epochs}")
    return args.probe_epochs


def integer_grid(text: str, option: str) -> tuple[int, ...]:
    """A comma-separated list of integers ≥ 1 (``--batch-size-grid 32,64,128``), refused in one line naming it."""
    values = []
    for word in text.split(","):
        try:
            value = int(word.strip())
        except ValueError:
            raise ValueError(f"{option} must be a comma-separated list of integers ≥ 1, got {text!r}") from None
        if value < 1:
            raise ValueError(f"{option} values must be ≥ 1, got {value}")
        values.append(value)
    if len(values) < 2 or len(set(values)) != len(values):
        raise ValueError(f"{option} must list at least 2 distinct values (give one value with --batch-size or "
                         f"--epochs), got {text!r}")
    return tuple(sorted(values))


def tune_space(lrs: Any, clips: Any, batch_grid: str | None, epochs_grid: str | None) -> SearchSpace:
    """The lr × clip grid, with batch-size and epochs axes (privacy-affecting) when their grids are given."""
    from dphypo.space import Grid, IntGrid, SearchSpace

    axes: dict[str, Any] = {"lr": Grid(lrs, scale="log"), "clip": Grid(clips, scale="linear")}
    roles: dict[str, str] = {}
    if batch_grid is not None:
        axes["batch_size"] = IntGrid(integer_grid(batch_grid, "--batch-size-grid"), scale="log")
        roles["batch_size"] = "batch_size"
    if epochs_grid is not None:
        axes["epochs"] = IntGrid(integer_grid(epochs_grid, "--epochs-grid"), scale="linear")
        roles["epochs"] = "epochs"
    return SearchSpace(axes, privacy_roles=roles or None)


def dry_run_payload(request: TuneRequest) -> dict[str, Any]:
    """Every candidate's σ, q and steps, the reference and the accounted ε: what ``--dry-run`` prints.

    Nothing is trained, nothing random is drawn (no T, no candidate) and no data is read: n_train and n_val, which
    dphypo's accounting treats as public, come from the dataset's public class counts
    (:func:`~dphypo.train.data.split_sizes`).
    """
    from dphypo.api.search import (
        accounted_search,
        calibrated_sigma,
        plan_privacy_axes,
        profile_or_skipped,
        split_parts_of,
    )
    from dphypo.privacy import PrivacyAccounting
    from dphypo.train.heterogeneous import HeterogeneousDPSGD

    args, training = request.args, request.training
    if request.two_stage is not None:
        return _two_stage_dry_run(request)
    search = accounted_search(request.strategy, request.runs)
    if request.space.changes_privacy:
        candidates, privacy = plan_privacy_axes(request.space, training, search, epsilon=request.epsilon,
                                                delta=args.delta, max_lost=args.max_lost)
        rows = [{**setting, **HeterogeneousDPSGD.describe_mechanism(mechanism)}
                for setting, mechanism in zip(candidates.settings, candidates.mechanisms, strict=True)]
        reference: dict[str, Any] | None = candidates.reference_description()
    else:
        sigma = args.sigma if request.epsilon is None else calibrated_sigma(
            search, training, epsilon=request.epsilon, delta=args.delta, max_lost=args.max_lost)
        mechanism = training.mechanism(sigma)
        # the accounting tune itself uses: the run's profile bounds too for a uniform search (KRW 2024 Sec. 4)
        # (under --data-split per-record: each part with its own PLD, Theorem S, as tune accounts it)
        split = split_parts_of(mechanism, profiles=not search.adaptive)
        profile = None if search.adaptive or split is not None else profile_or_skipped(mechanism)
        privacy = PrivacyAccounting(search, mechanism.rdp(), args.delta, profile=profile, max_lost=args.max_lost,
                                    split=split)
        rows, reference = [HeterogeneousDPSGD.describe_mechanism(mechanism)], None
    report = privacy.account()
    return {"dry_run": True, "candidates": rows, "reference": reference, "epsilon": report.epsilon,
            "delta": report.delta, "method": report.method, "theorem": report.theorem,
            "expected_runs": search.run_count.mean, **_design_payload(request),
            **({} if report.bound is None else {"bound": report.bound})}


def _two_stage_dry_run(request: TuneRequest) -> dict[str, Any]:
    """``--dry-run`` of a two-stage search: both stages' mechanisms and the composed ε (nothing drawn or trained)."""
    from dphypo.api.two_stage import charged_mechanisms
    from dphypo.train.heterogeneous import HeterogeneousDPSGD

    design, args = request.two_stage, request.args
    assert design is not None and request.probe_epochs is not None and request.epsilon is not None
    factor = getattr(request.design, "probe_score_noise_factor", 1.0)
    probe, final, report = charged_mechanisms(request.training, design, probe_epochs=request.probe_epochs,
                                              epsilon=request.epsilon, delta=args.delta, max_lost=args.max_lost,
                                              probe_score_noise_factor=factor)
    rows = [{"stage": stage, **HeterogeneousDPSGD.describe_mechanism(mechanism), "score_noise": mechanism.score_noise}
            for stage, mechanism in (("probes", probe), ("final", final))]
    return {"dry_run": True, "design": design.describe(), **_design_payload(request), "candidates": rows,
            "reference": None,
            "epsilon": report.epsilon, "delta": report.delta, "method": report.method,
            "theorem": f"stage 1: {report.stage1_theorem}; stage 2: {report.stage2_theorem}",
            "expected_runs": float(sum(report.expected_runs)), "accounting": report.to_dict(),
            **({"bound": bound} if (bound := getattr(report, "bound", None)) else {})}


def render_dry_run(request: TuneRequest) -> None:
    """``--dry-run``: one JSON object (``--json``) or a table per candidate setting, then the accounted ε."""
    payload = dry_run_payload(request)
    if request.args.as_json:
        typer.echo(json.dumps(payload, sort_keys=True))
        return
    table = Table(title="dphypo tune --dry-run: nothing trained, no T drawn")
    staged = "stage" in payload["candidates"][0]
    for column in (("stage",) if staged else ()) + ("batch size", "epochs", "σ", "q", "steps"):
        table.add_column(column)
    for row in payload["candidates"]:
        table.add_row(*([row["stage"]] if staged else []), str(row["batch_size"]), str(row["epochs"]),
                      f"{row['sigma']:.4g}", f"{row['sample_rate']:.4g}", str(row["steps"]))
    out = out_console()
    out.print(table)
    reference = payload["reference"]
    if reference is not None:
        out.print(f"reference run (every candidate dominated by it): σ {reference['sigma']:.4g}, "
                  f"q {reference['sample_rate']:.4g}, {reference['steps']} steps", markup=False, highlight=False)
    out.print(f"total ε {payload['epsilon']:.4f} at δ {payload['delta']:g} ({payload['method']}: "
              f"{payload['theorem']}), E[T] = {payload['expected_runs']:g}", markup=False, highlight=False)
    if "bound" in payload:  # a per-record split: the worse of the record's two sides (Theorem S)
        out.print(f"bound: {payload['bound']}", markup=False, highlight=False)
    if "design" in payload:
        out.print(f"design: {payload['design']['label']} ({payload['design_reason']})", markup=False,
                  highlight=False)


def _mean_runs(args: TuneArgs) -> float | None:
    """``--mean``, or :data:`DEFAULT_MEAN_RUNS` when no parameter of T's law is given (negbin takes --theta)."""
    if args.gamma is None and args.mean is None and args.runs != "negbin":
        return DEFAULT_MEAN_RUNS
    return args.mean


def _warn_if_seeded(seed: int | None) -> None:
    """Privacy rule 6: a seed the curator chose is a secret, and we say so once."""
    if seed is not None:
        typer.echo(f"warning: --seed {seed} makes this search reproducible: anyone who knows the seed can "
                   "recompute T and subtract the DP-SGD and score noise, so keep it as secret as the data",
                   err=True)


def search_options(args: TuneArgs, *, executor: Executor, progress: Callable[[int], None]) -> SearchOptions:
    """The one :class:`~dphypo.search.options.SearchOptions` of the search ``args`` describe.

    Args:
        args: The options as typed (``--seed``, ``--journal``, ``--runs-per-update``).
        executor: Where the runs execute (``--executor``, ``--workers``, ``--address``, opened by the caller).
        progress: Called with the number of completed runs (the progress line; counts only).

    Returns:
        The options; a search ``dphypo tune`` runs always maximises the private validation accuracy.
    """
    from dphypo.search.options import SearchOptions

    return SearchOptions(direction="maximize", seed=args.seed, executor=executor, journal=args.journal,
                         runs_per_update=args.runs_per_update, progress=progress)


def run_search(request: TuneRequest) -> tuple[SearchResult, float]:
    """Run the search of ``request`` on its executor with a progress line (elapsed time only, privacy rule 1).

    Returns:
        The search's result and its wall time in seconds (curator-only: it reveals T roughly).
    """
    from dphypo.search.execution import make_executor

    args = request.args
    started = time.perf_counter()
    pool = make_executor(args.executor, workers=args.workers, address=args.address)
    columns = (SpinnerColumn(), TextColumn(progress_label(args.show_trials)), TimeElapsedColumn())
    with pool, Progress(*columns, console=Console(stderr=True), transient=True) as bar, _interrupt_explained(args):
        task = bar.add_task("search", total=None)
        options = search_options(args, executor=pool, progress=lambda done: bar.update(task, completed=done))
        result = _search(request, options)
    return result, time.perf_counter() - started


def _search(request: TuneRequest, options: SearchOptions) -> SearchResult:
    """:func:`dphypo.tune`, or :func:`dphypo.tune_subsampled` with ``--tune-fraction``, under ``options``."""
    from dphypo.api import tune, tune_subsampled
    from dphypo.privacy.transfer import check_variant

    args = request.args
    if request.two_stage is not None:
        from dphypo.api import tune_two_stage
        from dphypo.api.design import TwoStageSearch

        design = request.design if isinstance(request.design, TwoStageSearch) else None
        return tune_two_stage(request.objective, request.space, request.training, request.two_stage,
                              probe_epochs=request.probe_epochs, epsilon=request.epsilon, delta=args.delta,
                              strategy=request.strategy, max_lost=args.max_lost, options=options,
                              placement=None if design is None else design.placement,
                              recommend="best-probe" if design is None else design.recommend,
                              probe_score_noise_factor=1.0 if design is None else design.probe_score_noise_factor)
    common: _SearchArguments = {
        "epsilon": request.epsilon, "sigma": args.sigma, "delta": args.delta, "runs": request.runs,
        "strategy": request.strategy, "max_lost": args.max_lost, "options": options,
    }
    if args.tune_fraction is None:
        return tune(request.objective, request.space, request.training, **common)
    return tune_subsampled(request.objective, request.space, request.training, fraction=args.tune_fraction,
                           variant=check_variant(args.variant), **common)


def save_model(request: TuneRequest, release: Release) -> SavedModel:
    """Save the released model with its SHA-256 and public test accuracy (nothing if no model was released).

    The model is written to a temporary folder beside ``--out``, not to ``--out`` itself: :func:`record_release`
    publishes it there together with ``release.json``, in one step, so no kill leaves a model without its ε.
    """
    from dphypo.cli.outdir import MODEL_FILE, staging_folder

    if release.artifact is None:
        return SavedModel()
    out_dir = Path(request.args.out)
    staging = staging_folder(out_dir)
    release.artifact.save(staging / MODEL_FILE)
    assert request.splits is not None  # loaded for every search that trains
    accuracy = release.artifact.test_accuracy(request.splits)
    rule = request.splits.split_rule
    if rule is not None and rule.test > 0:  # test records drawn from the protected pool: curator-only (§6.2, (T))
        return SavedModel(out_dir / MODEL_FILE, file_sha256(staging / MODEL_FILE), None, staging, accuracy)
    return SavedModel(out_dir / MODEL_FILE, file_sha256(staging / MODEL_FILE), accuracy, staging)


def release_payload(request: TuneRequest, result: SearchResult, saved: SavedModel, seconds: float
                    ) -> dict[str, Any]:
    """The JSON of the release (plus the curator-only trials and wall time with ``--show-trials``)."""
    from dphypo.api import SubsampledSearchResult, TwoStageSearchResult

    args = request.args
    payload = _release_payload(result.release, args, request.model, saved)
    if isinstance(result, SubsampledSearchResult) and result.subsampling is not None:
        payload["subsampled"] = result.subsampling.to_dict()
    if isinstance(result, TwoStageSearchResult) and result.two_stage is not None:
        payload["two_stage"] = result.two_stage.to_dict()  # stage 1's release is part of the release
        payload["probe_placement"] = result.two_stage.placement["name"]
        payload["recommend"] = result.two_stage.recommendation["rule"]
    payload.update(_design_payload(request))
    if args.show_trials:  # the search's wall time reveals T roughly: curator-only, like T itself
        payload["NOT_PRIVATE_curator_only"] = {**_trials_payload(result.history), "search_seconds": round(seconds, 1)}
        if saved.curator_test_accuracy is not None:  # on test records from the protected pool
            payload["NOT_PRIVATE_curator_only"]["test_accuracy"] = saved.curator_test_accuracy
        final_history = getattr(result, "final_history", None)
        if final_history is not None:
            payload["NOT_PRIVATE_curator_only"]["final_stage"] = _trials_payload(final_history)
    return payload


def _design_payload(request: TuneRequest) -> dict[str, Any]:
    """The design the search ran (``describe()``: ``--design-from`` re-creates it) and why it was chosen."""
    if request.design is None:
        return {}
    return {"design": request.design.describe(), "design_reason": request.design_reason}


def record_release(args: TuneArgs, payload: dict[str, Any], saved: SavedModel) -> None:
    """Publish the model with ``release.json`` in ``--out`` (one step), then record its file in the journal.

    ``release.json`` is written beside the model in the temporary folder, which then replaces ``--out``
    (:func:`dphypo.cli.outdir.publish`); the journal's release gets the model's path and SHA-256 afterwards.
    """
    from dphypo.cli.outdir import RELEASE_FILE, publish

    if saved.staging is not None:
        text = json.dumps(_without_trials(payload), indent=2, sort_keys=True)
        (saved.staging / RELEASE_FILE).write_text(text)
        publish(saved.staging, Path(args.out))
    if args.journal is not None:
        _journal_release_extras(args.journal, saved)


def render_release(request: TuneRequest, result: SearchResult, saved: SavedModel, payload: dict[str, Any]) -> None:
    """Print the release: one JSON object with ``--json``, else its table (and the curator-only trials)."""
    args = request.args
    if saved.curator_test_accuracy is not None and args.show_trials:  # protected test records: never released,
        # and shown only where the curator asked for what is not private (--show-trials), as other runs' scores are
        typer.echo(f"NOT PRIVATE, curator-only (not in release.json, not covered by ε): exact test accuracy of the "
                   f"released model {saved.curator_test_accuracy:.4f} on the protected test split", err=True)
    if args.as_json:
        typer.echo(json.dumps(payload, sort_keys=True))
        return
    out = out_console()
    from dphypo.api import TwoStageSearchResult

    if isinstance(result, TwoStageSearchResult) and result.two_stage is not None:
        out.print(_two_stage_table(request, result, saved))
    else:
        out.print(_report_table(result.release.privacy, "Release of the private search",  # type: ignore[arg-type]
                                _release_rows(request, result, saved)))
    out.print(_release_footer(saved))
    if args.show_trials:
        _print_trials(out, result.history)
        final_history = getattr(result, "final_history", None)
        if final_history is not None:
            _print_trials(out, final_history, stage="final stage")


def _test_accuracy_text(saved: SavedModel) -> str:
    """The release table's test accuracy: public, curator-only (test records from the protected pool), or none."""
    if saved.test_accuracy is not None:
        return f"{saved.test_accuracy:.4f}"
    if saved.curator_test_accuracy is not None:
        return "curator-only (test records drawn from the protected pool; --show-trials prints it)"
    return "-"


def _release_footer(saved: SavedModel) -> str:
    """What may be published, and whether the test accuracy is public data (not covered by ε) or curator-only."""
    if saved.curator_test_accuracy is not None:
        return ("[dim]Only this release may be published. The test records were drawn from the protected pool "
                "(per-record split): the released model's test accuracy is curator-only (--show-trials).[/]")
    return ("[dim]Only this release may be published. Test accuracy uses the dataset's test split, which the "
            "embedded datasets treat as public; it is not covered by ε.[/]")


def _release_rows(request: TuneRequest, result: SearchResult, saved: SavedModel) -> dict[str, str]:
    """The release table's rows beside the privacy report (dataset, strategy, released values, σ, files)."""
    from dphypo.api import SubsampledSearchResult

    args, release = request.args, result.release
    rows = {
        "dataset / model": f"{args.dataset} / {request.model}",
        "strategy": args.strategy + ("" if args.strategy == "uniform" else f" (τ={request.tau:g}, β={request.beta:g})"),
        **({} if request.design is None else {"design": request.design.label(),
                                              "  why this design": request.design_reason}),
        "released lr, clip": "-" if release.params is None else
        f"{release.params['lr']:.4g}, {release.params['clip']:.4g}",
        "released score (private val. acc.)": "-" if release.score is None else f"{release.score:.4f}",
        "test accuracy of released model": _test_accuracy_text(saved),
        "σ (noise multiplier)": f"{_dpsgd_mechanism(release).sigma:.4g}",
        **_candidate_rows(release),
        "lost attempts charged up front": f"{args.max_lost} (one more stops the search without a release)",
        "saved model": str(saved.path) if saved.path else "- (no run: T = 0)",
    }
    if isinstance(result, SubsampledSearchResult) and result.subsampling is not None:
        rows.update(_subsampled_rows(result.subsampling))
    return rows


def _two_stage_table(request: TuneRequest, result: TwoStageSearchResult, saved: SavedModel) -> Table:
    """The release of a two-stage search: the final model, what stage 1 released, both stages' ε and mechanisms."""
    outcome, release = result.two_stage, result.release
    assert outcome is not None
    report, probe, final = outcome.report, outcome.probe_mechanism, outcome.final_mechanism
    table = Table(title="Release of the two-stage private search", show_header=False, title_justify="left")
    table.add_column("quantity", style="bold")
    table.add_column("value")
    scored = [p for p in outcome.probes if p.score is not None]
    best = max(scored, key=lambda p: p.score or 0.0, default=None)
    rows = {
        "total ε": f"[bold green]{report.epsilon:.4g}[/] ({report.method}; "
                   + ", ".join(f"{k} {v:.4g}" for k, v in sorted(report.methods.items())) + ")",
        "δ": f"{report.delta:g}",
        **({"  bound": bound} if (bound := getattr(report, "bound", None)) else {}),
        "dataset / model": f"{request.args.dataset} / {request.model}",
        "design": request.design.label() if request.design is not None else outcome.design.label(),
        **({} if not request.design_reason else {"  why this design": request.design_reason}),
        "released lr, clip": "-" if release.params is None else
        f"{release.params['lr']:.4g}, {release.params['clip']:.4g}",
        "released score (final run, private val. acc.)": "-" if release.score is None else f"{release.score:.4f}",
        "test accuracy of released model": _test_accuracy_text(saved),
        "stage 1 (probes)": f"σ {probe.sigma:.4g}, {probe.epochs} epochs, q {probe.sample_rate:.4g}, {probe.steps} "
                            f"steps; ε alone ≤ {report.stage1_epsilon:.4g} by RDP ({report.stage1_theorem})",
        "  released by stage 1": f"{len(outcome.probes)} probe(s) with their noisy scores (in release.json)"
        + ("" if best is None else f"; best {best.score:.4f} at lr {best.params['lr']:.4g}, clip "
           f"{best.params['clip']:.4g}"),
        "  probes placed by": _placement_text(outcome.placement),
        "  committed point chosen by": outcome.recommendation["rule"]
        + (" (no usable GP fit: fell back to the best probe)" if outcome.recommendation.get("fell_back") else "")
        + " (post-processing of stage 1's release)",
        "stage 2 (final)": f"σ {final.sigma:.4g}, {final.epochs} epochs, q {final.sample_rate:.4g}, {final.steps} "
                           f"steps; ε alone ≤ {report.stage2_epsilon:.4g} by RDP ({report.stage2_theorem})",
        "saved model": str(saved.path) if saved.path else "- (the final run failed on the data)",
    }
    for key, value in rows.items():
        table.add_row(key, value)
    return table


def _placement_text(placement: dict[str, Any]) -> str:
    """Who placed the probes, for the release table."""
    if placement.get("via") == "place_probes" and placement.get("strategy") == "gp":
        sizes = placement.get("schedule")
        if sizes:  # the batches it ran: the start, then the GP batches
            rest = sizes[1:]
            plural = "es" if len(rest) > 1 else ""
            batches = (f"{len(rest)} batch{plural} of {rest[0]}" if len(set(rest)) == 1 else
                       f"{len(rest)} batches of {'/'.join(str(k) for k in rest)}") if rest else "no GP batch"
            return (f"{placement['name']} (BoTorch acquisition on the GP of the released probes: {batches} after "
                    f"{sizes[0]} space-filling probes)")
        return (f"{placement['name']} (BoTorch acquisition on the GP of the released probes, batches of "
                f"{placement['batch']} after {placement['start']} space-filling probes)")
    return f"{placement['name']} (post-processing of the released probes)"


def _candidate_rows(release: Release) -> dict[str, str]:
    """A search over batch size or epochs: the released candidate's batch size, epochs, q, steps and the reference."""
    reference = _reference(release)
    if reference is None:
        return {}
    mechanism = _dpsgd_mechanism(release)
    return {
        "  batch size, epochs (released)": f"{mechanism.batch_size}, {mechanism.epochs}",
        "  q, steps (released)": f"{mechanism.sample_rate:.4g}, {mechanism.steps}",
        "  reference σ, q, steps": f"{reference['sigma']:.4g}, {reference['sample_rate']:.4g}, {reference['steps']}",
    }


@contextlib.contextmanager
def _interrupt_explained(args: TuneArgs) -> Iterator[None]:
    """Ctrl-C during a search: say what it cost and whether (and how) it resumes, then exit with status 130."""
    try:
        yield
    except KeyboardInterrupt:
        typer.echo(interrupted_message(args.journal, args.max_lost), err=True)
        raise typer.Exit(code=130) from None


def interrupted_message(journal: str | None, max_lost: int) -> str:
    """What an interrupted search tells the curator (one line).

    A run in flight when Ctrl-C arrived touched the data: the journal charges it as a lost attempt, so whether the
    search can resume depends on ``--max-lost``.

    Args:
        journal: The ``--journal`` file, if any.
        max_lost: The search's ``--max-lost``.
    """
    if journal is None:
        return ("interrupted: nothing was released, and the runs so far cannot be resumed (no --journal); the "
                "privacy they spent on the data is not released either")
    from dphypo.search.storage import JournalError, SQLiteJournal

    try:
        with SQLiteJournal.open(journal, read_only=True) as opened:
            charged = _most_charged(opened)
    except (JournalError, OSError):
        charged = 0  # nothing journaled yet (stopped before the search was sealed)
    if charged > max_lost:
        return (f"interrupted: the run in flight was charged as a lost attempt ({charged} so far, --max-lost "
                f"{max_lost} covers {max_lost}), so {journal!r} cannot be resumed: its epsilon would have to grow; "
                "start a new journal (a larger --max-lost makes a search survive interruptions)")
    return (f"interrupted: {charged} lost attempt(s) charged so far (--max-lost {max_lost} covers them); resume "
            f"with the same command and --journal {journal}: T is not redrawn and no finished run repeats")


def _most_charged(journal: Any) -> int:
    """Charged attempts of a journal: of the search, or of its costliest stage (two stages: ``max_lost`` each)."""
    from dphypo.search.storage import StageJournal

    sealed = journal.sealed()
    counts = {} if sealed is None else sealed.config.get("run_counts") or {}
    if sealed is None or sealed.config.get("search") != "two-stage" or not counts:
        return int(journal.charged_attempts())
    probes = int(counts.get("probes", 0))
    stages = (StageJournal(journal, 0, probes), StageJournal(journal, probes, int(counts.get("finals", 0))))
    return max(stage.charged_attempts() for stage in stages)


def progress_label(show_trials: bool) -> str:
    """The progress line's text (a rich template).

    Privacy rule 1: in release mode it shows elapsed time only. A count of completed runs ends at T, and a
    terminal transcript keeps it; only ``--show-trials`` (curator-only) shows the count, labelled as such.
    """
    return "runs completed (NOT PRIVATE, curator-only): {task.completed}" if show_trials else "searching"


def file_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes (the released model's fingerprint in ``release.json`` and the journal)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_options_and_paths(args: TuneArgs) -> tuple[float, float]:
    """Refuse bad options and unusable output paths before any data is read (nothing is spent on a doomed run).

    Returns:
        The GP strategy's density bounds ``(C, c)``, the defaults filled in.
    """
    _check_subsampling_options(args)
    if args.tune_fraction is not None and (args.batch_size_grid or args.epochs_grid):
        raise ValueError("--tune-fraction accounts one DP-SGD mechanism for every run; it cannot be combined with "
                         "--batch-size-grid or --epochs-grid (candidates with different privacy costs)")
    if args.score_noise is not None:
        raise ValueError("--score-noise was renamed --score-noise-accuracy (the std of the noise on the validation "
                         "accuracy; dphypo.tune's score_noise is the same noise in counts, i.e. times n_val)")
    C, c = _strategy_bounds(args)
    if args.runs not in TUNE_RUNS:
        also = " (binomial is for `dphypo account`/`calibrate` only)" if args.runs == "binomial" else ""
        raise ValueError(f"--runs must be one of {', '.join(TUNE_RUNS)}{also}, got {args.runs!r}")
    for option, count in (("--runs-per-update", args.runs_per_update), ("--workers", args.workers)):
        if count is not None:
            check_positive_int(option, count)
    check_pass_size(args.pass_size)  # capped: a pass is padded to this many model copies
    check_epochs(args.epochs)  # capped: beyond it one run trains for days
    if args.epochs_grid is not None:
        for value in integer_grid(args.epochs_grid, "--epochs-grid"):
            check_epochs(value, "--epochs-grid values")
    _check_engine(args)
    check_non_negative_int("--max-lost", args.max_lost)
    if args.seed is not None:
        check_non_negative_int("--seed", args.seed)
    if args.secure_mode:
        from dphypo.train.opacus import require_csprng

        require_csprng()
    if args.dry_run:  # writes nothing, so no output path is needed
        return C, c
    # Every output path is proven writable now: a search that fails to save its release has spent its budget.
    out = check_output_dir(args.out, "--out")
    if args.journal is not None:
        check_output_file(args.journal, "--journal")
    _check_out_is_free(out, args.journal)
    return C, c


def tune_engine(args: TuneArgs) -> str:
    """``--engine``, default ``vectorized`` (``opacus`` with ``--secure-mode``: the engine has no CSPRNG)."""
    if args.engine is not None:
        return args.engine
    return "opacus" if args.secure_mode else "vectorized"


def _check_engine(args: TuneArgs) -> None:
    """``--engine`` and ``--pass-size`` (the pass size is the uniform search's; adaptive ones pass per update)."""
    from dphypo.train.objective import ENGINES

    engine = tune_engine(args)
    if engine not in ENGINES:
        raise ValueError(f"--engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if args.pass_size is not None and engine != "vectorized":
        raise ValueError("--pass-size is for --engine vectorized only")
    if engine == "vectorized" and args.secure_mode:
        raise ValueError("--secure-mode needs --engine opacus (the vectorised engine has no CSPRNG)")


def _check_subsampling_options(args: TuneArgs) -> None:
    """``--variant`` and ``--journal`` against ``--tune-fraction`` (the fraction itself is checked by the API)."""
    if args.tune_fraction is None and args.variant != 1:
        raise ValueError("--variant needs --tune-fraction (it selects the final run of subsampled tuning)")
    if args.tune_fraction is not None and args.journal is not None:
        raise ValueError("--journal is not supported with --tune-fraction yet: the final run on the rest of the data "
                         "would not be journaled, so a crash during it could not be charged")
    if args.tune_fraction is not None:
        from dphypo.privacy.transfer import check_variant

        check_variant(args.variant)


def _strategy_bounds(args: TuneArgs) -> tuple[float, float]:
    """The density bounds ``(C, c)`` of ``--strategy gp`` (defaults filled in); uniform search takes none.

    Raises:
        ValueError: A strategy ``dphypo tune`` does not run, or GP options given to a uniform search.
    """
    if args.strategy not in ("uniform", "gp"):  # before any data is read (top-set: dphypo simulate / dphypo.tune)
        raise ValueError(f"--strategy must be 'uniform' or 'gp', got {args.strategy!r}")
    if args.strategy == "uniform" and (args.C, args.c) not in ((None, None), (1.0, 1.0)):
        raise ValueError("--strategy uniform never adapts (C = c = 1 is what it is accounted with): drop --C/--c, "
                         "or use --strategy gp")
    if args.strategy == "uniform" and (args.tau, args.beta) != (None, None):
        raise ValueError("--tau and --beta set the GP-UCB score of --strategy gp; uniform search has none: drop "
                         "them, or use --strategy gp")
    return (DEFAULT_C if args.C is None else args.C), (DEFAULT_LOWER_C if args.c is None else args.c)


def _check_out_is_free(out: Path, journal: str | None) -> None:
    """Never let one search overwrite another's release (:func:`dphypo.cli.outdir.check_out_is_free`)."""
    from dphypo.cli.outdir import check_out_is_free

    check_out_is_free(out, journal)


def _journal_release_extras(journal: str, saved: SavedModel) -> None:
    """Add the released model's file, its SHA-256 and the public test accuracy to the journal's release."""
    from dphypo.search.storage import SQLiteJournal

    with SQLiteJournal.open(journal) as opened:
        release = opened.release()
        if release is not None:
            opened.write_release({**release, "test_accuracy": saved.test_accuracy,
                                  # resolved: `dphypo release` may run from another directory
                                  "model_path": None if saved.path is None else str(saved.path.resolve()),
                                  "model_sha256": saved.sha256})


def _dpsgd_mechanism(release: Release) -> DPSGDMechanism:
    """The released run's DP-SGD mechanism (a search over batch size or epochs: the released candidate's own)."""
    from dphypo.train.heterogeneous import HeterogeneousDPSGD
    from dphypo.train.mechanism import DPSGDMechanism

    mechanism = release.mechanism
    if isinstance(mechanism, HeterogeneousDPSGD):
        return mechanism.mechanisms[0] if release.params is None else mechanism.for_params(release.params)
    if not isinstance(mechanism, DPSGDMechanism):
        raise TypeError(f"release.mechanism must be a DPSGDMechanism, got {mechanism!r}")
    return mechanism


def _reference(release: Release) -> dict[str, Any] | None:
    """The reference run of a search over batch size or epochs (σ_ref, q, steps), else ``None``."""
    from dphypo.train.heterogeneous import HeterogeneousDPSGD

    mechanism = release.mechanism
    return mechanism.reference_description() if isinstance(mechanism, HeterogeneousDPSGD) else None


def _release_payload(release: Release, args: TuneArgs, model: str, saved: SavedModel) -> dict[str, Any]:
    mechanism = _dpsgd_mechanism(release)
    return {
        "release": {
            "params": release.params,
            "score": release.score,
            "test_accuracy": saved.test_accuracy,
            "model_path": None if saved.path is None else str(saved.path),
            "model_sha256": saved.sha256,
        },
        "privacy": {**release.privacy.to_dict(), "sigma": mechanism.sigma,
                    "sample_rate": mechanism.sample_rate, "steps": mechanism.steps, "max_lost": args.max_lost,
                    **({} if _reference(release) is None else {"reference": _reference(release)})},
        "dataset": args.dataset,
        "model": model,
        "strategy": args.strategy,
    }


def _subsampled_rows(info: SubsampledTuning) -> dict[str, str]:
    """Table rows of a subsampled release (method, q, transfer, nominal set sizes)."""
    final = "X minus X1" if info.variant == 1 else "X"
    return {
        "method": info.method,
        "tuning fraction q": f"{info.tuning_rate:g} (search on X1 only)",
        "lr tuned on X1 → transferred": f"{info.tuned_lr:.4g} → {info.transferred_lr:.4g}",
        "set sizes (nominal)": f"X1: {info.tuning_set_size}, final run on {final}: {info.final_set_size}",
        "batch size tuning → final": f"{info.tuning_mechanism.batch_size} → {info.final_mechanism.batch_size}",
        "ε of the same search on all data": f"{info.report.full_data_epsilon:.4g} (no final run)",
        "released score": "best tuning run's private score on X1's validation part",
    }


def _trials_payload(history: SearchHistory) -> dict[str, Any]:
    return {
        "run_count": history.run_count,
        "trials": [
            {"number": t.number, "params": t.params, "score": None if t.failed else t.score, "failed": t.failed,
             "seconds": round(t.seconds, 3)}
            for t in history.trials
        ],
        "strategy_events": [f"step {e.step}: {e.kind}: {e.message}" for e in history.events],
    }


def _without_trials(payload: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in payload.items() if k != "NOT_PRIVATE_curator_only"}


def _print_trials(console: Console, history: SearchHistory, stage: str = "") -> None:
    label = f"{stage}: " if stage else ""
    table = Table(title=f"NOT PRIVATE — curator only: {label}T = {history.run_count} runs", title_style="bold red")
    for col in ("run", "lr", "clip", "score", "seconds"):
        table.add_column(col)
    for t in history.trials:
        table.add_row(str(t.number), f"{t.params['lr']:.4g}", f"{t.params['clip']:.4g}",
                      "failed" if t.failed else f"{t.score:.4f}", f"{t.seconds:.2f}")
    console.print(table)
