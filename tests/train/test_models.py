"""Models: Opacus-valid, right shapes, seeded initialisation that leaves the global RNG alone."""

from __future__ import annotations

import pytest
import torch
from opacus.validators import ModuleValidator

from dphypo.train.data import DATASET_INPUT_SHAPES, DATASETS
from dphypo.train.models import MODEL_INPUT_SHAPES, MODELS, default_model, make_model


def _params(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("name", MODELS)
def test_forward_shape_and_opacus_validity(name: str) -> None:
    model = make_model(name, num_classes=7)
    ModuleValidator.validate(model, strict=True)  # raises on BatchNorm or other DP-incompatible layers
    x = torch.rand(5, *MODEL_INPUT_SHAPES[name], generator=torch.Generator().manual_seed(0))
    assert model(x).shape == (5, 7)


def test_mnist_cnn_is_the_papers_cnn() -> None:
    """DP-HyPO App. E / Opacus MNIST example: 26,010 parameters; layer list as published."""
    model = make_model("mnist-cnn")
    assert sum(p.numel() for p in model.parameters()) == 26010
    convs = [m for m in model if isinstance(m, torch.nn.Conv2d)]
    assert [(c.in_channels, c.out_channels, c.kernel_size, c.stride, c.padding) for c in convs] == [
        (1, 16, (8, 8), (2, 2), (3, 3)),
        (16, 32, (4, 4), (2, 2), (0, 0)),
    ]
    assert [(m.in_features, m.out_features) for m in model if isinstance(m, torch.nn.Linear)] == [(512, 32), (32, 10)]


def test_digits_mlp_layers() -> None:
    model = make_model("digits-mlp")
    assert [type(m).__name__ for m in model] == ["Flatten", "Linear", "Tanh", "Linear"]
    assert (model[1].in_features, model[1].out_features, model[3].out_features) == (64, 64, 10)


@pytest.mark.parametrize("name", MODELS)
def test_seeded_init_is_reproducible_and_leaves_global_rng(name: str) -> None:
    state = torch.random.get_rng_state()
    a, b, c = (_params(make_model(name, seed=s)) for s in (3, 3, 4))
    assert torch.equal(state, torch.random.get_rng_state())
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(torch.equal(x, y) for x, y in zip(a, c, strict=True))


def test_default_models_fit_their_datasets() -> None:
    for dataset in DATASETS:
        assert MODEL_INPUT_SHAPES[default_model(dataset)] == DATASET_INPUT_SHAPES[dataset]
    assert default_model("mnist-subset") == "mnist-cnn"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"name": "resnet"}, "name"), ({"name": "digits-mlp", "num_classes": 1}, "num_classes"),
     ({"name": "digits-mlp", "seed": -1}, "seed")],
)
def test_invalid_arguments(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make_model(**kwargs)
    with pytest.raises(ValueError, match="dataset_name"):
        default_model("imagenet")
