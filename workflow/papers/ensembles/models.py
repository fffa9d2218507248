"""Ensemble members: G MLPs or G small CNNs trained side by side (one batched module), and the paper's width-k ResNet18.

Every model here maps a group of inputs x (G, B, ...) to logits (G, B, C), member g seeing its own
mini-batch x[g], so one training loop serves both (a ResNet is a group of one).
"""
from __future__ import annotations

import math

import torch
from torch import nn
import torch.nn.functional as F


class GroupMLP(nn.Module):
    """G independent MLPs d_in -> width (x depth, ReLU) -> d_out, stored as stacked weights (G, fan_in, fan_out).

    Member g is initialised from its own generator as sklearn's MLPClassifier does (Glorot uniform:
    weights and biases ~ U(-b, b), b = gain * sqrt(6 / (fan_in + fan_out))), so its function depends on its
    seed only and not on which other members share the group. The loss of the group is the sum of the
    members' losses, so each member's gradient, and Adam's element-wise update, are its own.
    """

    def __init__(self, generators: list[torch.Generator], d_in: int, width: int, depth: int, d_out: int,
                 gain: float = 1.0):
        super().__init__()
        dims = [d_in] + [width] * depth + [d_out]
        self.weights, self.biases = nn.ParameterList(), nn.ParameterList()
        for fan_in, fan_out in zip(dims[:-1], dims[1:]):
            bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
            w = torch.stack([torch.empty(fan_in, fan_out).uniform_(-bound, bound, generator=g) for g in generators])
            b = torch.stack([torch.empty(1, fan_out).uniform_(-bound, bound, generator=g) for g in generators])
            self.weights.append(nn.Parameter(w))  # (G, fan_in, fan_out)
            self.biases.append(nn.Parameter(b))  # (G, 1, fan_out)

    def forward(self, x: torch.Tensor, member: int | None = None) -> torch.Tensor:
        """Logits (G, B, d_out) of every member, or (1, B, d_out) of member `member` alone on x (1, B, ...)."""
        pick = (lambda t: t) if member is None else (lambda t: t[member:member + 1])
        h = x.flatten(2)  # (G, B, d_in)
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            h = torch.baddbmm(pick(b), h, pick(w))  # (G, B, fan_out)
            if i < len(self.weights) - 1:
                h = F.relu(h)
        return h  # (G, B, d_out)


def _glorot(shape, fan_in: int, fan_out: int, gain: float, generator: torch.Generator) -> torch.Tensor:
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return torch.empty(shape).uniform_(-bound, bound, generator=generator)


class GroupCNN(nn.Module):
    """G independent small CNNs on 8x8 digits, the width-k CNN family of the paper (Sec. 5) in miniature:

        conv3x3(1 -> k) - ReLU - maxpool 2 - conv3x3(k -> 2k) - ReLU - maxpool 2 - linear(2k * 2 * 2 -> C)

    The G members are one grouped convolution (groups = G: member g's channels see only its own input
    channel block) and one batched matrix product, so each member's function and gradient are its own.
    Member g's weights and biases are drawn from its own generator, Glorot-uniform
    U(-b, b), b = gain * sqrt(6 / (fan_in + fan_out)) with fan = channels x 3 x 3 for a convolution.
    """

    def __init__(self, generators: list[torch.Generator], k: int, d_out: int, gain: float = 1.0):
        super().__init__()
        self.k = k

        def glorot(shape, fan_in, fan_out):  # one draw per member, each from its own generator
            return [_glorot(shape, fan_in, fan_out, gain, g) for g in generators]

        self.w1 = nn.Parameter(torch.cat(glorot((k, 1, 3, 3), 9, 9 * k)))  # (G*k, 1, 3, 3)
        self.b1 = nn.Parameter(torch.cat(glorot((k,), 9, 9 * k)))  # (G*k,)
        self.w2 = nn.Parameter(torch.cat(glorot((2 * k, k, 3, 3), 9 * k, 18 * k)))  # (G*2k, k, 3, 3)
        self.b2 = nn.Parameter(torch.cat(glorot((2 * k,), 9 * k, 18 * k)))  # (G*2k,)
        self.w3 = nn.Parameter(torch.stack(glorot((8 * k, d_out), 8 * k, d_out)))  # (G, 8k, C)
        self.b3 = nn.Parameter(torch.stack(glorot((1, d_out), 8 * k, d_out)))  # (G, 1, C)

    def forward(self, x: torch.Tensor, member: int | None = None) -> torch.Tensor:
        """Logits (G, B, C) of every member on x (G, B, 64), or (1, B, C) of member `member` alone on x (1, B, 64)."""
        k = self.k
        w1, b1, w2, b2, w3, b3 = self.w1, self.b1, self.w2, self.b2, self.w3, self.b3
        if member is not None:  # one member's blocks of the grouped weights (a snapshot costs 1/G of the group)
            c1, c2 = slice(member * k, (member + 1) * k), slice(member * 2 * k, (member + 1) * 2 * k)
            w1, b1, w2, b2 = w1[c1], b1[c1], w2[c2], b2[c2]
            w3, b3 = w3[member:member + 1], b3[member:member + 1]
        g, b = x.shape[:2]
        # (B, G, 8, 8): member g's images in channel g; channels-last runs the grouped convolutions and the
        # poolings about a third faster on a CPU than the default layout (same numbers to float rounding)
        h = x.transpose(0, 1).reshape(b, g, 8, 8).contiguous(memory_format=torch.channels_last)
        h = F.max_pool2d(F.relu(F.conv2d(h, w1, b1, padding=1, groups=g)), 2)  # (B, G*k, 4, 4)
        h = F.max_pool2d(F.relu(F.conv2d(h, w2, b2, padding=1, groups=g)), 2)  # (B, G*2k, 2, 2)
        h = h.contiguous().reshape(b, g, 8 * k).transpose(0, 1)  # (G, B, 8k), channel-major per member
        return torch.baddbmm(b3, h, w3)  # (G, B, C)


class PreActBlock(nn.Module):
    """BN-ReLU-conv3x3-BN-ReLU-conv3x3 with an identity (or 1x1-conv) shortcut (He et al. 2016)."""

    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.bn1, self.conv1 = nn.BatchNorm2d(c_in), nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn2, self.conv2 = nn.BatchNorm2d(c_out), nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.shortcut = nn.Conv2d(c_in, c_out, 1, stride, bias=False) if stride != 1 or c_in != c_out else None

    def forward(self, x):
        h = F.relu(self.bn1(x))
        skip = self.shortcut(h) if self.shortcut is not None else x
        h = self.conv1(h)
        h = self.conv2(F.relu(self.bn2(h)))
        return h + skip


class ResNet18(nn.Module):
    """Pre-activation ResNet18 whose four stages have k, 2k, 4k, 8k channels (k = 64 is the usual ResNet18).

    The paper varies k in {10, 20, 40, 80, 160}, the width family of Nakkiran et al.'s deep double descent.
    Input (G=1, B, 3 * 32 * 32) flattened images; output (1, B, n_classes).
    """

    def __init__(self, k: int, n_classes: int):
        super().__init__()
        self.stem = nn.Conv2d(3, k, 3, 1, 1, bias=False)
        stages, c_in = [], k
        for i, c_out in enumerate([k, 2 * k, 4 * k, 8 * k]):
            stride = 1 if i == 0 else 2
            stages += [PreActBlock(c_in, c_out, stride), PreActBlock(c_out, c_out, 1)]
            c_in = c_out
        self.stages = nn.Sequential(*stages)
        self.bn = nn.BatchNorm2d(c_in)
        self.head = nn.Linear(c_in, n_classes)

    def forward(self, x: torch.Tensor, member: int | None = None) -> torch.Tensor:
        g, b = x.shape[:2]  # a group of one: `member` can only be 0
        h = self.stages(self.stem(x.reshape(g * b, 3, 32, 32)))  # (G*B, 8k, 4, 4)
        h = F.adaptive_avg_pool2d(F.relu(self.bn(h)), 1).flatten(1)  # (G*B, 8k)
        return self.head(h).reshape(g, b, -1)


def build(arch: str, generators: list[torch.Generator], *, d_in: int, width: int, depth: int, n_classes: int,
          gain: float) -> nn.Module:
    """A group model for the members whose generators are given (resnet18: exactly one member)."""
    if arch == "mlp":
        return GroupMLP(generators, d_in, width, depth, n_classes, gain)
    if arch == "cnn":
        assert d_in == 64, "the CNN takes 8x8 digits"
        return GroupCNN(generators, width, n_classes, gain)
    if arch == "resnet18":
        assert len(generators) == 1, "a ResNet group holds one member"
        with torch.random.fork_rng():  # PyTorch's default init, drawn from the member's seed
            torch.manual_seed(int(torch.randint(2**62, (1,), generator=generators[0])))
            return ResNet18(width, n_classes)
    raise ValueError(f"unknown arch {arch!r}")
