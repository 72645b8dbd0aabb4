"""A stand-in objective's private training: what every run of a DP-SGD mechanism must do before it scores.

A run that returns a score without training through ``run.make_private`` is refused (its model would be released
under an ε it never paid), so tests whose objective only exercises the accounting train a tiny model for one
private step first.
"""

from __future__ import annotations

import torch
from torch import nn


def train_privately(run, *, clip: float = 1.0, steps: int = 1) -> nn.Module:
    """``steps`` DP-SGD steps of a 3-feature linear model through ``run.make_private`` (loader sized to the run)."""
    mechanism = run.mechanism
    model = nn.Linear(3, 2)
    data = torch.utils.data.TensorDataset(torch.randn(mechanism.n_train, 3), torch.randint(0, 2, (mechanism.n_train,)))
    loader = torch.utils.data.DataLoader(data, batch_size=mechanism.batch_size)
    wrapped, optimizer, loader = run.make_private(model, torch.optim.SGD(model.parameters(), lr=0.1), loader,
                                                  max_grad_norm=clip)
    for step, (x, y) in enumerate(loader):
        if step == steps:
            break
        optimizer.zero_grad()
        nn.functional.cross_entropy(wrapped(x), y).backward()
        optimizer.step()
    return model
