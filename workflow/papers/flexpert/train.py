"""Training loops: the masked LM, the flexibility predictors and the designers (one function each)."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from papers.flexpert import model as M
from papers.flexpert.data import AMINO_ACIDS
from papers.flexpert.enm import zscore

_INDEX = {a: i for i, a in enumerate(AMINO_ACIDS)}
# Every network and batch lives on the GPU when there is one (the full scale); the random draws stay on CPU
# generators, so a seed draws the same batches on either device.
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def tokens_of(seq: str) -> np.ndarray:
    return np.array([_INDEX[a] for a in seq], dtype=np.int64)


def batch(chains: list[dict], keys=("target", "anm")) -> dict:
    """Pad a list of chain dicts into tensors: tokens (B, L), pad (B, L) True at padding, ca (B, L, 3), and
    each of `keys` present (B, L)."""
    L = max(len(c["sequence"]) for c in chains)
    B = len(chains)
    out = {"tokens": torch.full((B, L), M.PAD, dtype=torch.long), "pad": torch.ones(B, L, dtype=torch.bool),
           "ca": torch.zeros(B, L, 3)}
    for key in keys:
        if any(key in c for c in chains):
            out[key] = torch.zeros(B, L)
    for i, c in enumerate(chains):
        n = len(c["sequence"])
        out["tokens"][i, :n] = torch.from_numpy(tokens_of(c["sequence"]))
        out["pad"][i, :n] = False
        out["ca"][i, :n] = torch.as_tensor(c["coords"] - c["coords"].mean(0), dtype=torch.float32)
        for key in keys:
            if key in c:
                out[key][i, :n] = torch.as_tensor(c[key], dtype=torch.float32)
    return {k: v.to(DEVICE) for k, v in out.items()}


PER_RESIDUE = ("coords", "target", "anm", "target_flex")


def crop(chains: list[dict], size: int, g: torch.Generator) -> list[dict]:
    """A random window of at most `size` residues of each chain (training only: the per-protein z-scores were
    taken over the whole chain; a window keeps the step's cost independent of the longest protein)."""
    out = []
    for c in chains:
        n = len(c["sequence"])
        s = int(torch.randint(n - size + 1, (1,), generator=g)) if n > size else 0
        out.append({**c, "sequence": c["sequence"][s:s + size],
                    **{k: c[k][s:s + size] for k in PER_RESIDUE if k in c}})
    return out


# ---- the masked language model -----------------------------------------------------------------------
def pretrain_lm(sequences: list[str], lm: dict, seed: int) -> M.ProteinLM:
    """BERT-style masked-residue pretraining: `mask_prob` of the residues replaced by <mask>, cross-entropy on them."""
    g = torch.Generator().manual_seed(seed)
    net = M.ProteinLM(lm["d_model"], lm["layers"], lm["heads"]).to(DEVICE)
    opt = torch.optim.AdamW(net.parameters(), lr=lm["lr"], weight_decay=0.01)
    for step in range(lm["steps"]):
        idx = torch.randint(len(sequences), (lm["batch"],), generator=g).tolist()
        b = batch([{"sequence": sequences[i], "coords": np.zeros((len(sequences[i]), 3))} for i in idx], keys=())
        masked = (torch.rand(b["tokens"].shape, generator=g).to(DEVICE) < lm["mask_prob"]) & ~b["pad"]
        logits = net(b["tokens"].masked_fill(masked, M.MASK), b["pad"])
        loss = F.cross_entropy(logits[masked], b["tokens"][masked])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return net


# ---- Flexpert-Seq / Flexpert-3D -----------------------------------------------------------------------
def make_predictor(lm_state: dict, lm: dict, pr: dict, three_d: bool) -> M.FlexPredictor:
    net_lm = M.ProteinLM(lm["d_model"], lm["layers"], lm["heads"])
    net_lm.load_state_dict(lm_state)
    adaptor = M.ConvAdaptor(pr["conv_channels"], pr["conv_layers"], pr["kernel_size"]) if three_d else None
    return M.FlexPredictor(net_lm, pr["dropout"], adaptor).to(DEVICE)


def train_predictor(chains: list[dict], lm_state: dict, lm: dict, pr: dict, three_d: bool, seed: int) -> M.FlexPredictor:
    """Fine-tune the whole small LM and the head with the masked MSE on the per-protein z-scored target
    (official: LoRA on ProtT5 with MSE on RMSF; our LM is small enough to fine-tune in full)."""
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    net = make_predictor(lm_state, lm, pr, three_d)
    opt = torch.optim.AdamW(net.parameters(), lr=pr["lr"], weight_decay=0.01)
    net.train()
    for step in range(pr["steps"]):
        idx = torch.randint(len(chains), (pr["batch"],), generator=g).tolist()
        b = batch(crop([chains[i] for i in idx], pr["crop"], g))
        loss = M.masked_mse(net(b["tokens"], b["pad"], b.get("anm")), b["target"], b["pad"])
        opt.zero_grad()
        loss.backward()
        opt.step()
    net.eval()
    return net


@torch.no_grad()
def predict(net: M.FlexPredictor, chains: list[dict], size: int = 16) -> list[np.ndarray]:
    out = []
    for i in range(0, len(chains), size):
        b = batch(chains[i:i + size])
        pred = net(b["tokens"], b["pad"], b.get("anm"))
        out += [pred[j, :len(c["sequence"])].cpu().numpy().copy() for j, c in enumerate(chains[i:i + size])]
    return out


# ---- the designers ------------------------------------------------------------------------------------
def recovery(logits: torch.Tensor, tokens: torch.Tensor, pad: torch.Tensor) -> float:
    keep = ~pad
    return float(((logits.argmax(-1) == tokens) & keep).sum() / keep.sum())


def pretrain_designer(chains: list[dict], ds: dict, seed: int) -> M.Designer:
    """The inverse-folding model trained with sequence cross-entropy alone, no instruction (vanilla ProteinMPNN's role)."""
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    net = M.Designer(ds["d_model"], ds["layers"], ds["heads"], ds["k"]).to(DEVICE)
    opt = torch.optim.AdamW(net.parameters(), lr=ds["lr"], weight_decay=0.01)
    for step in range(ds["pretrain_steps"]):
        idx = torch.randint(len(chains), (ds["batch"],), generator=g).tolist()
        b = batch(crop([chains[i] for i in idx], ds["crop"], g))
        logits = net(b["ca"], b["pad"])
        loss = F.cross_entropy(logits[~b["pad"]], b["tokens"][~b["pad"]])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return net


def finetune_designer(net: M.Designer, chains: list[dict], ds: dict, seed: int, flex_weight: float,
                      instructed: bool, flex_model: M.FlexPredictor) -> tuple[M.Designer, float]:
    """Flexpert-Design fine-tuning (Sec. 5, Eq. of L = (1 - w) L_CE + w L_Flex; the official README trains with
    flex_loss_coeff 0.8 and no gradient normalisation, i.e. this weighted sum):

    .. math::
        L_{Flex} = \\frac{1}{|M|} \\sum_{i \\in M} \\big(\\mathrm{F3D}(\\mathrm{ST\\text{-}Gumbel}(\\ell), \\mathrm{ANM})_i - f_i\\big)^2

    with f the instruction (the frozen Flexpert-3D `flex_model`'s prediction for the native sequence,
    ``target_flex``), fed to the designer when `instructed`. `flex_weight` 0 gives the CE-only arms (unsteered: not
    instructed; zero_weight: instructed).

    Returns the designer and its training L_Flex: the mean over the last quarter of the steps of the Flexpert loss
    on the step's Gumbel sample, computed for every arm (without gradient where w = 0), so that the steered arm can be
    shown to have optimised it (below the zero-weight arm's, claim c's premise). Every arm draws the same batches and
    Gumbel noise from the seed, so the arms' values are paired."""
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(net.parameters(), lr=ds["finetune_lr"], weight_decay=0.01)
    for q in flex_model.parameters():
        q.requires_grad_(False)
    steps = ds["finetune_steps"]
    tail = []  # L_Flex of the last quarter of the steps
    for step in range(steps):
        idx = torch.randint(len(chains), (ds["batch"],), generator=g).tolist()
        b = batch(crop([chains[i] for i in idx], ds["crop"], g), keys=("anm", "target_flex"))
        logits = net(b["ca"], b["pad"], b["target_flex"] if instructed else None)
        loss = F.cross_entropy(logits[~b["pad"]], b["tokens"][~b["pad"]])
        onehot = M.straight_through_gumbel(logits if flex_weight > 0 else logits.detach(), ds["gumbel_tau"], g)
        with torch.set_grad_enabled(flex_weight > 0):
            flex_loss = M.masked_mse(flex_model(None, b["pad"], b["anm"], onehot=onehot), b["target_flex"], b["pad"])
        if flex_weight > 0:
            loss = (1 - flex_weight) * loss + flex_weight * flex_loss
        if step >= steps - max(1, steps // 4):
            tail.append(float(flex_loss.detach()))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return net, float(np.mean(tail)) if tail else float("nan")


@torch.no_grad()
def design(net: M.Designer, chains: list[dict], flex: list[np.ndarray] | None, size: int = 16) -> list[str]:
    """Argmax sequences (B, L) -> strings, with the instruction profiles `flex` (or none)."""
    out = []
    for i in range(0, len(chains), size):
        part = chains[i:i + size]
        if flex is not None:
            part = [dict(c, instruction=f) for c, f in zip(part, flex[i:i + size])]
        b = batch(part, keys=("instruction",))
        logits = net(b["ca"], b["pad"], b["instruction"] if flex is not None else None)
        out += ["".join(AMINO_ACIDS[t] for t in logits[j, :len(c["sequence"])].argmax(-1).tolist())
                for j, c in enumerate(part)]
    return out


def normalised_anm(chain: dict) -> np.ndarray:
    return zscore(chain["anm"])
