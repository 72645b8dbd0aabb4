"""The GP model's constants are BoTorch's default SingleTaskGP, checked once against the installed BoTorch."""

from __future__ import annotations

import gpytorch
import numpy as np
import pytest
import torch
from botorch.models import SingleTaskGP
from botorch.models.transforms.outcome import Standardize
from botorch.optim.utils import get_parameters_and_bounds
from gpytorch.kernels import RBFKernel
from gpytorch.likelihoods import GaussianLikelihood
from gpytorch.likelihoods.noise_models import HomoskedasticNoise
from gpytorch.means import ConstantMean
from gpytorch.mlls import ExactMarginalLogLikelihood
from gpytorch.priors import LogNormalPrior

from dphypo.strategies.gp.model import (
    LENGTHSCALE_LOWER_BOUND,
    MIN_SCORE_STD,
    NOISE_LOWER_BOUND,
    bounds,
    initial_hyper,
    lengthscale_prior,
    noise_prior,
    standardize,
)


def _botorch_model(dim: int, k: int = 6) -> SingleTaskGP:
    generator = torch.Generator().manual_seed(dim)
    x = torch.rand(k, dim, dtype=torch.float64, generator=generator)
    y = torch.rand(k, 1, dtype=torch.float64, generator=generator)
    return SingleTaskGP(x, y, outcome_transform=Standardize(m=1))


@pytest.mark.parametrize("dim", [1, 2, 4])
def test_the_constants_are_botorchs_default_single_task_gp(dim: int) -> None:
    model = _botorch_model(dim)
    covar, likelihood = model.covar_module, model.likelihood
    # The structure the closed-form loss and posterior assume.
    assert isinstance(covar, RBFKernel) and covar.active_dims is None
    assert isinstance(model.mean_module, ConstantMean)
    assert isinstance(likelihood, GaussianLikelihood) and isinstance(likelihood.noise_covar, HomoskedasticNoise)
    assert not likelihood.noise_covar.raw_noise_constraint.enforced  # the raw parameter is the noise itself
    assert not covar.raw_lengthscale_constraint.enforced
    priors = {name: prior for name, _, prior, _, _ in gpytorch.Module.named_priors(model)}
    assert set(priors) == {"likelihood.noise_covar.noise_prior", "covar_module.lengthscale_prior"}
    for name, ours in (("likelihood.noise_covar.noise_prior", noise_prior()),
                       ("covar_module.lengthscale_prior", lengthscale_prior(dim))):
        theirs = priors[name]
        assert isinstance(theirs, LogNormalPrior)
        assert torch.equal(theirs.loc, ours.loc) and torch.equal(theirs.scale, ours.scale)  # float32, bit for bit
    parameters, limits = get_parameters_and_bounds(ExactMarginalLogLikelihood(likelihood, model))
    trainable = {name: p for name, p in parameters.items() if p.requires_grad}
    assert tuple(trainable) == ("likelihood.noise_covar.raw_noise", "model.mean_module.raw_constant",
                                "model.covar_module.raw_lengthscale")
    start = np.concatenate([p.detach().reshape(-1).numpy() for p in trainable.values()])
    np.testing.assert_array_equal(start, initial_hyper(dim))
    box = bounds(dim)
    assert float(limits["likelihood.noise_covar.raw_noise"][0]) == NOISE_LOWER_BOUND == box[0, 0]
    assert float(limits["model.covar_module.raw_lengthscale"][0]) == LENGTHSCALE_LOWER_BOUND == box[2, 0]
    assert np.isinf(box[1]).all() and np.isinf(box[:, 1]).all()
    assert model.outcome_transform._min_stdv == MIN_SCORE_STD


def test_standardize_is_botorchs_standardize() -> None:
    scores = torch.tensor([[0.1, 0.4, 0.35, 0.9], [2.0, 2.0, 2.0, 2.0]], dtype=torch.float64)
    ours, loc, scale = standardize(scores)
    for b in range(2):
        transform = Standardize(m=1)
        theirs, _ = transform(scores[b].unsqueeze(-1))
        assert torch.equal(ours[b], theirs[:, 0])
        assert torch.equal(loc[b], transform.means.reshape(())) and torch.equal(scale[b], transform.stdvs.reshape(()))
    assert scale[1] == 1.0  # all equal: BoTorch stops scaling below min_stdv
