"""What the DP-SGD run tests share: a small mechanism, a loader for it, and a real tiny training."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, TensorDataset

from dphypo.search.records import Run
from dphypo.train.mechanism import DPSGDMechanism
from dphypo.train.opacus import quiet_opacus


def _mechanism(**overrides) -> DPSGDMechanism:
    fields = {"sigma": 1.0, "batch_size": 8, "epochs": 2, "n_train": 64, "n_val": 100, "score_noise": None}
    return DPSGDMechanism(**{**fields, **overrides})


def _loader(n: int, batch_size: int, seed: int = 0) -> DataLoader:
    g = torch.Generator().manual_seed(seed)
    dataset = TensorDataset(torch.randn(n, 4, generator=g), torch.randint(0, 3, (n,), generator=g))
    return DataLoader(dataset, batch_size=batch_size)


def _train(run: Run, *, epochs: int, n: int | None = None, batch_size: int | None = None) -> list[torch.Tensor]:
    """A real (tiny) DP-SGD training through ``Run.make_private``; returns the final parameters."""
    mechanism = run.mechanism
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    loader = _loader(n or mechanism.n_train, batch_size or mechanism.batch_size)
    model, optimizer, loader = run.make_private(model, optimizer, loader, max_grad_norm=1.0)
    criterion = torch.nn.CrossEntropyLoss()
    with quiet_opacus():
        for _ in range(epochs):
            for x, y in loader:
                optimizer.zero_grad()
                criterion(model(x), y).backward()
                optimizer.step()
    return [p.detach().clone() for p in model.parameters()]

