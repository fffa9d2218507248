"""The data sets: EEG-like SPD covariances, region covariances of sklearn's digits, a noisy tree in the ball.

All are generated offline with a known ground truth (the paper's BCIC-IV-2a, MAMEM-SSVEP-II and
ImageNet/CIFAR come from user-given paths at the full scale: :func:`load_trials_npz`).
"""
from __future__ import annotations

import logging
import pickle
from pathlib import Path

import numpy as np

from papers.symspace.params import parse, real_eeg

log = logging.getLogger(__name__)


def prepare(*, cfg, data):
    """Every seed's EEG-like subjects (or the user's EEG datasets) and digits draw; every tree seed's noisy tree.

    Written as one pickle of numpy arrays (the matrices do not fit Parquet's columns), read by :func:`read_prepared`.
    ``eeg``: {task name: {seed: [subject, ...]}}; the mixing model draws new subjects per seed (task "eeg"), real
    EEG gives every seed the same subjects of each dataset (task "eeg:<dataset>"; the subjects are its replicates).
    """
    p = parse(cfg)
    if real_eeg(p):
        eeg = {}
        for name, folder in sorted(p.eeg_datasets.items()):
            files = sorted(Path(folder).glob("*.npz"))
            if not files:
                raise FileNotFoundError(f"symspace.eeg_datasets.{name}: no .npz subject files in {folder}")
            subjects = [load_trials_npz(str(f), p.eeg["windows"], p.eeg["shrink"]) for f in files]
            eeg[f"eeg:{name}"] = {seed: subjects for seed in range(p.seeds)}
        # Claim (e) on the same real EEG: the class information is the data's own.
        attention = dict(eeg)
    else:
        # Claim (b)'s head replicates on seeds head_seed_offset .. + head_seeds - 1 (a block of its own: issue 52's
        # seventh round drew a fresh one), claim (e)'s positive control on seeds 0 .. planted_attention_seeds - 1.
        wanted = sorted({*head_seed_list(p), *range(p.train["planted_attention_seeds"])})
        eeg = {"eeg": {seed: eeg_like(p.eeg, seed) for seed in wanted}}
        # Claim (e) is decided on the mixing model with the class's excess power in a random run of 1 .. W windows
        # (event "burst": window-localised, not the one-window plant; review symspace_r13), on seeds 0 ..
        # burst_attention_seeds - 1 of its own stream; its positive control on claim (b)'s EEG (the class event planted
        # in one window: the attention finds it), on the first planted_attention_seeds seeds. The spread window (the
        # excess power over every window: no window-localised information, so it cannot meet (e)'s premise) is
        # context only, on the first spread_attention_seeds seeds (at most head_seeds; 0 at the default scale).
        spread = min(p.train["spread_attention_seeds"], p.head_seeds)
        attention = {"eeg": {seed: eeg["eeg"][seed] for seed in range(p.train["planted_attention_seeds"])}}
        for task, event, n in (("eeg_burst", "burst", p.train["burst_attention_seeds"]), ("eeg_spread", "spread", spread)):
            if n:
                attention[task] = {seed: eeg_like(p.eeg, seed, event=event) for seed in range(n)}
    prepared = {"eeg": eeg, "attention": attention,
                "digits": digits(p.digits["eps"]) if p.digits.get("seeds", 0) else None,
                "tree": {seed: noisy_tree(p.tree, seed) for seed in range(p.tree["seeds"])}}
    with open(data, "wb") as fh:
        pickle.dump(prepared, fh, protocol=pickle.HIGHEST_PROTOCOL)
    log.info("prepared the EEG (%s), attention (%s), %d trees", ", ".join(eeg), ", ".join(attention), p.tree["seeds"])


def head_seed_list(p) -> list[int]:
    """The mixing model's seeds of claim (b)'s head replicates, in replicate order: head_seed_offset + i for
    i < head_seeds (replicate i is dealt to train job i mod seeds)."""
    return [p.head_seed_offset + i for i in range(p.head_seeds)]


def read_prepared(path: str) -> dict:
    """What :func:`prepare` wrote (a file of this workflow's own making, so unpickling it is safe)."""
    with open(path, "rb") as fh:
        return pickle.load(fh)


def covariance(x: np.ndarray, shrink: float) -> np.ndarray:
    """Sample covariance over the last axis (..., C, T) -> (..., C, C), shrunk towards its scaled identity."""
    x = x - x.mean(-1, keepdims=True)
    cov = x @ np.swapaxes(x, -1, -2) / x.shape[-1]
    c = cov.shape[-1]
    scale = np.trace(cov, axis1=-2, axis2=-1)[..., None, None] / c
    return (1 - shrink) * cov + shrink * scale * np.eye(c)


def eeg_like(e, seed: int, event: str = "window") -> dict:
    """Multichannel trials from a mixing model (issue 27, Data (1)), per subject and session.

    Per subject a fixed random forward matrix A (channels x sources); each trial has `windows`
    windows of `samples` samples; sources are white with log-normal power per trial, and in one window
    per trial (a jittered event onset) the class's source gains `class_gain` in power (class k drives
    source k). Session 2 sees the forward matrix perturbed by `session_shift` (electrodes moved) and
    its own noise. x = A s + noise. Returns per subject each session's window covariances (N, W, C, C)
    and labels: session 1 trains ("train"), session 2 evaluates ("test"), and the subject's forward matrix A
    ("forward", session 1's; claim (b)'s oracle arm reads the sources through A^-1: train.source_power_oracle).

    ``event="spread"``: the class's source power is multiplied by 1 + (class_gain - 1) / windows in every window
    instead (the same excess power over the trial, so the trial covariance carries the same class information, but
    no window stands out: no window-localised information, claim e's premise unmet by construction). Its own random
    stream.

    ``event="burst"``: the class's source power is multiplied by class_gain in every window of a run of L
    consecutive windows, L uniform on 1 .. windows and its onset uniform on 0 .. windows - L, drawn per trial (a
    transient event of the one-window plant's amplitude and a random duration: window-localised, but not one window;
    L = windows is the whole trial). Claim (e) is decided on it (review symspace_r13). Its own random stream.
    """
    if event not in EVENT_STREAMS:
        raise ValueError(f"symspace: unknown EEG event {event!r} ({', '.join(EVENT_STREAMS)})")
    rng = np.random.default_rng([seed, EVENT_STREAMS[event]])
    c, w, n_cls = e["channels"], e["windows"], e["classes"]
    if n_cls > c:
        raise ValueError(f"symspace.eeg.classes = {n_cls} exceeds eeg.channels = {c} (class k drives source k)")
    per = e["trials_per_class"]
    tokens = np.empty((e["subjects"], 2, n_cls * per, w, c, c))
    forwards = np.empty((e["subjects"], c, c))
    labels = np.tile(np.repeat(np.arange(n_cls), per), (e["subjects"], 2, 1))
    for s in range(e["subjects"]):
        forward = rng.normal(size=(c, c)) / np.sqrt(c) + np.eye(c)
        forwards[s] = forward
        for session in range(2):
            mix = forward @ (np.eye(c) + e["session_shift"] * rng.normal(size=(c, c)) / np.sqrt(c)) if session else forward
            tokens[s, session] = _session(e, mix, labels[s, session], rng, event)
    return [{**{name: {"tokens": tokens[s, k], "labels": labels[s, k]} for k, name in enumerate(("train", "test"))},
             "forward": forwards[s]} for s in range(e["subjects"])]


def _session(e, mix: np.ndarray, labels: np.ndarray, rng: np.random.Generator, event: str = "window") -> np.ndarray:
    """One session's window covariances (N, W, C, C) of :func:`eeg_like`'s mixing model through `mix`, trial i of
    class labels[i]."""
    c, w, n = mix.shape[0], e["windows"], len(labels)
    power = np.exp(e["power_spread"] * rng.normal(size=(n, 1, c)))  # (N, 1, sources)
    power = np.repeat(power, w, axis=1)  # (N, W, sources)
    power[np.arange(n), :, labels] *= event_gains(e, n, rng, event)
    src = rng.normal(size=(n, w, c, e["samples"])) * np.sqrt(power)[..., None]
    x = mix @ src + e["noise"] * rng.normal(size=(n, w, c, e["samples"]))
    return covariance(x, e["shrink"])


# Each event's random stream (seed, k): window and spread as before; burst (review symspace_r13) a stream of its own,
# apart from every other stream of the paper (3: the premise reference and the trees, 4-7, 9, 10: training and checks).
EVENT_STREAMS = {"window": 1, "spread": 2, "burst": 11}


def event_gains(e, n: int, rng: np.random.Generator, event: str) -> np.ndarray:
    """(N, W) multipliers of each trial's class source power per window (:func:`eeg_like`'s events). Draws the
    window onset for every event (so that window and spread keep the numbers they had), then, for burst, each
    trial's run length L (1 .. W) and the run's onset (0 .. W - L)."""
    w, gain = e["windows"], e["class_gain"]
    onset = rng.integers(0, w, size=n)
    if event == "window":
        return np.where(np.arange(w)[None] == onset[:, None], gain, 1.0)
    if event == "spread":
        return np.full((n, w), 1 + (gain - 1) / w)
    length = rng.integers(1, w + 1, size=n)
    start = rng.integers(0, w - length + 1)
    inside = (np.arange(w)[None] >= start[:, None]) & (np.arange(w)[None] < (start + length)[:, None])
    return np.where(inside, gain, 1.0)


def eeg_reference(e, forward: np.ndarray, trials_per_class: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A large draw of training-session trials from one subject's mixing model (its forward matrix `forward`, the
    training session's mix): window covariances (N, W, C, C) and labels, `trials_per_class` per class, from a stream
    of its own (seed, 3). Claim (b)'s premise fits the LogEig class's reference on it (review symspace_r9: fitted on
    the run's few fitting trials, the reference fell short of its class's population accuracy by its estimation
    error, which the oracle, fitting only one offset per class, does not pay)."""
    labels = np.repeat(np.arange(e["classes"]), trials_per_class)
    return _session(e, forward, labels, np.random.default_rng([seed, 3])), labels


def region_covariances(images: np.ndarray, eps: float) -> np.ndarray:
    """5 x 5 region-covariance descriptors of images (N, H, W): features (x, y, I, |I_x|, |I_y|) per pixel
    (Tuzel et al. 2006), plus eps I so that every matrix is SPD."""
    n, hgt, wid = images.shape
    yy, xx = np.meshgrid(np.arange(hgt, dtype=float), np.arange(wid, dtype=float), indexing="ij")
    ix = np.abs(np.gradient(images, axis=2))
    iy = np.abs(np.gradient(images, axis=1))
    feats = np.stack([np.broadcast_to(xx, images.shape), np.broadcast_to(yy, images.shape), images, ix, iy], axis=1)
    return covariance(feats.reshape(n, 5, hgt * wid), 0.0) + eps * np.eye(5)


def digits(eps: float) -> dict:
    """sklearn's 8 x 8 digits (1797 images, shipped in its wheel), scaled to [0, 1], as region covariances."""
    from sklearn.datasets import load_digits

    d = load_digits()
    return {"spd": region_covariances(d.images / 16.0, eps), "labels": d.target.astype(int)}


def noisy_tree(t, seed: int) -> dict:
    """Nodes of a full tree embedded in the Poincare disk, perturbed by hyperbolic noise, then moved by an isometry
    (Data (3)).

    Node at depth r sits at hyperbolic radius r * `edge_length` in the middle of its angular sector
    (the root's sector is the circle, each child gets 1 / `branching` of its parent's); its position is
    then Mobius-moved by a tangent vector of hyperbolic length ~ `noise` (x (+) tanh(|v|/2) v/|v|). The
    label is the node's ancestor at depth `label_depth`. Nodes above that depth are dropped. Last, the whole
    tree is rotated by a random angle and Mobius-translated so that its root lands at hyperbolic distance
    `root_shift` from the origin (x -> c (+) R x, an isometry of the disk): hyperbolic distances, and so what a
    hyperbolic head can represent, are unchanged, but the classes are no longer angular sectors about the origin
    (with root_shift 0 a fixed angle rule gives the labels). Returns the points, their labels and depths, and
    claim (d)'s positive control: a share `planted_share` of the moved points labelled by a random horocycle head
    (:func:`horocycle_head_labels`; the points, their labels and the generating head).
    """
    rng = np.random.default_rng([seed, 3])
    pts, labels, depths = [], [], []
    sectors = [(0.0, 2 * np.pi, -1)]  # (start, width, ancestor at label_depth)
    for depth in range(1, t["depth"] + 1):
        nxt = []
        for start, width, anc in sectors:
            for i in range(t["branching"]):
                nxt.append((start + i * width / t["branching"], width / t["branching"],
                            len(nxt) if depth == t["label_depth"] else anc))
        sectors = nxt
        if depth >= t["label_depth"]:
            for start, width, anc in sectors:
                angle = start + width / 2
                r = np.tanh(depth * t["edge_length"] / 2)
                pts.append([r * np.cos(angle), r * np.sin(angle)])
                labels.append(anc)
                depths.append(depth)
    x = np.asarray(pts)
    v = t["noise"] * rng.normal(size=x.shape)
    norm = np.linalg.norm(v, axis=1, keepdims=True)
    u = np.tanh(norm / 2) * v / np.maximum(norm, 1e-15)
    x = _mobius_add_np(x, u)
    phi, psi = rng.uniform(0, 2 * np.pi, size=2)
    rot = np.array([[np.cos(phi), -np.sin(phi)], [np.sin(phi), np.cos(phi)]])
    centre = np.tanh(t["root_shift"] / 2) * np.array([np.cos(psi), np.sin(psi)])
    moved = _mobius_add_np(np.broadcast_to(centre, x.shape), x @ rot.T)
    per_class = max(1, int(t["planted_share"] * len(moved)) // t["planted_classes"])
    planted = horocycle_head_labels(moved, t["planted_classes"], per_class, rng)
    return {"points": moved, "labels": np.asarray(labels), "depths": np.asarray(depths),
            "horocycle_points": moved[planted["index"]], "horocycle_labels": planted["labels"],
            "horocycle_head": {"p": planted["p"], "omega": planted["omega"]}}


def horocycle_head_labels(x: np.ndarray, classes: int, per_class: int, rng: np.random.Generator,
                          tries: int = 1000) -> dict:
    """Claim (d)'s positive control: labels that the Busemann (horocycle) head can represent exactly, drawn from a
    randomly placed head of its own form (issue 52's review: bands of one Busemann function need a per-class scale
    that the head lacks, so they were outside its function class).

    A head of `classes` hyperplanes: base points p_k at randomly chosen points of `x` (so that every boundary runs
    through the cloud), directions omega_k uniform on the circle; the label of a point is the arg-max of the head's
    logits 2 artanh|y_k| / |y_k| s_k(x) (y_k = (-p_k) (+) x, s_k the horocycle value: :func:`busemann_logits`, the
    formula of layers.BallMLR's Busemann head). The head is redrawn (at most `tries` times) until every class holds
    at least `per_class` points; then `per_class` points of each class are kept at random, so that every seed's
    planted task has the same size and class sizes (the tree seeds train side by side). Returns the kept points'
    indices into `x`, their labels, and the generating head (p, omega)."""
    for _ in range(tries):
        p = x[rng.choice(len(x), size=classes, replace=False)]
        phi = rng.uniform(0, 2 * np.pi, size=classes)
        omega = np.stack([np.cos(phi), np.sin(phi)], axis=1)
        labels = busemann_logits(x, p, omega).argmax(1)
        counts = np.bincount(labels, minlength=classes)
        if counts.min() >= per_class:
            keep = np.sort(np.concatenate([rng.choice(np.flatnonzero(labels == k), size=per_class, replace=False)
                                           for k in range(classes)]))
            return {"index": keep, "labels": labels[keep], "p": p, "omega": omega}
    raise ValueError(f"symspace: no random horocycle head in {tries} draws gave {classes} classes of at least "
                     f"{per_class} of the {len(x)} points (lower symspace.tree.planted_share)")


def busemann_logits(x: np.ndarray, p: np.ndarray, omega: np.ndarray) -> np.ndarray:
    """The Busemann head's logits (layers.BallMLR, kind busemann) for base points p (K, 2) and unit directions
    omega (K, 2) at points x (N, 2): 2 artanh|y| / |y| (log(1 - |y|^2) - log|y - omega|^2), y = (-p_k) (+) x."""
    y = _mobius_add_np(np.broadcast_to(-p[None], (len(x), *p.shape)).reshape(-1, 2),
                       np.repeat(x, len(p), axis=0)).reshape(len(x), len(p), 2)
    r = np.clip(np.linalg.norm(y, axis=-1), 1e-12, 1 - 1e-12)
    s = np.log1p(-r ** 2) - np.log(((y - omega[None]) ** 2).sum(-1))
    return 2 * np.arctanh(r) / r * s


def _mobius_add_np(x, y):
    xy, x2, y2 = (x * y).sum(1, keepdims=True), (x * x).sum(1, keepdims=True), (y * y).sum(1, keepdims=True)
    return ((1 + 2 * xy + y2) * x + (1 - x2) * y) / (1 + 2 * xy + x2 * y2)


def load_trials_npz(path: str, windows: int, shrink: float) -> dict:
    """Real EEG at the full scale: one subject per .npz with `trials` (N, channels, time), `labels` (N,) and
    `session` (N,; 0 = training session, 1 = evaluation session), e.g. BCIC-IV-2a exported with MNE.
    Returns each session's window covariances (N, windows, C, C) and labels. Names the file and the
    key or record at fault."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{path}: no such file (symspace.eeg_datasets)")
    with np.load(p) as f:
        for key in ("trials", "labels", "session"):
            if key not in f:
                raise ValueError(f"{path}: missing array '{key}' (has {', '.join(f.files)})")
        trials, labels, session = f["trials"], f["labels"], f["session"]
    if trials.ndim != 3:
        raise ValueError(f"{path}: 'trials' must be (trials, channels, time), got shape {trials.shape}")
    if not (len(labels) == len(session) == len(trials)):
        raise ValueError(f"{path}: {len(trials)} trials but {len(labels)} labels and {len(session)} session entries")
    bad = np.flatnonzero(~np.isfinite(trials).all(axis=(1, 2)))
    if bad.size:
        raise ValueError(f"{path}: record {bad[0]}: trial holds a non-finite value")
    bad = np.flatnonzero(~np.isin(session, (0, 1)))
    if bad.size:
        raise ValueError(f"{path}: record {bad[0]}: session {session[bad[0]]!r} is not 0 or 1")
    n, c, t = trials.shape
    usable = t // windows * windows
    tokens = covariance(trials[:, :, :usable].reshape(n, c, windows, usable // windows).transpose(0, 2, 1, 3), shrink)
    return {name: {"tokens": tokens[session == k], "labels": labels[session == k].astype(int)}
            for k, name in enumerate(("train", "test"))}
