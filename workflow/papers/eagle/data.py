"""Synthetic documents from sklearn's digits with templated questions (issue 28, Data), and the prepare stage.

A canvas is 32 x 32 in [0, 1], cut into four 16 x 16 quadrants (top-left, top-right, bottom-left,
bottom-right), each holding one thing:

* a **big digit**: an 8 x 8 digit upsampled x2 to fill its quadrant (readable at low resolution);
* a **small digit**: an 8 x 8 digit at a random offset (a multiple of 4 pixels) in its quadrant (unreadable once the canvas is
  average-pooled to 8 x 8, the low-resolution expert's view: the "fine print");
* **marks**: 1-4 bright 2 x 2 squares on the 3 x 3 slots of the two remaining quadrants.

Four kinds of question (config ``data.kinds`` chooses which are asked), each by templated wordings of
exactly ``QUESTION_WORDS`` words and "?": ``global`` (the big digit), ``fine`` (the small digit), ``count``
(the marks) and ``position`` (the small digit's quadrant). One template per kind is held out of training and asked only of the test canvases
(split ``novel``).
The answer is one word. Training canvases use one pool of digit images, validation and test canvases
the other (held-out canvases *and* held-out digit images).

No torch here: the prepare job stays light.
"""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

SIZE = 32  # canvas side in pixels
QUAD = SIZE // 2
KINDS = ("global", "fine", "count", "position")
QUESTION_WORDS = 5
# Templates: the first ones train, the last of each kind is held out (asked at test time only).
TEMPLATES = {
    "global": ["which digit is the biggest", "what is the large digit", "name the big digit shown",
               "what is the biggest number"],
    "fine": ["which digit is the smallest", "what is the tiny digit", "name the small digit shown",
             "what is the smallest number"],
    "count": ["how many marks are there", "count the marks in view", "what number of marks appear",
              "how many marks are shown"],
    "position": ["where is the small digit", "locate the small digit please", "where is the tiny digit",
                 "where is the smallest digit"],
}
DIGIT_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
QUADRANTS = ["topleft", "topright", "bottomleft", "bottomright"]
MAX_MARKS = 4
# 3 x 3 slots per quadrant at these offsets; 2 x 2 marks on them never touch.
SLOT_OFFSETS = (2, 7, 12)


def vocabulary() -> list[str]:
    """Every word of every template, "?", and every answer word, in a fixed order (index 0 is "?")."""
    words = ["?"]
    for kind in KINDS:
        for t in TEMPLATES[kind]:
            words += [w for w in t.split() if w not in words]
    words += [w for w in DIGIT_WORDS + QUADRANTS if w not in words]
    return words


def check_templates() -> None:
    for kind, ts in TEMPLATES.items():
        for t in ts:
            if len(t.split()) != QUESTION_WORDS:
                raise ValueError(f"eagle template {t!r} ({kind}) has {len(t.split())} words, not {QUESTION_WORDS}")


def answer_word(kind: str, big: int, small: int, marks: int, quadrant: int) -> str:
    if kind == "global":
        return DIGIT_WORDS[big]
    if kind == "fine":
        return DIGIT_WORDS[small]
    if kind == "count":
        return DIGIT_WORDS[marks]
    return QUADRANTS[quadrant]


def load_digits_pool(path: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(images (N, 8, 8) in [0, 1], labels (N,)): sklearn's digits (shipped in its wheel), or an .npz with
    `images` (N, 8, 8) and `labels` (N,) at `path`."""
    if path is None:
        from sklearn.datasets import load_digits

        d = load_digits()
        return d.images.astype(np.float32) / 16.0, d.target.astype(np.int64)
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"eagle: digits file {p} does not exist")
    with np.load(p) as z:
        if "images" not in z or "labels" not in z:
            raise KeyError(f"eagle: {p} must hold arrays 'images' (N, 8, 8) and 'labels' (N,), has {list(z)}")
        images, labels = z["images"].astype(np.float32), z["labels"].astype(np.int64)
    if images.ndim != 3 or images.shape[1:] != (8, 8) or len(labels) != len(images):
        raise ValueError(f"eagle: {p}: images must be (N, 8, 8) with one label each, got {images.shape}, {labels.shape}")
    if images.max() > 1.0:
        images = images / images.max()
    return images, labels


def make_canvases(n: int, images: np.ndarray, labels: np.ndarray, rng: np.random.Generator) -> dict:
    """`n` canvases from the digit pool (images, labels); returns the canvases and what is on them."""
    canvas = np.zeros((n, SIZE, SIZE), np.float32)
    big, small, marks, quadrant, big_quadrant = (np.zeros(n, np.int64) for _ in range(5))
    # The localisation expert's target: which 4 x 4-pixel cells hold a mark (channel 0) or the small digit (1).
    occupancy = np.zeros((n, 2, SIZE // 4, SIZE // 4), np.float32)
    for i in range(n):
        order = rng.permutation(4)  # quadrants of: big digit, small digit, marks, marks
        b, s = rng.choice(len(images), 2, replace=False)
        r0, c0 = divmod(int(order[0]), 2)
        canvas[i, r0 * QUAD:(r0 + 1) * QUAD, c0 * QUAD:(c0 + 1) * QUAD] = np.kron(images[b], np.ones((2, 2), np.float32))
        r1, c1 = divmod(int(order[1]), 2)
        dr, dc = 4 * rng.integers(0, (QUAD - 8) // 4 + 1, 2)  # on the 4-pixel grid of the high-res patches
        top, left = r1 * QUAD + dr, c1 * QUAD + dc
        canvas[i, top:top + 8, left:left + 8] = images[s]
        occupancy[i, 1, top // 4:(top + 7) // 4 + 1, left // 4:(left + 7) // 4 + 1] = 1.0
        slots = [(divmod(int(q), 2), a, c) for q in order[2:] for a in SLOT_OFFSETS for c in SLOT_OFFSETS]
        k = int(rng.integers(1, MAX_MARKS + 1))
        for j in rng.choice(len(slots), k, replace=False):
            (qr, qc), a, c = slots[j]
            top, left = qr * QUAD + a, qc * QUAD + c
            canvas[i, top:top + 2, left:left + 2] = 1.0
            occupancy[i, 0, top // 4:(top + 1) // 4 + 1, left // 4:(left + 1) // 4 + 1] = 1.0
        big[i], small[i], marks[i], quadrant[i], big_quadrant[i] = labels[b], labels[s], k, order[1], order[0]
    return {"canvas": canvas, "big": big, "small": small, "marks": marks, "quadrant": quadrant,
            "big_quadrant": big_quadrant, "occupancy": occupancy}


def make_questions(scene: dict, template_ids: list[int], rng: np.random.Generator, kinds=KINDS) -> dict:
    """One question of every kind in `kinds` per canvas, each with a template drawn from `template_ids`.

    Returns arrays: canvas index, kind index, template index, question token ids (Q, QUESTION_WORDS + 1)
    and the answer token id (Q,).
    """
    vocab = {w: i for i, w in enumerate(vocabulary())}
    rows = {"canvas": [], "kind": [], "template": [], "tokens": [], "answer": []}
    for i in range(len(scene["canvas"])):
        for kind in kinds:
            k = KINDS.index(kind)
            t = int(rng.choice(template_ids))
            words = TEMPLATES[kind][t].split() + ["?"]
            ans = answer_word(kind, scene["big"][i], scene["small"][i], scene["marks"][i], scene["quadrant"][i])
            rows["canvas"].append(i)
            rows["kind"].append(k)
            rows["template"].append(t)
            rows["tokens"].append([vocab[w] for w in words])
            rows["answer"].append(vocab[ans])
    return {k: np.asarray(v, np.int64) for k, v in rows.items()}


def build_split(scene: dict, questions: dict) -> dict:
    return {**{f"scene_{k}": v for k, v in scene.items()}, **{f"q_{k}": v for k, v in questions.items()}}


def prepare(*, cfg, data):
    """The pretraining canvases and every seed's train / val / test canvases and questions in one .npz (keys
    `<seed>/<split>/<name>`, the pretraining draw under `pretrain/pretrain/<name>`); at the full scale (config
    eagle.llava set) the checked LLaVA-style records instead (papers.eagle.llava.prepare).

    Only the digits 0 .. `digit_classes` - 1 are drawn and only the question kinds `kinds` are asked. The digit
    images are split once into a training pool and a held-out pool (`heldout_fraction`): the experts' and the LM's
    pretraining canvases (one draw, shared by every seed, as the paper's experts are one set of public checkpoints)
    and every seed's training canvases use the first, every seed's val and test canvases the second, so no test
    canvas shows a digit image that any model saw in training. Train, val and test questions use the training
    templates; split `novel` asks the test canvases with the held-out template of each kind (the LM's
    generalisation to new wordings, reported apart).
    """
    from papers.eagle.params import full_scale, parse

    p = parse(cfg)
    if full_scale(p):  # the full scale: LLaVA-style records instead of canvases
        from papers.eagle import llava

        return llava.prepare(p, data)
    check_templates()
    images, labels = load_digits_pool(p.data["digits_file"])
    keep = labels < p.data["digit_classes"]  # the digits 0 .. digit_classes - 1 appear on the canvases
    images, labels = images[keep], labels[keep]
    if len(images) < 20:
        raise ValueError(f"eagle: only {len(images)} digit images of classes < {p.data['digit_classes']} "
                         f"in {p.data['digits_file'] or 'sklearn digits'}")
    n_templates = len(TEMPLATES["global"])
    train_templates, novel_templates = list(range(n_templates - 1)), [n_templates - 1]
    perm = np.random.default_rng([8]).permutation(len(images))
    cut = int(round(len(images) * (1 - p.data["heldout_fraction"])))
    pools = {"train": perm[:cut], "heldout": perm[cut:]}
    arrays = {}

    def draw(prefix, split, n, pool, rng, templates):
        idx = pools[pool]
        scene = make_canvases(n, images[idx], labels[idx], rng)
        for k, v in build_split(scene, make_questions(scene, templates, rng, p.data["kinds"])).items():
            arrays[f"{prefix}/{split}/{k}"] = v
        return scene

    draw("pretrain", "pretrain", p.data["train_canvases"], "train", np.random.default_rng([8, 1]), train_templates)
    for seed in range(p.seeds):  # the job index; the replicate's seed is seed_offset + it (a fresh block of seeds)
        rng = np.random.default_rng([p.seed_offset + seed, 8])
        for split, n, pool in (("train", p.data["train_canvases"], "train"), ("val", p.data["val_canvases"], "heldout"),
                               ("test", p.data["test_canvases"], "heldout")):
            scene = draw(seed, split, n, pool, rng, train_templates)
        # the same test canvases asked with the held-out templates
        for k, v in build_split(scene, make_questions(scene, novel_templates, rng, p.data["kinds"])).items():
            arrays[f"{seed}/novel/{k}"] = v
        log.info("seed %d (job %d): %d train, %d val, %d test canvases", p.seed_offset + seed, seed, p.data["train_canvases"],
                 p.data["val_canvases"], p.data["test_canvases"])
    Path(data).parent.mkdir(parents=True, exist_ok=True)
    with open(data, "wb") as f:
        np.savez_compressed(f, **arrays)


def read_split(path, seed: int, split: str) -> dict:
    """One seed's split from the prepared .npz: {"scene_canvas": ..., "q_tokens": ..., ...}."""
    prefix = f"{seed}/{split}/"
    with np.load(path) as z:
        out = {k[len(prefix):]: z[k] for k in z.files if k.startswith(prefix)}
    if not out:
        raise KeyError(f"eagle: {path} holds no split {split!r} for seed {seed}")
    return out
