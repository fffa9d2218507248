"""The evaluate stage: what the paper measures on every final network (test accuracy and loss, training fit,
sharpness, robust accuracy, distance from the switch point), the loss along the lines from the switch point,
and the SGD runs' fit at the switch (the premise of the late-phase claims).

Each network is evaluated on its own seed's split, with its condition's training labels (clean, or that seed's
noisy draw); the test labels are always clean.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from papers.common.progress import progress
from papers.sam_late.params import is_sam_arm

NO_SAM = 0.0  # the rho column of arms that never take a SAM step


def alpha_grid(p) -> np.ndarray:
    """The interpolation coefficients: an even grid over interpolation_range, with 0 and 1 always on it."""
    grid = np.linspace(*p.interpolation_range, p.interpolation_points)
    return np.unique(np.round(np.concatenate([grid, [0.0, 1.0]]), 10))


def late_k(p, arm: str) -> int:
    """Epochs of SAM (or AT) at the end of a late arm (late SAM and late AT share late_epochs)."""
    if arm.startswith("late_sam_k"):
        return int(arm.rsplit("_k", 1)[1])
    return p.late_epochs


def evaluate_runs(p, df: pd.DataFrame, files: list[dict], device: str) -> tuple[pd.DataFrame, pd.DataFrame,
                                                                                 pd.DataFrame]:
    """Per final network (files: the training jobs' checkpoint files, each {labels, rho, runs}): test accuracy
    and loss, training accuracy and loss on its labels, top Hessian eigenvalues, robust accuracy, and for late
    arms ||w_final - w_switch||; the loss along w_switch -> each late arm's final weights (late SAM and late AT),
    and the control line of claim (d): from w_switch, as far as late SAM went (matched distance), towards another
    seed's SGD solution (another valley: another initialisation and another split). Also, per condition and seed,
    SGD's fit of its training set at the main switch epoch.

    Returns (metrics, lines, switch_fit)."""
    from papers.sam_late import analysis
    from papers.sam_late.data import load_tensors
    from papers.sam_late.train import evaluate as loss_acc
    from papers.sam_late.train import new_model

    model = new_model(p, 0, device)
    sgd = {f["labels"]: f["runs"]["sgd"] for f in files if "sgd" in f["runs"]}
    rows, lines, fits = [], [], []
    jobs = sorted(((f["labels"], seed, f["rho"], arm, ck) for f in files for arm, seeds in f["runs"].items()
                   for seed, ck in seeds.items()), key=lambda j: (j[0], j[1]))
    tensors = None
    for labels, seed, rho, arm, ck in progress(jobs, desc="evaluate"):
        final = ck["final"]
        if tensors is None or tensors[0] != (labels, seed):
            t = load_tensors(df, p.data.source, seed, labels, device)
            x_h, y_h = t["x_train"][:p.hessian_samples], t["y_train"][:p.hessian_samples]
            x_i, y_i = t["x_train"][:p.interpolation_samples], t["y_train"][:p.interpolation_samples]
            tensors = ((labels, seed), t)
            model.load_state_dict(sgd[labels][seed]["switch"]["model"])
            switch_loss, switch_acc = loss_acc(model, t["x_train"], t["y_train"])
            fits.append({"labels": labels, "seed": seed, "switch_train_loss": switch_loss,
                         "switch_train_acc": switch_acc})

        def branch_point(arm_):  # w_switch of a late arm: SGD's weights where it branched off
            k = late_k(p, arm_)
            return sgd[labels][seed]["switch" if k == p.late_epochs else p.epochs - k]["model"]

        model.load_state_dict(final["model"])
        test_loss, test_acc = loss_acc(model, t["x_test"], t["y_test"])
        train_loss, train_acc = loss_acc(model, t["x_train"], t["y_train"])
        # On the network's device: papers.common.hessian.lanczos draws its start vector from the seed's CPU generator
        # and moves it there, so the same seed gives the same start on a GPU. (Taken on the CPU, the full scale's
        # 20 Hessian-vector products on 5,000 images per network would cost hours of CPU per network.)
        eigs = analysis.sharpness(model, x_h, y_h, iters=p.lanczos_iters, k=p.eigenvalues, seed=seed)
        robust = analysis.robust_accuracy(model, t["x_test"], t["y_test"], p.attack)
        late = arm.startswith("late")
        rows.append({"labels": labels, "arm": arm, "rho": rho if is_sam_arm(arm) else NO_SAM, "seed": seed,
                     "test_acc": test_acc, "test_loss": test_loss, "train_acc": train_acc, "train_loss": train_loss,
                     "robust_acc": robust,
                     "distance": analysis.state_distance(branch_point(arm), final["model"]) if late else np.nan,
                     **{f"eig_{i + 1}": e for i, e in enumerate(eigs)}})
        if labels == "clean" and arm in ("late_sam", "late_adv"):
            losses, accs = analysis.loss_along_line(model, branch_point(arm), final["model"], alpha_grid(p), x_i, y_i)
            lines.append(pd.DataFrame({"kind": f"switch_to_{arm}", "rho": rho if is_sam_arm(arm) else NO_SAM,
                                       "seed": seed, "alpha": alpha_grid(p), "loss": losses, "acc": accs}))
        if labels == "clean" and arm == "late_sam" and rho == p.rho and p.seeds >= 2:
            # Control of (d): a line as long as late SAM's, from the same w_switch towards the next seed's SGD solution.
            w_switch = branch_point("late_sam")
            reach = analysis.state_distance(w_switch, final["model"])
            other = sgd[labels][(seed + 1) % p.seeds]["final"]["model"]
            elsewhere = analysis.toward(w_switch, other, reach)
            losses, accs = analysis.loss_along_line(model, w_switch, elsewhere, alpha_grid(p), x_i, y_i)
            lines.append(pd.DataFrame({"kind": "matched_distance", "rho": p.rho, "seed": seed, "alpha": alpha_grid(p),
                                       "loss": losses, "acc": accs,
                                       "valley_distance": analysis.state_distance(w_switch, other)}))
    return pd.DataFrame(rows), pd.concat(lines, ignore_index=True), pd.DataFrame(fits)
