"""The full scale of issue 28: LLaVA-style data and benchmarks from user-given paths, the vision experts and the
LM from local Hugging Face directories (nothing downloaded), the fusions of papers.eagle.fusion and the same
training stages and arms as the synthetic study (papers.eagle.train).

**Data** (LLaVA-1.5's format, Liu et al. 2024, as Eagle's SFT data): a JSON list of records
``{"id": ..., "image": "<file under the image folder>", "conversations": [{"from": "human", "value":
"<image>\\nQuestion"}, {"from": "gpt", "value": "Answer"}, ...]}``; turns alternate human / gpt, starting with
human. The benchmark files (validation for the round-robin's choices, test for the claims) add ``"kind"``, one of
the question kinds of ``eagle.data.kinds`` (e.g. "fine" for TextVQA / OCR / document questions, "global" for
GQA-style scene questions): claim (b) compares them. Records without an image (LLaVA's text-only ShareGPT part)
are rejected (filter them out first): every arm here reads an image.

**Experts**: any Hugging Face vision model whose output is a patch sequence (CLIP, SigLIP, ViT, EVA: the hidden
state ``select_layer`` of the vision transformer, LLaVA's -2, without its class / register tokens) or a feature
map (ConvNeXt, ResNet: the last stage). The low-resolution expert is ``clip`` (its map is the query grid of the
injection and attention fusions, Sec. 2.4), ``hires`` and ``det`` the others. Each sees the image resized to its
own input size (the model config's ``image_size``, or ``eagle.llava.image_sizes``) and normalised with the
mean/std of its ``preprocessor_config.json`` (0.5 if absent). The whole tower trains where the stage unfreezes
towers (SFT and Pre-Alignment, Sec. 2.2 and 2.5).

**LM**: ``AutoModelForCausalLM`` and its tokenizer (papers.common.hf.load_causal_lm). The fusion projects into
its embedding width. Sequence, as LLaVA: ``[BOS] [v_1 .. v_N] USER: q_1 ASSISTANT: a_1 EOS USER: q_2 ...``; the
loss is the LM's own next-token cross-entropy on the answer tokens only (every other position labelled -100).

**Accuracy** of a benchmark record: every answer token is the arg-max under teacher forcing, which is exactly
"greedy decoding reproduces the reference answer" (each greedy step then sees the reference prefix).
"""
from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import numpy as np
import torch
from torch import nn

from papers.common.hf import model_dir
from papers.eagle import fusion as Fu
from papers.eagle.params import full_scale
from papers.eagle.schedule import lr_factor
from papers.eagle.arms import prealigned

log = logging.getLogger(__name__)
IMAGE_TOKEN = "<image>"
IGNORE = -100  # label of the positions without a loss (HF's ignore_index)
SPLIT_KEYS = {"train": "train_json", "val": "val_json", "test": "test_json"}


enabled = full_scale  # config eagle.llava points at data; null paths = the synthetic canvases


# ---------------------------------------------------------------------------------------------------------------
# Data


def load_records(path, image_folder, *, kinds=None) -> list[dict]:
    """The records of a LLaVA-style JSON file, checked: ``[{"id", "image" (absolute path), "turns": [[q, a], ...],
    "kind"}]``. With `kinds` (benchmark files), every record must carry a "kind" among them. Errors name the
    file and the record."""
    path, image_folder = Path(path), Path(image_folder)
    if not path.is_file():
        raise FileNotFoundError(f"eagle: LLaVA data file {path} does not exist")
    if not image_folder.is_dir():
        raise FileNotFoundError(f"eagle: image folder {image_folder} does not exist")
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"eagle: {path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from e
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"eagle: {path}: expected a non-empty JSON list of records, got {type(raw).__name__}")
    records = []
    for i, r in enumerate(raw):
        where = f"eagle: {path}, record {i}" + (f" (id {r.get('id')!r})" if isinstance(r, dict) and "id" in r else "")
        if not isinstance(r, dict):
            raise ValueError(f"{where}: a record must be a JSON object")
        if not isinstance(r.get("image"), str):
            raise ValueError(f"{where}: no 'image' file name (text-only records are not supported: filter them out)")
        image = image_folder / r["image"]
        if not image.is_file():
            raise FileNotFoundError(f"{where}: image {image} does not exist")
        conv = r.get("conversations")
        if not isinstance(conv, list) or len(conv) < 2 or len(conv) % 2:
            raise ValueError(f"{where}: 'conversations' must be a list of human / gpt turns in pairs")
        turns = []
        for t, (q, a) in enumerate(zip(conv[::2], conv[1::2])):
            for turn, who in ((q, "human"), (a, "gpt")):
                if not isinstance(turn, dict) or turn.get("from") != who or not isinstance(turn.get("value"), str):
                    raise ValueError(f"{where}: turn {2 * t + (who == 'gpt')} must be {{'from': '{who}', 'value': str}}")
            turns.append([q["value"].replace(IMAGE_TOKEN, "").strip(), a["value"].strip()])
        kind = r.get("kind")
        if kinds is not None and kind not in kinds:
            raise ValueError(f"{where}: 'kind' must be one of {list(kinds)} (benchmark records), got {kind!r}")
        records.append({"id": str(r.get("id", i)), "image": str(image), "turns": turns, "kind": kind})
    return records


def prepare(p, data) -> None:
    """Every split's records, checked, into the .npz the synthetic prepare writes (keys ``llava/<split>``, JSON
    text): a malformed record stops the workflow here, before any training."""
    lv = p.llava
    arrays = {}
    for split, key in SPLIT_KEYS.items():
        records = load_records(lv[key], lv["image_folder"], kinds=None if split == "train" else p.data["kinds"])
        arrays[f"llava/{split}"] = np.asarray(json.dumps(records))
        log.info("%s: %d records from %s", split, len(records), lv[key])
    Path(data).parent.mkdir(parents=True, exist_ok=True)
    with open(data, "wb") as f:
        np.savez(f, **arrays)


def read_records(data, split: str) -> list[dict]:
    with np.load(data) as z:
        key = f"llava/{split}"
        if key not in z:
            raise KeyError(f"eagle: {data} holds no LLaVA split {split!r} (prepared at the synthetic scale?)")
        return json.loads(str(z[key]))


def load_image(path: str, size: int, mean, std) -> torch.Tensor:
    """(3, size, size): RGB, resized (bicubic) to a square, scaled to [0, 1], normalised per channel."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            im = im.convert("RGB").resize((size, size), Image.BICUBIC)
    except (UnidentifiedImageError, OSError) as e:
        raise ValueError(f"eagle: cannot read image {path}: {e}") from e
    x = torch.as_tensor(np.asarray(im, np.float32) / 255.0).permute(2, 0, 1)
    return (x - torch.tensor(mean)[:, None, None]) / torch.tensor(std)[:, None, None]


# ---------------------------------------------------------------------------------------------------------------
# Experts and LM from local Hugging Face directories


class HFExpert(nn.Module):
    """A pretrained vision tower: images (B, 3, s, s) -> feature map (B, C, S, S).

    Attributes as papers.eagle.experts.Tower's (``kind``, ``in_size``, ``channels``, ``out_size``), found by one
    forward pass of a blank image.
    """

    def __init__(self, kind: str, path, *, image_size: int | None = None, select_layer: int = -2):
        super().__init__()
        from transformers import AutoModel

        key = f"eagle.llava.experts.{kind}"
        path = model_dir(path, key)
        model = AutoModel.from_pretrained(path, local_files_only=True)
        self.encoder = getattr(model, "vision_model", model)  # a CLIPModel / SiglipModel: its vision half
        cfg = getattr(model.config, "vision_config", model.config)
        self.kind, self.select_layer = kind, select_layer
        self.in_size = image_size or getattr(cfg, "image_size", None)
        if not isinstance(self.in_size, int):
            raise ValueError(f"{path}: its config gives no image_size; set eagle.llava.image_sizes.{kind}")
        pre = path / "preprocessor_config.json"
        stats = json.loads(pre.read_text()) if pre.is_file() else {}
        self.mean, self.std = stats.get("image_mean", [0.5] * 3), stats.get("image_std", [0.5] * 3)
        with torch.no_grad():
            probe = self(torch.zeros(1, 3, self.in_size, self.in_size))
        self.channels, self.out_size = probe.shape[1], probe.shape[-1]

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        out = self.encoder(pixel_values=pixels, output_hidden_states=True)
        if out.last_hidden_state.dim() == 4:  # a ConvNet: its last stage's map (B, C, H, W)
            return out.last_hidden_state
        h = out.hidden_states[self.select_layer]
        side = math.isqrt(h.shape[1])  # a ViT's (B, [CLS / registers +] S^2, C): drop the leading extra tokens
        return h[:, h.shape[1] - side * side:].transpose(1, 2).reshape(h.shape[0], h.shape[2], side, side)


def load_lm(path, dtype: str = "float32"):
    """The causal LM and its tokenizer from the local directory (papers.common.hf), weights in `dtype`; train mode."""
    from papers.common.hf import load_causal_lm

    model, tokenizer = load_causal_lm(path, dtype=dtype, key="eagle.llava.lm")
    return model.train(), tokenizer


class LoRALinear(nn.Module):
    """A frozen linear layer with a low-rank update (LoRA, Hu et al. 2022, Eq. 3): y = W x + (alpha / r) B A x.

    A (r, in) starts Kaiming-uniform and B (out, r) at zero, so the layer starts as the pretrained one; A and B are
    kept in float32 whatever the base weight's dtype (a bf16 LM trains its adapters in full precision). Written
    here because peft is not installed in this environment.
    """

    def __init__(self, base: nn.Linear, rank: int, alpha: float):
        super().__init__()
        self.base, self.scale = base, alpha / rank
        dev = base.weight.device
        self.lora_a = nn.Parameter(torch.empty(rank, base.in_features, device=dev, dtype=torch.float32))
        self.lora_b = nn.Parameter(torch.zeros(base.out_features, rank, device=dev, dtype=torch.float32))
        nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        update = (x.to(self.lora_a.dtype) @ self.lora_a.T) @ self.lora_b.T  # (..., out)
        return self.base(x) + (self.scale * update).to(x.dtype)


# The attention projections of LLaMA-style LMs (Vicuna), where LoRA's paper puts its adapters.
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")


def add_lora(lm: nn.Module, rank: int, alpha: float, targets=LORA_TARGETS) -> int:
    """Wrap every linear layer of `lm` named in `targets` in a :class:`LoRALinear`; returns how many."""
    found = [(parent, name, child) for parent in lm.modules() for name, child in parent.named_children()
             if name in targets and isinstance(child, nn.Linear)]
    for parent, name, child in found:
        setattr(parent, name, LoRALinear(child, rank, alpha))
    if not found:
        raise ValueError(f"eagle.llava.lora: no linear layer named {', '.join(targets)} in the LM")
    return len(found)


def static_memory_gb(model: nn.Module) -> float:
    """Weights, gradients and Adam's two moments of `model` in GB: every parameter's own bytes, plus 3 x 4 bytes
    (float32 gradient-sized moments and gradient) for each trainable one. A lower bound of one GPU's memory: the
    activations come on top (they scale with batch x sequence length)."""
    total = 0
    for q in model.parameters():
        total += q.numel() * q.element_size()
        if q.requires_grad:
            total += q.numel() * (q.element_size() + 8)
    return total / 1e9


# ---------------------------------------------------------------------------------------------------------------
# Text, the multimodal model, loss and accuracy


def encode(record: dict, tokenizer, max_tokens: int) -> tuple[list[int], list[int]]:
    """Token ids and labels of ``[BOS] USER: q ASSISTANT: a EOS ...`` (the image tokens go after BOS): labels are
    the ids on the answers and their EOS, IGNORE elsewhere; cut to `max_tokens`."""
    ids, labels = [], []
    if tokenizer.bos_token_id is not None:
        ids, labels = [tokenizer.bos_token_id], [IGNORE]
    for q, a in record["turns"]:
        prompt = tokenizer(f"USER: {q} ASSISTANT:", add_special_tokens=False).input_ids
        answer = tokenizer(f" {a}", add_special_tokens=False).input_ids
        if tokenizer.eos_token_id is not None:
            answer = answer + [tokenizer.eos_token_id]
        ids += prompt + answer
        labels += [IGNORE] * len(prompt) + answer
    return ids[:max_tokens], labels[:max_tokens]


def collate(records: list[dict], tokenizer, max_tokens: int) -> dict:
    """Right-padded ids (B, T), labels (B, T) and attention mask (B, T)."""
    enc = [encode(r, tokenizer, max_tokens) for r in records]
    T = max(len(i) for i, _ in enc)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = torch.full((len(enc), T), pad, dtype=torch.long)
    labels = torch.full((len(enc), T), IGNORE, dtype=torch.long)
    mask = torch.zeros(len(enc), T, dtype=torch.long)
    for b, (i, l) in enumerate(enc):
        ids[b, :len(i)], labels[b, :len(l)], mask[b, :len(i)] = torch.tensor(i), torch.tensor(l), 1
    return {"ids": ids, "labels": labels, "mask": mask, "bos": int(tokenizer.bos_token_id is not None)}


class HFMLLM(nn.Module):
    """Experts (each fed the image or, for a control, Gaussian noise), a fusion, a Hugging Face causal LM."""

    def __init__(self, towers: list[HFExpert], inputs: list[str], fusion: nn.Module, lm):
        super().__init__()
        self.towers, self.inputs, self.fusion, self.lm = nn.ModuleList(towers), list(inputs), fusion, lm

    def visual_tokens(self, images: list[str]) -> torch.Tensor:
        """(B, N, d) from the image files (or noise, per expert)."""
        maps = []
        for tower, source in zip(self.towers, self.inputs):
            s = tower.in_size
            if source == "noise":
                pixels = torch.randn(len(images), 3, s, s)
            elif source == "constant":  # claim b's CLIP-blind ablation (a constant map): synthetic scale only so far
                raise NotImplementedError("eagle: input 'constant' (group blind_clip) is not implemented at the full "
                                          "scale; set eagle.arm_seeds.blind_clip to 0 there")
            else:
                pixels = torch.stack([load_image(f, s, tower.mean, tower.std) for f in images])
            maps.append(tower(pixels.to(self.device)))
        return self.fusion(maps)

    @property
    def device(self):
        return next(self.lm.parameters()).device

    def forward(self, images: list[str], batch: dict):
        """The LM's output (``.loss``: mean cross-entropy over answer tokens; ``.logits`` (B, N + T, V)) on
        ``[BOS] visual tokens text``; the visual positions carry label IGNORE and attention mask 1."""
        v = self.visual_tokens(images)  # (B, N, d)
        dev, k = v.device, batch["bos"]
        emb = self.lm.get_input_embeddings()(batch["ids"].to(dev))  # (B, T, d)
        embeds = torch.cat([emb[:, :k], v.to(emb.dtype), emb[:, k:]], dim=1)
        B, N = v.shape[:2]
        mask, labels = batch["mask"].to(dev), batch["labels"].to(dev)
        mask = torch.cat([mask[:, :k], mask.new_ones(B, N), mask[:, k:]], dim=1)
        labels = torch.cat([labels[:, :k], labels.new_full((B, N), IGNORE), labels[:, k:]], dim=1)
        return self.lm(inputs_embeds=embeds, attention_mask=mask, labels=labels), labels


def record_correct(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """(B,) bool: every labelled token is the arg-max of the logits one position earlier (greedy decoding
    reproduces every answer)."""
    pred, target = logits[:, :-1].argmax(-1), labels[:, 1:]
    return ((pred == target) | (target == IGNORE)).all(dim=1)


# ---------------------------------------------------------------------------------------------------------------
# Training: the stages of papers.eagle.train with Hugging Face towers (all their layers train where unfrozen)


def fit(model: HFMLLM, records: list[dict], tokenizer, *, steps: int, batch: int, lr: float, max_tokens: int,
        rng: np.random.Generator, shuffle_images: bool = False, schedule: str = "constant",
        warmup: float = 0.0) -> float:
    """`steps` Adam steps on the answers' cross-entropy, over the parameters that require grad, the learning rate
    `lr` times papers.eagle.train.lr_factor (`schedule`, `warmup`); the last loss."""
    params = [q for q in model.parameters() if q.requires_grad]
    opt = torch.optim.Adam(params, lr=lr)
    loss = torch.tensor(float("nan"))
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr * lr_factor(step, steps, schedule, warmup)
        i = rng.integers(0, len(records), batch)
        j = rng.integers(0, len(records), batch) if shuffle_images else i  # control: another record's image
        out, _ = model([records[k]["image"] for k in j], collate([records[k] for k in i], tokenizer, max_tokens))
        loss = out.loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return loss.item()


@torch.no_grad()
def accuracy(model: HFMLLM, records: list[dict], tokenizer, max_tokens: int, chunk: int = 16) -> dict[str, float]:
    """Share of records answered exactly (greedy), per kind and overall."""
    model.eval()
    right = []
    for s in range(0, len(records), chunk):
        part = records[s:s + chunk]
        out, labels = model([r["image"] for r in part], collate(part, tokenizer, max_tokens))
        right += record_correct(out.logits, labels).tolist()
    model.train()
    right, kinds = np.asarray(right), np.asarray([r["kind"] for r in records])
    out = {k: float(right[kinds == k].mean()) for k in dict.fromkeys(kinds)}
    out["all"] = float(right.mean())
    return out


def set_trainable(model: HFMLLM, towers: bool, fusion: bool, lm: bool) -> None:
    """Which parts train; an LM with LoRA adapters trains only them (its pretrained weights stay frozen)."""
    for part, flag in ((model.towers, towers), (model.fusion, fusion), (model.lm, lm)):
        for q in part.parameters():
            q.requires_grad_(flag)
    adapters = [m for m in model.lm.modules() if isinstance(m, LoRALinear)]
    if lm and adapters:
        for q in model.lm.parameters():
            q.requires_grad_(False)
        for m in adapters:
            m.lora_a.requires_grad_(True)
            m.lora_b.requires_grad_(True)


def build(arm: dict, p, device) -> tuple[HFMLLM, object]:
    """Fresh pretrained towers and LM from their directories (the LM in eagle.llava.lm_dtype, with LoRA adapters
    when eagle.llava.lora.rank > 0), and a new fusion at the concat's parameter budget (as papers.eagle.train.build).
    Mini-Gemini's regions tile any high-res map at least as fine as the grid (papers.eagle.fusion.region_mask)."""
    lv = p.llava
    towers = [HFExpert(e, lv["experts"][e], image_size=lv["image_sizes"].get(e), select_layer=lv["select_layer"])
              for e in arm["experts"]]
    lm, tokenizer = load_lm(lv["lm"], lv["lm_dtype"])
    if lv["lora"]["rank"] > 0:
        add_lora(lm, lv["lora"]["rank"], lv["lora"]["alpha"])
    d, grid = lm.get_input_embeddings().embedding_dim, p.fusion["grid"]
    channels, sizes = [t.channels for t in towers], [t.out_size for t in towers]
    if min(sizes) < 1 or (arm["fusion"] == "mini_gemini" and max(sizes[1:]) < grid):
        raise ValueError(f"eagle.fusion.grid ({grid}) exceeds the high-resolution map side {max(sizes[1:])} "
                         "(Mini-Gemini's regions)")
    fusion = Fu.matched(arm["fusion"], channels, sizes, d, p.fusion)
    return HFMLLM(towers, arm["inputs"], fusion, lm).to(device), tokenizer


def run_arm(arm: dict, splits: dict, p, rng: np.random.Generator, device="cpu") -> list[dict]:
    """One arm through Pre-Alignment (if asked), stage 1 and stage 2; rows as papers.eagle.train.run_arm's."""
    model, tok = build(arm, p, device)
    t, n = p.train, p.llava["max_text_tokens"]
    for i in prealigned(arm):
        tower = model.towers[i]
        solo = HFMLLM([tower], ["image"], Fu.matched("concat", [tower.channels], [tower.out_size],
                                                     model.lm.get_input_embeddings().embedding_dim, p.fusion).to(device),
                      model.lm)
        set_trainable(solo, towers=True, fusion=True, lm=False)  # the expert and its own projector; LM frozen
        fit(solo, splits["train"], tok, steps=t["prealign_steps"], batch=t["batch"], lr=t["align_lr"],
            max_tokens=n, rng=rng, shuffle_images=arm["prealign"] == "shuffled")
    set_trainable(model, towers=False, fusion=True, lm=False)  # stage 1: the projector alone
    fit(model, splits["train"], tok, steps=t["align_steps"], batch=t["batch"], lr=t["align_lr"], max_tokens=n, rng=rng)
    set_trainable(model, towers=True, fusion=True, lm=True)  # stage 2: SFT
    memory = static_memory_gb(model)
    log.info("%s: weights, gradients and Adam state of SFT %.1f GB (activations on top)", arm["name"], memory)
    loss = fit(model, splits["train"], tok, steps=t["sft_steps"], batch=t["batch"], lr=t["sft_lr"], max_tokens=n, rng=rng,
               schedule=t["sft_schedule"], warmup=t["warmup_ratio"])
    rows = []
    for split in ("val", "test"):
        for kind, acc in accuracy(model, splits[split], tok, n).items():
            rows.append({"arm": arm["name"], "split": split, "kind": kind, "accuracy": acc,
                         "visual_tokens": model.fusion.n_tokens, "fusion_params": Fu.n_params(model.fusion),
                         "experts": "+".join(arm["experts"]), "final_loss": loss, "late_gain": float("nan"),
                         "static_memory_gb": memory})
    log.info("%s: val %.3f test %.3f", arm["name"], *(r["accuracy"] for r in rows if r["kind"] == "all"))
    return rows


def describe(p) -> dict:
    """Each expert's map (channels, side, input size, parameters) and the LM's width and parameters: loads every
    model once, so that a wrong directory stops the pretrain job, before the long training jobs."""
    lv = p.llava
    out = {"experts": {}, "lm": str(lv["lm"])}
    for e in p.experts["names"]:
        t = HFExpert(e, lv["experts"][e], image_size=lv["image_sizes"].get(e), select_layer=lv["select_layer"])
        out["experts"][e] = {"path": str(lv["experts"][e]), "channels": t.channels, "side": t.out_size,
                             "input": t.in_size, "parameters": sum(q.numel() for q in t.parameters())}
    lm, _ = load_lm(lv["lm"], lv["lm_dtype"])
    out["lm_width"] = lm.get_input_embeddings().embedding_dim
    out["lm_parameters"] = sum(q.numel() for q in lm.parameters())
    return out
