"""The two kinds of language model that request-patching runs on, behind one small interface.

* :class:`WordLM`: our tiny GPT (papers.orion.model) with its word-level vocabulary, the default and smoke scales.
* :class:`PretrainedLM`: a pretrained causal LM from a local Hugging Face directory (GPT-2, Pythia/GPT-NeoX,
  Llama, Falcon, ...), the paper's setting (section 3: 18 models, 125M-70B), for the full scale. Nothing is
  downloaded: the user points `orion.pretrained[].path` at a directory that holds the weights and tokenizer.

Both expose the residual stream at the last token of each prompt at layers 0 .. n_layer, where layer 0 is the
input of the first block (embeddings, plus learned positions where the model has them) and layer l >= 1 is the
output of block l, the stream the official code patches (causal_checker/hf_hooks.py writes the output of a
block at the last token). Prompts are lists of words; a pretrained LM reads them joined by spaces, and an answer
is the first token of " " + answer (the official code scores the first token of the answer as well).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from papers.common.hf import load_causal_lm
from papers.orion.model import GPT, last_logits, patched_logits, residuals, streams


@dataclasses.dataclass
class Batch:
    """Right-padded token ids (B, T), their attention mask (B, T) and the position of each last token (B,)."""

    ids: torch.Tensor
    mask: torch.Tensor
    pos: torch.Tensor


def encode_words(token_lists, index: dict) -> Batch:
    """Word-level ids, right-padded with id 0."""
    T = max(len(t) for t in token_lists)
    ids = torch.zeros(len(token_lists), T, dtype=torch.long)
    for i, tokens in enumerate(token_lists):
        ids[i, :len(tokens)] = torch.tensor([index[t] for t in tokens])
    pos = torch.tensor([len(t) - 1 for t in token_lists])
    return Batch(ids, torch.arange(T)[None, :] <= pos[:, None], pos)


class WordLM:
    """Our tiny GPT: one token per word of the vocabulary `index` (word -> id, padding id 0)."""

    def __init__(self, model: GPT, index: dict):
        self.model, self.index = model, index
        self.n_layer = model.cfg.n_layer
        self._clean = None  # (batch, its clean streams): the batch that patched_logits last patched

    def encode(self, token_lists) -> Batch:
        return encode_words(token_lists, self.index)

    def answer_ids(self, words) -> torch.Tensor:
        return torch.tensor([self.index[w] for w in words])

    def last_logits(self, batch: Batch) -> torch.Tensor:
        return last_logits(self.model, batch.ids, batch.pos)

    def residuals(self, batch: Batch) -> torch.Tensor:
        return residuals(self.model, batch.ids, batch.pos)

    def patched_logits(self, batch: Batch, layer: int, vectors: torch.Tensor) -> torch.Tensor:
        """model.patched_logits, resumed from the clean streams of `batch` (computed once per batch: the sweep
        patches one batch at every layer) when the model is our GPT (GPT.forward's `start`)."""
        if not isinstance(self.model, GPT):
            return patched_logits(self.model, batch.ids, batch.pos, layer, vectors)
        if self._clean is None or self._clean[0] is not batch:
            self._clean = (batch, streams(self.model, batch.ids))
        return patched_logits(self.model, batch.ids, batch.pos, layer, vectors, clean=self._clean[1])


def decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    """The list of transformer blocks of a Hugging Face causal LM: the ModuleList of config.num_hidden_layers
    modules named *Block or *Layer (GPT-2: transformer.h of GPT2Block; GPT-NeoX: gpt_neox.layers; Llama, Mistral:
    model.layers of *DecoderLayer; Falcon: transformer.h of FalconDecoderLayer)."""
    n = model.config.num_hidden_layers
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == n \
                and type(module[0]).__name__.endswith(("Block", "Layer")):
            return module
    raise ValueError(f"{type(model).__name__}: no ModuleList of {n} decoder layers found")


class PretrainedLM:
    """A pretrained causal LM from the local directory `path` (weights and tokenizer, as `save_pretrained` writes
    them), with forward hooks on its blocks to read and overwrite the residual stream at the last token."""

    def __init__(self, path: str | Path, *, dtype: str = "float32", device: str | None = None):
        self.path = Path(path)
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.model, self.tokenizer = load_causal_lm(path, dtype=dtype, key="orion.pretrained[].path", device=self.device)
        self.tokenizer.padding_side = "right"
        if self.tokenizer.pad_token is None:  # GPT-2 and Pythia ship no padding token; padded slots are masked
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.blocks = decoder_layers(self.model)
        self.n_layer = len(self.blocks)

    def encode(self, token_lists) -> Batch:
        enc = self.tokenizer([" ".join(t) for t in token_lists], return_tensors="pt", padding=True)
        limit = getattr(self.model.config, "max_position_embeddings", None) or getattr(self.model.config, "n_positions", None)
        if limit is not None and enc["input_ids"].shape[1] > limit:
            raise ValueError(f"{self.path}: a prompt of {enc['input_ids'].shape[1]} tokens exceeds the model's "
                             f"{limit} positions")
        mask = enc["attention_mask"].bool()
        return Batch(enc["input_ids"].to(self.device), mask.to(self.device), (mask.sum(1) - 1).to(self.device))

    def answer_ids(self, words) -> torch.Tensor:
        ids = [self.tokenizer(" " + w, add_special_tokens=False)["input_ids"][0] for w in words]
        unk = self.tokenizer.unk_token_id
        if unk is not None and unk in ids:  # every answer would be "right" by predicting the unknown token
            raise ValueError(f"{self.path}: the tokenizer does not know the answer {words[ids.index(unk)]!r}")
        return torch.tensor(ids)

    @torch.no_grad()
    def _run(self, batch: Batch, edit) -> torch.Tensor:
        """Logits (B, V) at the last tokens, with edit(layer, hidden) called on the stream at every layer."""
        rows = torch.arange(len(batch.pos), device=self.device)

        def before_first(module, args, kwargs):
            if args:
                return (edit(0, args[0]), *args[1:]), kwargs
            return args, {**kwargs, "hidden_states": edit(0, kwargs["hidden_states"])}

        def after(layer):
            def hook(module, args, output):
                if isinstance(output, tuple):
                    return (edit(layer, output[0]), *output[1:])
                return edit(layer, output)
            return hook

        handles = [self.blocks[0].register_forward_pre_hook(before_first, with_kwargs=True)]
        handles += [block.register_forward_hook(after(i)) for i, block in enumerate(self.blocks, start=1)]
        try:
            logits = self.model(input_ids=batch.ids, attention_mask=batch.mask.long()).logits
        finally:
            for h in handles:
                h.remove()
        return logits[rows, batch.pos].float().cpu()

    def last_logits(self, batch: Batch) -> torch.Tensor:
        return self._run(batch, lambda layer, x: x)

    def residuals(self, batch: Batch) -> torch.Tensor:
        rows, out = torch.arange(len(batch.pos), device=self.device), {}

        def read(layer, x):
            out[layer] = x[rows, batch.pos].clone()
            return x

        self._run(batch, read)
        return torch.stack([out[i] for i in range(self.n_layer + 1)])

    def patched_logits(self, batch: Batch, layer: int, vectors: torch.Tensor) -> torch.Tensor:
        rows = torch.arange(len(batch.pos), device=self.device)

        def write(at, x):
            if at == layer:
                x = x.clone()
                x[rows, batch.pos] = vectors.to(device=x.device, dtype=x.dtype)
            return x

        return self._run(batch, write)
