"""The reference network of the MNIST tutorials: 784-512-256-128-64-10, ReLU, cross-entropy,
SGD(lr=0.1, momentum=0.5). torch is imported when called, not when this module is imported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

LAYER_SIZES = (784, 512, 256, 128, 64, 10)
LEARNING_RATE = 0.1
MOMENTUM = 0.5


def build_model(device: torch.device | str = "cpu", seed: int = 0) -> torch.nn.Module:
    """The fully connected network, initialised from ``seed``, on ``device``."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    layers: list[Any] = [nn.Flatten()]
    for i, (n_in, n_out) in enumerate(zip(LAYER_SIZES, LAYER_SIZES[1:])):
        layers.append(nn.Linear(n_in, n_out))
        if i < len(LAYER_SIZES) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers).to(device)


def build_optimizer(model: torch.nn.Module) -> torch.optim.Optimizer:
    import torch

    return torch.optim.SGD(model.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM)


def loss_function() -> Any:
    from torch import nn

    return nn.CrossEntropyLoss()
