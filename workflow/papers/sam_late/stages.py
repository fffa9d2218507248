"""The sam_late DAG's stages, the thin layer the rules call:
prepare (data) -> train_sgd (per label condition) -> train_sam (per condition and rho) and train_adv (clean labels),
both branching from SGD's checkpoints -> evaluate; the report stage is :func:`papers.sam_late.report.report`.
Each function takes its parameters and paths explicitly, so it also runs without Snakemake; the work is in
:mod:`.data`, :mod:`.train`, :mod:`.evaluate` and :mod:`.report`.
"""
from __future__ import annotations

import logging

from papers.common.io import read_parquet, write_parquet
from papers.common.params import to_dict
from papers.common.progress import progress
from papers.sam_late import data as D
from papers.sam_late.params import ADV_ARMS, NOISY_ARMS, SAM_ARMS, early_arm, parse, sweep_arm

log = logging.getLogger(__name__)


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


# ---- prepare ---------------------------------------------------------------------------------
def prepare(*, cfg, data):
    """Every seed's train / test split and, where the noisy condition runs, its corrupted training labels."""
    p = parse(cfg)
    df = D.split_table(p.data, p.seeds, noisy="noisy" in p.conditions)
    for s in range(p.seeds):
        train = df[f"split{s}"] == "train"
        flipped = int((df.loc[train, f"noisy{s}"] != df.loc[train, "label"]).sum()) if f"noisy{s}" in df else 0
        log.info("seed %d: %d training images (%d labels corrupted in the noisy condition), %d test images", s,
                 int(train.sum()), flipped, int((df[f"split{s}"] == "test").sum()))
    write_parquet(df, data)


# ---- train -----------------------------------------------------------------------------------
def _train(p, data, labels, arms, rho, sgd, history, escape, checkpoints):
    import torch

    from papers.sam_late.train import train_arms

    sgd_runs = None if sgd is None else torch.load(sgd, weights_only=False)["runs"]["sgd"]
    h, e, runs = train_arms(p, read_parquet(data), labels, arms, rho, sgd_runs, _device(), progress=progress)
    for (arm, seed), g in h.groupby(["arm", "seed"], sort=False):
        log.info("%s %s rho=%s seed=%d: test accuracy %.4f", labels, arm, rho, seed, g.test_acc.iloc[-1])
    write_parquet(h, history)
    write_parquet(e, escape)
    torch.save({"params": to_dict(p), "labels": labels, "rho": rho, "runs": runs}, checkpoints)


def train_sgd(*, cfg, labels, data, history, escape, checkpoints):
    """SGD throughout, every seed, on the condition's labels; its checkpoints at the switch epochs are where the
    late arms branch off."""
    _train(parse(cfg), data, labels, ["sgd"], 0.0, None, history, escape, checkpoints)


def train_sam(*, cfg, labels, data, sgd, rho, history, escape, checkpoints):
    """SAM throughout and late SAM (from SGD's switch checkpoint) at one rho, every seed; with clean labels at the
    main rho also early SAM (equal length), the extra late-SAM arms (each from SGD's checkpoint at its own switch)
    and early SAM of the paper's share."""
    p = parse(cfg)
    if labels == "noisy":
        arms = [a for a in NOISY_ARMS if a != "sgd"]
    elif rho == p.rho:
        arms = (list(SAM_ARMS) + [(sweep_arm(k), "late_sam", p.epochs - k) for k in p.late_ks]
                + [(early_arm(k), "early_sam", k) for k in p.early_ks])
    else:
        arms = ["sam", "late_sam"]
    _train(p, data, labels, arms, rho, sgd, history, escape, checkpoints)


def train_adv(*, cfg, data, sgd, history, escape, checkpoints):
    """Adversarial training throughout, late AT (from SGD's switch checkpoint) and early AT of equal length (AT for
    the first late_epochs, then SGD), clean labels."""
    _train(parse(cfg), data, "clean", list(ADV_ARMS), 0.0, sgd, history, escape, checkpoints)


# ---- evaluate --------------------------------------------------------------------------------
def evaluate(*, cfg, data, sgd, sam, adv, metrics, interpolation, switch):
    """Per final network: test accuracy and loss, sharpness, robust accuracy, fit, distance from w_switch; the
    loss along the lines from w_switch; SGD's fit at the switch (:func:`papers.sam_late.evaluate.evaluate_runs`)."""
    import torch

    from papers.sam_late.evaluate import evaluate_runs

    p = parse(cfg)
    # Memory-mapped: at the full scale the files hold some 50 VGG-16-BN states with their optimisers (tens of GB);
    # mmap pages in only the tensors evaluate reads (one network at a time), not every checkpoint at once.
    files = [torch.load(f, weights_only=False, mmap=True) for f in [*sgd, *sam, adv]]
    m, lines, fits = evaluate_runs(p, read_parquet(data), files, _device())
    write_parquet(m, metrics)
    write_parquet(lines, interpolation)
    write_parquet(fits, switch)

