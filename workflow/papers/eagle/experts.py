"""The vision experts (Sec. 2.3 of the paper, Vision experts) and the objective each is pretrained on before the study.

Each expert is a small ConvNet that sees the canvas at its own resolution and returns a feature map
(B, C, S, S), as the paper's towers return their patch grids:

* ``clip``  -- low resolution (the canvas average-pooled to 8 x 8), map 4 x 4; pretrained CLIP-style
  (Radford et al. 2021, the pseudocode of Fig. 3): a symmetric InfoNCE loss between the pooled image embedding and a
  caption embedding ("<big digit> <marks count>"), temperature tau.
* ``hires`` -- full resolution 32 x 32, a ViT-style 4 x 4 patch embedding, map 8 x 8; pretrained to *read* the small digit (the text-reading
  experts of the paper: Pix2Struct, OCR-trained encoders), cross-entropy on the pooled map.
* ``det``   -- 16 x 16, map 8 x 8; pretrained for localisation (the paper's detection expert, EVA-02 on
  COCO): per-cell occupancy of marks and of the small digit, binary cross-entropy on a 1 x 1 conv head.

An expert fed noise instead of the canvas (the negative controls) is the same module with another input.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from papers.eagle.data import DIGIT_WORDS, SIZE

# in_size: the side of the canvas the tower sees; (kernel, stride) of its three convolutions. The high-res
# expert starts with a 4 x 4 patch embedding (kernel = stride = 4, as a ViT's), the others with 3 x 3 convolutions.
# Every tower's last convolution (the layer SFT and Pre-Alignment train) is 3 x 3, so that the trained layer mixes
# neighbouring cells. The high-res expert's was 1 x 1 until issue 52's sixth round: its frozen layers see 12 x 12
# pixels, the big digit spans 16 x 16, and with a 1 x 1 trained layer the expert alone learned the big digit late or
# not at all within SFT on 3 of 7 seeds (pilots on those three, seeds 8, 9 and 11, with the 3 x 3 layer: each
# learned it before the last quarter of SFT; the seeds that decide claim b are a fresh block, config
# eagle.seed_offset). It does not make the expert learn the big digit on every seed: claim b's admission rule
# (papers.eagle.report.admission_failures) leaves out the seeds where it does not, and the report lists them.
ARCH = {"clip": (8, ((3, 1), (3, 2), (3, 1))), "hires": (32, ((4, 4), (3, 1), (3, 1))),
        "det": (16, ((3, 1), (3, 2), (3, 1))), "noise": (16, ((3, 1), (3, 2), (3, 1)))}


class Tower(nn.Module):
    """Three convolutions with GELU between: pooled canvas (B, 1, s, s) -> feature map (B, C, S, S)."""

    def __init__(self, kind: str, channels: int, width: int = 32):
        super().__init__()
        self.kind = kind
        self.in_size, layers = ARCH[kind]
        self.out_size = self.in_size // int(np.prod([s for _, s in layers]))
        self.channels = channels
        c_in = [1, width, width]
        c_out = [width, width, channels]
        self.convs = nn.ModuleList(nn.Conv2d(a, b, k, stride=s, padding=(k - 1) // 2 if k % 2 else 0)
                                   for a, b, (k, s) in zip(c_in, c_out, layers))

    def view(self, canvas: torch.Tensor) -> torch.Tensor:
        """The canvas (B, 32, 32) as this tower sees it: average-pooled to (B, 1, in_size, in_size)."""
        return F.avg_pool2d(canvas[:, None], SIZE // self.in_size)

    def trunk(self, x: torch.Tensor) -> torch.Tensor:
        """The lower layers, frozen after pretraining: x (B, 1, in_size, in_size) -> the GELU activations
        before the last convolution (B, width, out_size, out_size)."""
        for conv in self.convs[:-1]:
            x = F.gelu(conv(x))
        return x

    def top(self, h: torch.Tensor) -> torch.Tensor:
        """The last convolution, the layer that Pre-Alignment and SFT unfreeze, then a LayerNorm over channels
        without affine weights (as a ViT tower's output is layer-normed, so that no expert's features dwarf
        another's in the concatenation): (B, width, S, S) -> (B, C, S, S)."""
        x = self.convs[-1](h)
        return F.layer_norm(x.transpose(1, -1), (x.shape[1],)).transpose(1, -1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, 1, in_size, in_size) -> (B, C, out_size, out_size)."""
        return self.top(self.trunk(x))


def _batches(n: int, steps: int, batch: int, rng: np.random.Generator):
    for _ in range(steps):
        yield torch.as_tensor(rng.integers(0, n, batch))


def clip_loss(img: torch.Tensor, txt: torch.Tensor, temperature: float) -> torch.Tensor:
    """Symmetric InfoNCE: (CE(logits, I) + CE(logits^T, I)) / 2, logits = norm(img) norm(txt)^T / tau."""
    img, txt = F.normalize(img, dim=-1), F.normalize(txt, dim=-1)
    logits = img @ txt.T / temperature  # (B, B)
    target = torch.arange(len(img))
    return (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)) / 2


def pretrain(tower: Tower, scene: dict, *, steps: int, batch: int, lr: float, temperature: float,
             rng: np.random.Generator) -> list[float]:
    """Train `tower` on its own objective over the training canvases; returns the loss curve."""
    canvas = torch.as_tensor(scene["canvas"])
    C = tower.channels
    if tower.kind == "clip":
        # Caption "<big digit word> <count word>": a bag of two word embeddings; an image and a text head.
        words = torch.stack([torch.as_tensor(scene["big"]), len(DIGIT_WORDS) + torch.as_tensor(scene["marks"])], 1)
        text = nn.EmbeddingBag(2 * len(DIGIT_WORDS), 32, mode="mean")
        heads = nn.ModuleList([nn.Linear(C, 32), text])

        def loss_fn(i):
            img = heads[0](tower(tower.view(canvas[i])).mean((2, 3)))
            return clip_loss(img, heads[1](words[i]), temperature)
    elif tower.kind == "hires":
        small = torch.as_tensor(scene["small"])
        heads = nn.ModuleList([nn.Linear(C, len(DIGIT_WORDS))])

        def loss_fn(i):
            return F.cross_entropy(heads[0](tower(tower.view(canvas[i])).amax((2, 3))), small[i])
    elif tower.kind == "det":
        occupancy = torch.as_tensor(scene["occupancy"])  # (N, 2, 8, 8)
        heads = nn.ModuleList([nn.Conv2d(C, 2, 1)])

        def loss_fn(i):
            return F.binary_cross_entropy_with_logits(heads[0](tower(tower.view(canvas[i]))), occupancy[i])
    else:
        raise ValueError(f"eagle: no pretraining objective for expert kind {tower.kind!r}")
    opt = torch.optim.Adam([*tower.parameters(), *heads.parameters()], lr=lr)
    curve = []
    for i in _batches(len(canvas), steps, batch, rng):
        loss = loss_fn(i)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        curve.append(loss.item())
    return curve
