"""The networks: an MLP for the digits, and VGG-16 with batch norm for CIFAR-10 (the paper's VGG).

A SAM step evaluates the gradient twice on the same batch; batch-norm running statistics must move
only on the first pass (the official SAM.py's disable_running_stats), which :func:`frozen_bn` does.
"""
from __future__ import annotations

import contextlib

from torch import nn

VGG16 = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")


def mlp(d_in: int, hidden: tuple, n_classes: int) -> nn.Sequential:
    """x (B, d_in) -> hidden ReLU layers -> logits (B, n_classes), PyTorch's default initialisation."""
    layers, width = [nn.Flatten()], d_in
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    layers.append(nn.Linear(width, n_classes))
    return nn.Sequential(*layers)


def vgg16_bn(n_classes: int) -> nn.Sequential:
    """VGG-16 with batch norm for 32 x 32 images (B, 3, 32, 32) -> logits, the official cifar_vgg.py's layout
    and initialisation (Kaiming-normal convolutions, N(0, 0.01) linear layers)."""
    layers, channels = [], 3
    for v in VGG16:
        if v == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            layers += [nn.Conv2d(channels, v, 3, padding=1), nn.BatchNorm2d(v), nn.ReLU()]
            channels = v
    layers += [nn.Flatten(),  # (B, 512) after five poolings of 32 x 32
               nn.Linear(512, 4096), nn.ReLU(), nn.Dropout(), nn.Linear(4096, 4096), nn.ReLU(), nn.Dropout(),
               nn.Linear(4096, n_classes)]
    net = nn.Sequential(*layers)
    for m in net.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, 0.01)
            nn.init.zeros_(m.bias)
    return net


def build(name: str, input_shape: tuple, hidden: tuple, n_classes: int = 10) -> nn.Module:
    if name == "mlp":
        d_in = 1
        for s in input_shape:
            d_in *= s
        return mlp(d_in, hidden, n_classes)
    if name == "vgg16_bn":
        return vgg16_bn(n_classes)
    raise ValueError(f"sam_late.model must be mlp or vgg16_bn, got {name!r}")


@contextlib.contextmanager
def frozen_bn(model: nn.Module):
    """Batch-norm layers keep their running statistics during the block (momentum 0)."""
    saved = {}
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            saved[m] = m.momentum
            m.momentum = 0.0
    try:
        yield
    finally:
        for m, momentum in saved.items():
            m.momentum = momentum
