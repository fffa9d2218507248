"""The sam_late DAG's stages:
prepare (data) -> train_sgd -> train_sam (one job per rho) and train_adv, both branching from SGD's
checkpoint at the switch epoch -> evaluate (sharpness, line losses, robust accuracy) -> report.
Each function takes its parameters and paths explicitly, so it also runs without Snakemake.
"""
from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from papers.common.io import read_parquet, read_parquets, write_parquet
from papers.common.params import to_dict
from papers.common.progress import progress
from papers.common.seeding import seed_everything
from papers.sam_late import data as D
from papers.sam_late.params import ADV_ARMS, SAM_ARMS, is_sam_arm, parse, sweep_arm

log = logging.getLogger(__name__)

N_CLASSES = 10
NO_SAM = 0.0  # the rho column of arms that never take a SAM step


# ---- prepare ---------------------------------------------------------------------------------
def prepare(*, cfg, data):
    """The training and test sets, pixels in [0, 1], with `label_noise` of the training labels corrupted.

    Digits: the first train_size rows train, the next test_size test (the rows come roughly in order of
    the writers, so the test digits are mostly by other people). CIFAR-10: its own split.
    """
    p = parse(cfg)
    d = p.data
    if d.source == "digits":
        x, y = D.load_digits(d.path)
        x_tr, y_tr = x[:d.train_size], y[:d.train_size]
        x_te, y_te = x[d.train_size:d.train_size + d.test_size], y[d.train_size:d.train_size + d.test_size]
    else:
        if d.path is None:
            raise ValueError("sam_late.data.path: the cifar10 source needs the folder cifar-10-batches-py "
                             "(nothing is downloaded)")
        x_tr, y_tr = D.load_cifar(d.path, "train")
        x_te, y_te = D.load_cifar(d.path, "test")
        x_tr, y_tr, x_te, y_te = x_tr[:d.train_size], y_tr[:d.train_size], x_te[:d.test_size], y_te[:d.test_size]
    noisy = D.corrupt_labels(y_tr, d.label_noise, N_CLASSES, np.random.default_rng(d.noise_seed))
    x_all = np.concatenate([x_tr, x_te]).reshape(len(x_tr) + len(x_te), -1)  # (N, D)
    df = pd.DataFrame(x_all, columns=[f"px{i}" for i in range(x_all.shape[1])])
    df.insert(0, "split", ["train"] * len(x_tr) + ["test"] * len(x_te))
    df.insert(1, "label", np.concatenate([noisy, y_te]))  # what training sees
    df.insert(2, "clean_label", np.concatenate([y_tr, y_te]))
    log.info("%d training rows (%d labels corrupted), %d test rows", len(x_tr), int((noisy != y_tr).sum()), len(x_te))
    write_parquet(df, data)


def load_tensors(path, source: str, device: str = "cpu") -> dict:
    """x_train (N, *shape), y_train (noisy), clean_train, x_test, y_test as torch tensors."""
    import torch

    df = read_parquet(path)
    shape = D.DIGITS_SHAPE if source == "digits" else D.CIFAR_SHAPE
    pixels = [c for c in df.columns if c.startswith("px")]
    out = {}
    for split in ("train", "test"):
        part = df[df.split == split]
        out[f"x_{split}"] = torch.tensor(part[pixels].to_numpy(np.float32)).reshape(-1, *shape).to(device)
        out[f"y_{split}"] = torch.tensor(part.label.to_numpy()).to(device)
    out["clean_train"] = torch.tensor(df[df.split == "train"].clean_label.to_numpy()).to(device)
    return out


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _new_model(p, seed: int, device: str):
    """The initialisation depends on the seed only, so every arm of a seed starts from the same weights."""
    import torch

    from papers.sam_late.model import build

    torch.manual_seed(seed)
    shape = D.DIGITS_SHAPE if p.data.source == "digits" else D.CIFAR_SHAPE
    return build(p.model, shape, p.hidden, N_CLASSES).to(device)


# ---- train -----------------------------------------------------------------------------------
def _train_arms(p, data_path, arms, rho, sgd_runs, history, escape, checkpoints):
    """Train `arms` for every seed; late arms start from SGD's checkpoint at their switch epoch.

    `arms`: names of ARMS, or (name, k) for a late-SAM arm of the switch sweep (SAM for the last k epochs).
    """
    import torch

    from papers.sam_late.train import train

    device = _device()
    tensors = load_tensors(data_path, p.data.source, device)
    histories, escapes, runs = [], [], {}
    for job in arms:
        name, arm, switch = ((job, job, p.switch_epoch) if isinstance(job, str)
                             else (job[0], "late_sam", p.epochs - job[1]))
        runs[name] = {}
        for seed in range(p.seeds):
            seed_everything(seed)
            model = _new_model(p, seed, device)
            late = arm.startswith("late")
            start = (sgd_runs[seed]["switch" if switch == p.switch_epoch else switch] if late else None)
            h, e, ckpts = train(model, tensors, p, arm=arm, rho=rho, seed=seed, start=start, switch=switch,
                                track=late or arm == "sgd",
                                progress=lambda it: progress(it, desc=f"{name} rho={rho} seed={seed}"))
            if late:  # the branch points are SGD's, stored with the SGD runs
                ckpts = {"final": ckpts["final"]}
            runs[name][seed] = ckpts
            for df in (h, e):
                df.insert(0, "arm", name)
                df.insert(1, "rho", rho if is_sam_arm(name) else NO_SAM)
                df.insert(2, "seed", seed)
            histories.append(h)
            escapes.append(e)
            log.info("%s rho=%s seed=%d: test accuracy %.4f", name, rho, seed, h.test_acc.iloc[-1])
    write_parquet(pd.concat(histories, ignore_index=True), history)
    write_parquet(pd.concat(escapes, ignore_index=True), escape)
    torch.save({"params": to_dict(p), "rho": rho, "runs": runs}, checkpoints)


def _sgd_runs(path) -> dict:
    import torch

    return torch.load(path, weights_only=False)["runs"]["sgd"]


def train_sgd(*, cfg, data, history, escape, checkpoints):
    """SGD throughout, every seed; its checkpoint at the switch epoch is where the late arms branch off."""
    p = parse(cfg)
    _train_arms(p, data, ["sgd"], NO_SAM, None, history, escape, checkpoints)


def train_sam(*, cfg, data, sgd, rho, history, escape, checkpoints):
    """SAM throughout and late SAM (from SGD's switch checkpoint) at one rho, every seed; at the main rho also
    early SAM and the switch sweep's late-SAM arms (each from SGD's checkpoint at its own switch epoch)."""
    p = parse(cfg)
    arms = (list(SAM_ARMS) + [(sweep_arm(k), k) for k in p.late_sweep]) if rho == p.rho else ["sam", "late_sam"]
    _train_arms(p, data, arms, rho, _sgd_runs(sgd), history, escape, checkpoints)


def train_adv(*, cfg, data, sgd, history, escape, checkpoints):
    """Adversarial training throughout and late adversarial training (from SGD's switch checkpoint)."""
    p = parse(cfg)
    _train_arms(p, data, list(ADV_ARMS), NO_SAM, _sgd_runs(sgd), history, escape, checkpoints)


# ---- evaluate --------------------------------------------------------------------------------
def alpha_grid(p) -> np.ndarray:
    """The interpolation coefficients: an even grid over interpolation_range, with 0 and 1 always on it."""
    grid = np.linspace(*p.interpolation_range, p.interpolation_points)
    return np.unique(np.round(np.concatenate([grid, [0.0, 1.0]]), 10))


def evaluate(*, cfg, data, sgd, sam, adv, metrics, interpolation):
    """Per final network: test accuracy, training loss, top Hessian eigenvalues, robust accuracy, and for
    late arms the distance ||w_final - w_switch||; the loss along the lines w_switch -> late arm's final
    weights, and the control line of claim (d): from w_switch, as far as late SAM went (matched distance),
    towards another seed's SGD solution (another valley: another initialisation)."""
    import torch

    from papers.sam_late import analysis
    from papers.sam_late.train import evaluate as loss_acc

    p = parse(cfg)
    device = _device()
    t = load_tensors(data, p.data.source, device)
    x_h, y_h = t["x_train"][:p.hessian_samples], t["y_train"][:p.hessian_samples]
    x_i, y_i = t["x_train"][:p.interpolation_samples], t["y_train"][:p.interpolation_samples]
    files = [torch.load(f, weights_only=False) for f in [sgd, *sam, adv]]
    sgd_runs = files[0]["runs"]["sgd"]

    def branch_point(arm, seed):  # w_switch of a late arm: SGD's weights where it branched off
        k = int(arm.rsplit("_k", 1)[1]) if arm.startswith("late_sam_k") else p.late_epochs
        return sgd_runs[seed]["switch" if k == p.late_epochs else p.epochs - k]["model"]

    rows, lines = [], []
    model = _new_model(p, 0, device)
    jobs = [(f["rho"], arm, seed, ck["final"]) for f in files for arm, seeds in f["runs"].items()
            for seed, ck in seeds.items()]
    for rho, arm, seed, final in progress(jobs, desc="evaluate"):
        model.load_state_dict(final["model"])
        test_loss, test_acc = loss_acc(model, t["x_test"], t["y_test"])
        train_loss, train_acc = loss_acc(model, t["x_train"], t["y_train"])
        # papers.common.hessian draws its Lanczos start vector on the CPU, so the Hessian is taken there.
        eigs = analysis.sharpness(model.cpu(), x_h.cpu(), y_h.cpu(), iters=p.lanczos_iters, k=p.eigenvalues, seed=seed)
        model.to(device)
        robust = analysis.robust_accuracy(model, t["x_test"], t["y_test"], p.attack)
        late = arm.startswith("late")
        rows.append({"arm": arm, "rho": rho if is_sam_arm(arm) else NO_SAM, "seed": seed, "test_acc": test_acc,
                     "test_loss": test_loss, "train_acc": train_acc, "train_loss": train_loss, "robust_acc": robust,
                     "distance": analysis.state_distance(branch_point(arm, seed), final["model"]) if late else np.nan,
                     **{f"eig_{i + 1}": e for i, e in enumerate(eigs)}})
        if arm in ("late_sam", "late_adv"):
            losses, accs = analysis.loss_along_line(model, branch_point(arm, seed), final["model"], alpha_grid(p),
                                                    x_i, y_i)
            lines.append(pd.DataFrame({"kind": f"switch_to_{arm}", "rho": rho if is_sam_arm(arm) else NO_SAM,
                                       "seed": seed, "alpha": alpha_grid(p), "loss": losses, "acc": accs}))
    # Control of (d): the same line length as late SAM's (main rho), towards another valley.
    main = next(f for f in files[1:-1] if f["rho"] == p.rho)["runs"]["late_sam"]
    if p.seeds >= 2:
        for seed in range(p.seeds):
            w_switch = branch_point("late_sam", seed)
            reach = analysis.state_distance(w_switch, main[seed]["final"]["model"])
            other = sgd_runs[(seed + 1) % p.seeds]["final"]["model"]
            elsewhere = analysis.toward(w_switch, other, reach)
            losses, accs = analysis.loss_along_line(model, w_switch, elsewhere, alpha_grid(p), x_i, y_i)
            lines.append(pd.DataFrame({"kind": "matched_distance", "rho": p.rho, "seed": seed, "alpha": alpha_grid(p),
                                       "loss": losses, "acc": accs,
                                       "valley_distance": analysis.state_distance(w_switch, other)}))
    write_parquet(pd.DataFrame(rows), metrics)
    write_parquet(pd.concat(lines, ignore_index=True), interpolation)


# ---- report ----------------------------------------------------------------------------------
TITLE = "P6 sam_late: Sharpness-Aware Minimization efficiently selects flatter minima late in training"

PAPER = {  # the paper's direction for each arm
    "sgd": "baseline",
    "sam": "lower test error and flatter than SGD",
    "late_sam": "nearly the test error and sharpness of SAM throughout",
    "early_sam": "close to SGD: the late phase decides",
    "adv": "robust baseline (AT throughout)",
    "late_adv": "nearly the robust accuracy of AT throughout",
}


def _std(values) -> float:
    values = np.asarray(values, dtype=float)
    return float(values.std(ddof=1)) if values.size > 1 else 0.0


def arm_means(m: pd.DataFrame) -> pd.DataFrame:
    """Mean and std over seeds of every measured column, per (arm, rho)."""
    cols = ["test_acc", "eig_1", "robust_acc", "train_loss", "train_acc"]
    g = m.groupby(["arm", "rho"], sort=False)[cols]
    return g.mean().join(g.agg(_std), rsuffix="_std").reset_index()


def _gap_cell(frac: dict) -> str:
    """The table's 'gap closed' cell: accuracy / sharpness shares, or the robust share for late AT."""
    def share(x):
        return "n/a" if np.isnan(x) else f"{x:.2f}"

    if "robust" in frac:
        return f"robust {share(frac['robust'])}"
    return f"{share(frac['acc'])} / {share(frac['sharpness'])}"


def _row_order(p) -> list[tuple[str, float]]:
    order = [("sgd", NO_SAM), *[(arm, p.rho) for arm in SAM_ARMS]]
    order += [(sweep_arm(k), p.rho) for k in sorted(p.late_sweep)]
    for rho in [r for r in p.rhos if r != p.rho]:
        order += [("sam", rho), ("late_sam", rho)]
    return order + [(arm, NO_SAM) for arm in ADV_ARMS]


def late_epochs_of(p, arm: str) -> int:
    """Epochs of SAM (or AT) at the end of a late arm, at the start of early SAM; 0 for the others."""
    if arm.startswith("late_sam_k"):
        return int(arm.rsplit("_k", 1)[1])
    return p.late_epochs if arm.startswith(("late", "early")) else 0


def seed_fractions(m: pd.DataFrame, arm: str, full: str, col: str, rho: float, full_rho: float) -> np.ndarray:
    """Per seed, the share of the SGD -> `full` gap that `arm` closes: (arm - SGD) / (full - SGD), paired by
    seed (every arm of a seed starts from the same weights; late arms branch from that seed's SGD run)."""
    from papers.sam_late.analysis import gap_fraction

    return gap_fraction(_per_seed(m, "sgd", col), _per_seed(m, full, col, full_rho), _per_seed(m, arm, col, rho))


def escape_table(escapes: pd.DataFrame, rho: float) -> pd.DataFrame:
    """Per seed: the exponential and power-law fits of ||w_t - w_switch|| for late SAM (at `rho`) and SGD."""
    from papers.sam_late.analysis import escape_fits

    keep = (escapes.arm == "sgd") | ((escapes.arm == "late_sam") & np.isclose(escapes.rho, rho))
    rows = [{"arm": arm, "seed": seed, **escape_fits(g.step, g.distance)}
            for (arm, seed), g in escapes[keep].groupby(["arm", "seed"])]
    return pd.DataFrame(rows, columns=["arm", "seed", "rate", "r2_exp", "power", "r2_pow"])


def report(*, cfg, scale, metrics, interpolation, histories, escapes, benchmarks, table_md, table_csv, claims,
           params_json, report_md, fig_curves, fig_sweep, fig_mechanism, fig_robust, fig_switch):
    from papers.common.claims import write_claims
    from papers.common.io import write_json
    from papers.common.report import write_report
    from papers.common.tables import mean_std, write_table
    from papers.sam_late.analysis import barrier

    p = parse(cfg)
    m = read_parquet(metrics)
    means = arm_means(m).set_index(["arm", "rho"])
    lines = read_parquet(interpolation)
    hist = read_parquets(histories)
    esc = read_parquets(escapes)

    def mean(arm, col, rho=NO_SAM):
        return float(means.loc[(arm, rho), col])

    # --- gap fractions: the mean over seeds of each seed's share of the SGD -> full-arm gap (paired by seed).
    # A share is only defined where SAM throughout beats SGD (more accurate, flatter); NaN elsewhere.
    fractions = {}
    for arm, rho in _row_order(p):
        if not arm.startswith(("late_sam", "early_sam")):
            continue
        acc_up = mean("sam", "test_acc", rho) > mean("sgd", "test_acc")
        flatter = mean("sam", "eig_1", rho) < mean("sgd", "eig_1")
        fractions[(arm, rho)] = {
            "acc": float(seed_fractions(m, arm, "sam", "test_acc", rho, rho).mean()) if acc_up else np.nan,
            "sharpness": float(seed_fractions(m, arm, "sam", "eig_1", rho, rho).mean()) if flatter else np.nan}
    robust_frac = (float(seed_fractions(m, "late_adv", "adv", "robust_acc", NO_SAM, NO_SAM).mean())
                   if mean("adv", "robust_acc") > mean("sgd", "robust_acc") else np.nan)

    # --- table
    rows = []
    for arm, rho in _row_order(p):
        g = m[(m.arm == arm) & np.isclose(m.rho, rho)]
        frac = fractions.get((arm, rho))
        if arm == "late_adv":
            frac = {"acc": np.nan, "sharpness": np.nan, "robust": robust_frac}
        k = late_epochs_of(p, arm)
        rows.append({"arm": arm, "rho": rho if is_sam_arm(arm) else "-",
                     "late epochs": k if arm.startswith("late") else "-",
                     "test accuracy": mean_std(g.test_acc), "train accuracy": mean_std(g.train_acc),
                     "top eigenvalue": mean_std(g.eig_1),
                     "robust accuracy": mean_std(g.robust_acc),
                     "gap closed (acc / sharpness)": _gap_cell(frac) if frac else "-",
                     "paper": PAPER["late_sam" if arm.startswith("late_sam") else arm],
                     # csv
                     "rho_value": rho, "late_epochs": k, "test_acc_mean": g.test_acc.mean(),
                     "test_acc_std": _std(g.test_acc), "train_acc_mean": g.train_acc.mean(),
                     "eig_1_mean": g.eig_1.mean(), "eig_1_std": _std(g.eig_1), "robust_acc_mean": g.robust_acc.mean(),
                     "robust_acc_std": _std(g.robust_acc), "acc_gap_closed": (frac or {}).get("acc", np.nan),
                     "sharpness_gap_closed": (frac or {}).get("sharpness", np.nan),
                     "robust_gap_closed": (frac or {}).get("robust", np.nan)})
    table = pd.DataFrame(rows)
    d = p.data
    caption = (f"{d.source} ({d.train_size} train / {d.test_size} test, {d.label_noise:.0%} of training labels "
               f"corrupted), {p.model}, {p.epochs} epochs (lr x {p.lr_gamma} from epochs {list(p.lr_milestones)}); late "
               f"arms switch for the last `late epochs` epochs (late_sam_kK: the switch sweep), early SAM uses SAM "
               f"for the first {p.late_epochs}. Mean +- std over {p.seeds} seeds. Train accuracy: on the (noisy) "
               f"training labels. Top eigenvalue: "
               f"the Hessian's largest, on the first {p.hessian_samples} training examples. Robust accuracy: L-inf PGD, "
               f"epsilon {p.attack.epsilon}, {p.attack.steps} steps, on the test set. Gap closed: mean over seeds of (arm - SGD) / "
               f"(SAM at the same rho - SGD), per seed, n/a where SAM is not better than SGD; for late AT, of the SGD -> AT "
               f"gap in robust accuracy.")
    write_table(table[["arm", "rho", "late epochs", "test accuracy", "train accuracy", "top eigenvalue",
                       "robust accuracy", "gap closed (acc / sharpness)", "paper"]], table_md, table_csv,
                caption=caption,
                csv_df=table[["arm", "rho_value", "late_epochs", "test_acc_mean", "test_acc_std", "train_acc_mean",
                              "eig_1_mean", "eig_1_std", "robust_acc_mean", "robust_acc_std", "acc_gap_closed",
                              "sharpness_gap_closed", "robust_gap_closed"]].rename(columns={"rho_value": "rho"}))

    # --- mechanism: escape fits and barriers
    fits = escape_table(esc, p.rho)
    sam_fits = fits[fits.arm == "late_sam"].set_index("seed")
    sgd_fits = fits[fits.arm == "sgd"].set_index("seed")
    barriers = (lines.groupby(["kind", "rho", "seed"])[["alpha", "loss"]]
                .apply(lambda g: barrier(g.alpha, g.loss)).rename("barrier").reset_index())
    late_barriers = barriers[(barriers.kind == "switch_to_late_sam") & np.isclose(barriers.rho, p.rho)].barrier
    control_barriers = barriers[barriers.kind == "matched_distance"].barrier

    _figures(p, hist, m, esc, sam_fits, lines, fig_curves, fig_sweep, fig_mechanism, fig_robust)
    _switch_figure(p, m, fig_switch)

    # --- claims: decided on per-seed values (every arm of a seed starts from the same weights and the
    # late arms branch from that seed's SGD run, so arms are paired by seed), each with a negative control.
    valley = (lines[lines.kind == "matched_distance"].groupby("seed").valley_distance.first().to_numpy()
              if "valley_distance" in lines else np.array([]))
    claims_list = sam_late_claims(p, m, sam_fits, sgd_fits, late_barriers, control_barriers, valley)
    write_claims(claims_list, claims, paper="sam_late", scale=scale)
    write_json(to_dict(p), params_json)

    sweep = sorted([p.late_epochs, *p.late_sweep])
    what = (f"{d.source}: {d.train_size} training images ({d.label_noise:.0%} of their labels moved to another class "
            f"at random) and {d.test_size} test images, pixels in [0, 1]. Network {p.model}"
            f"{' ' + 'x'.join(str(h) for h in p.hidden) if p.model == 'mlp' else ''}, mini-batch {p.batch_size}, "
            f"lr {p.lr} ({f'x {p.lr_gamma} from epochs {list(p.lr_milestones)}' if p.lr_milestones else 'constant'}), "
            f"momentum {p.momentum}, weight decay {p.weight_decay}, label smoothing {p.label_smoothing}, {p.epochs} "
            f"epochs, {p.seeds} seeds. Arms: SGD; SAM throughout; late SAM (SGD, then SAM for the last K epochs, "
            f"branched from the SGD run's checkpoint at epoch {p.epochs} - K; K = {p.late_epochs} for the main arm, "
            f"the switch sweep K in {sweep} at the main rho); early SAM (SAM for the first {p.late_epochs} epochs, "
            f"then SGD; main rho); SAM and late SAM at rho in {list(p.rhos)} (main rho {p.rho}); adversarial "
            f"training (L-inf PGD, epsilon {p.attack.epsilon}, step {p.attack.step_size}, {p.attack.steps} steps, "
            f"random start) throughout and in the last {p.late_epochs} epochs. Sharpness: the top {p.eigenvalues} "
            f"Hessian eigenvalues of the training cross-entropy on the first {p.hessian_samples} training examples, "
            f"{p.lanczos_iters} Lanczos steps. Escape: ||w_t - w_switch|| over the first {p.escape_steps} steps after "
            f"the switch, fitted on a log scale against t (exponential) and log t (power law). Valley: training loss "
            f"on the first {p.interpolation_samples} examples at {len(alpha_grid(p))} points of the line from "
            f"w_switch to the late-SAM solution, alpha in {list(p.interpolation_range)}; the control line starts at "
            f"the same w_switch and is as long, but points at the next seed's SGD solution.")
    # Where SAM throughout fails to train (a rho too large for the start of training), say so from the data.
    collapsed = [r for r in p.rhos if mean("sam", "train_acc", r) < 0.5 * mean("sgd", "train_acc")]
    first = hist[(hist.arm == "sam") & (hist.epoch == 0)].groupby("rho").train_loss.mean()
    last = hist[(hist.arm == "sam") & (hist.epoch == p.epochs - 1)].groupby("rho").train_loss.mean()
    collapse = "".join(
        f" SAM throughout at rho {r} does not train: its training accuracy ends at {mean('sam', 'train_acc', r):.2f} "
        f"(test {mean('sam', 'test_acc', r):.2f}) and its mini-batch training loss goes from "
        f"{float(first.loc[r]):.2f} in the first epoch to {float(last.loc[r]):.2f} in the last (chance: ln "
        f"{N_CLASSES} = {np.log(N_CLASSES):.2f}), while late SAM at the same rho, which starts from SGD's trained "
        f"weights, ends at test accuracy {mean('late_sam', 'test_acc', r):.2f}. An optimisation failure at the start "
        "of training, not a bug (the SAM step matches its closed form in the unit tests): normalised SAM takes its "
        "gradient at w + rho g/||g||, a step of length rho whatever ||g|| is, and near the initialisation, where "
        "the loss is flat and ||g|| small, a step this long lands where the gradient no longer points downhill "
        "from w; SAM throughout is reported at this rho but its 'gap' is not used." for r in collapsed)
    sgd_train = mean("sgd", "train_acc")
    differences = (
        "The paper trains ResNets, WideResNets and VGG on CIFAR-10/100 with clean labels (e.g. WideResNet-16-8, "
        "switching at epoch 175 of 200); the default scale trains a small MLP on sklearn's 8x8 digits (the only "
        "image set that ships offline), with 20% of the training labels corrupted so that SGD and SAM generalise "
        f"differently at all. As in the paper the learning rate is decayed (x {p.lr_gamma} at epochs "
        f"{list(p.lr_milestones)}) before every switch of the sweep, so late SAM starts where SGD has fitted the "
        f"training set: SGD ends fitting {sgd_train:.0%} of the noisy training labels (training cross-entropy "
        f"{mean('sgd', 'train_loss'):.2f}). The initial lr ({p.lr}) is higher than the official 0.01 so that SGD "
        "fits the noisy labels before the decay (at 0.01 it fits about 80% of them). The full scale (config/full.yaml) is the "
        "official script's VGG-16-BN on CIFAR-10 from a user-given folder. The optimiser, the SAM step, the "
        "momentum restart at the switch (two optimiser objects, as in the official code), label smoothing, the PGD "
        "attack and the line interpolation follow the official code; PGD takes 3 steps (official 10) for the "
        "budget. Our deviations: inputs are not normalised (one pipeline for SAM and AT, pixels in [0, 1]); the "
        f"Hessian is taken in eval mode on the first {p.hessian_samples} training examples with our Lanczos (the "
        "official code uses train mode and scipy's eigsh); the escape is measured as the distance from w_switch "
        "during normal late-SAM training (escape.py tracks the training loss); the barrier is our summary of the "
        "line the paper plots, with a control line of matched length; gap shares are per seed (paired). "
        "The former design of this paper (constant lr 0.005) saw SAM throughout at rho 0.6 stay at chance: its "
        "training loss stayed on the plateau at ln 10 that a freshly initialised network starts on, for all 60 "
        "epochs, while late and early SAM at that rho trained normally; at this design's lr SAM throughout at "
        + ", ".join(f"rho {r} ends at training accuracy {mean('sam', 'train_acc', r):.2f}" for r in p.rhos)
        + "." + collapse)
    write_report(report_md, title=TITLE, scale=scale, what_was_run=what, table_md=table_md,
                 figures=[fig_curves, fig_switch, fig_sweep, fig_mechanism, fig_robust], claims=claims_list,
                 benchmarks=benchmarks, differences=differences)


def _per_seed(m: pd.DataFrame, arm: str, col: str, rho: float = NO_SAM) -> np.ndarray:
    """One arm's per-seed values of `col`, in seed order (arms share seeds 0 .. seeds - 1)."""
    g = m[(m.arm == arm) & np.isclose(m.rho, rho)].sort_values("seed")
    return g[col].to_numpy(dtype=float)


def sam_late_claims(p, m: pd.DataFrame, sam_fits: pd.DataFrame, sgd_fits: pd.DataFrame, late_barriers,
                    control_barriers, valley_distances=()) -> list:
    """The five claims, each decided on Student-t intervals over seeds against a threshold of the config.

    Gap fractions are paired per seed, (arm - SGD) / (full arm - SGD) (every arm of a seed starts from the
    same weights, late arms branch from that seed's SGD run), with full arm - SGD > 0 tested alongside (the
    gap exists; without it a share is a ratio of noise). 'Better' is higher accuracy, lower top eigenvalue.
    `m`: evaluate's metrics (one row per arm, rho, seed); `sam_fits`/`sgd_fits`: escape fits per seed;
    barriers per seed: w_switch -> late SAM, and the matched-distance control line; `valley_distances`: per seed,
    ||w_switch - the next seed's SGD solution||, the length of the whole line the control walks the start of.
    """
    from papers.common.claims import Claim, Control, all_of, mean_test, paired_test

    thr, ratio, rho = p.gap_fraction_min, p.early_ratio_max, p.rho
    sign = {"test_acc": 1.0, "robust_acc": 1.0, "eig_1": -1.0}  # +1: higher is better
    what = {"test_acc": "accuracy", "robust_acc": "robust accuracy", "eig_1": "sharpness"}

    def gain(arm, col, arm_rho=rho):  # per seed: how much better than SGD the arm ends
        return sign[col] * (_per_seed(m, arm, col, arm_rho) - _per_seed(m, "sgd", col))

    def gap_exists(full, col, full_rho=rho):
        return mean_test(gain(full, col, full_rho), threshold=0.0, direction=">", what="seeds",
                         name=f"{what[col]}: {full} better than SGD")

    def share(arm, full, col, arm_rho=rho, full_rho=rho):
        return seed_fractions(m, arm, full, col, arm_rho, full_rho)

    def closes(arm, full, col, arm_rho=rho, full_rho=rho):
        return mean_test(share(arm, full, col, arm_rho, full_rho), threshold=thr, direction=">", what="seeds",
                         name=f"{what[col]}: share of the SGD -> {full} gap that {arm} closes")

    sweep = sorted([p.late_epochs, *p.late_sweep])
    name_of = {k: "late_sam" if k == p.late_epochs else sweep_arm(k) for k in sweep}
    gaps = [gap_exists("sam", "test_acc"), gap_exists("sam", "eig_1")]
    noise = ("" if gaps[0].verdict == "holds" else
             f"SAM throughout is not more accurate than SGD beyond seed noise ({gaps[0].describe()}), so the "
             "accuracy share of a gap is a ratio of noise-level differences" if gaps[0].verdict == "inconclusive" else
             f"SAM throughout is less accurate than SGD ({gaps[0].describe()}): there is no accuracy gap to close")

    # (a) at every switch of the sweep, late SAM closes > thr of both gaps; control: early SAM
    ev_a = gaps + [closes(name_of[k], "sam", col) for k in sweep for col in ("test_acc", "eig_1")]
    ctl_a = [closes("early_sam", "sam", "test_acc"), closes("early_sam", "sam", "eig_1")]
    a = Claim(
        "a", f"Late SAM (the last K of {p.epochs} epochs, for every K in the switch sweep {sweep}) closes most of the "
             "gap between SGD and SAM throughout, in test accuracy and in sharpness.",
        "a few epochs of SAM at the end give nearly the same generalization and sharpness as full SAM",
        {**{f"acc_gap_closed_k{k}": float(share(name_of[k], "sam", "test_acc").mean()) for k in sweep},
         **{f"sharpness_gap_closed_k{k}": float(share(name_of[k], "sam", "eig_1").mean()) for k in sweep},
         "test_acc_sgd": _per_seed(m, "sgd", "test_acc").mean(), "test_acc_sam": _per_seed(m, "sam", "test_acc", rho).mean(),
         "eig_sgd": _per_seed(m, "sgd", "eig_1").mean(), "eig_sam": _per_seed(m, "sam", "eig_1", rho).mean()},
        f"at rho = {rho}, over {p.seeds} seeds: the 95% t intervals of SAM - SGD lie on the better side of 0 (the gap "
        f"exists) and, at every K of the sweep, those of the per-seed share (late SAM - SGD) / (SAM - SGD) above "
        f"gap_fraction_min = {thr} ('most' read as more than half), in test accuracy and in top Hessian eigenvalue",
        ev_a, Control(f"early SAM at rho = {rho}: SAM for the first {p.late_epochs} epochs, then SGD (the paper's "
                      "mechanism, SAM in the late phase, absent); the same share test", ctl_a),
        note="; ".join(x for x in (noise, (
            f"late SAM keeps fitting {_per_seed(m, 'late_sam', 'train_acc', rho).mean():.0%} of the noisy training "
            f"labels (SGD {_per_seed(m, 'sgd', 'train_acc').mean():.0%}, SAM throughout "
            f"{_per_seed(m, 'sam', 'train_acc', rho).mean():.0%}, about the {1 - p.data.label_noise:.0%} that are "
            "clean): at the decayed lr a few epochs of SAM do not undo SGD's memorisation of the noisy labels, "
            "which is where SAM's advantage comes from on this problem; the shares grow with K ("
            + ", ".join(f"K = {k}: {float(np.nanmean(share(name_of[k], 'sam', 'test_acc'))):.2f} / "
                        f"{float(np.nanmean(share(name_of[k], 'sam', 'eig_1'))):.2f}" for k in sweep)
            + ", accuracy / sharpness)") if all_of([e.verdict for e in ev_a]) == "does not hold" else "") if x))

    # (b) early SAM's share <= ratio x late SAM's; control: the longest late-SAM arm of the sweep in early
    # SAM's place (both arms end with SAM, so the late phase cannot tell them apart)
    def much_less(other, col):
        return mean_test(ratio * share("late_sam", "sam", col) - share(other, "sam", col), threshold=0.0,
                         direction=">", what="seeds",
                         name=f"{what[col]}: {ratio} x share(late_sam) - share({other})")

    ev_b = gaps + [much_less("early_sam", "test_acc"), much_less("early_sam", "eig_1")]
    longest = name_of[sweep[-1]]
    ctl_b = (Control(f"{longest} (SAM for the last {sweep[-1]} epochs) in early SAM's place: both arms take SAM in "
                     "the late phase (the paper's mechanism, a different late-phase optimiser, absent); the same test",
                     [much_less(longest, "test_acc"), much_less(longest, "eig_1")])
             if longest != "late_sam" else
             Control("no switch sweep configured (late_sweep empty): no second late-SAM arm to compare"))
    b = Claim(
        "b", f"Early SAM (the first {p.late_epochs} epochs, then SGD) closes much less of the gap than late SAM.",
        "the optimiser of the late phase shapes the final solution; early SAM ends close to SGD",
        {"acc_gap_closed": float(share("early_sam", "sam", "test_acc").mean()),
         "sharpness_gap_closed": float(share("early_sam", "sam", "eig_1").mean()),
         "test_acc_early": _per_seed(m, "early_sam", "test_acc", rho).mean(),
         "eig_early": _per_seed(m, "early_sam", "eig_1", rho).mean()},
        f"with the gap SAM - SGD established as in (a), the 95% t intervals over {p.seeds} seeds of {ratio} x "
        f"share(late SAM) - share(early SAM) (per-seed shares as in (a)) lie above 0 (early SAM's share at most "
        f"early_ratio_max = {ratio} of late SAM's: 'much less'), in test accuracy and in top Hessian eigenvalue",
        ev_b, ctl_b, note=noise)

    # (c) exponential escape; control: SGD's own drift from the same w_switch
    complete = len(sam_fits) == p.seeds and len(sgd_fits) == p.seeds

    def shape(fits, arm):
        return [mean_test(fits.r2_exp, threshold=p.escape_r2_min, direction=">", what="seeds",
                          name=f"{arm}: R^2 of the exponential fit"),
                mean_test(fits.r2_exp - fits.r2_pow, threshold=0.0, direction=">", what="seeds",
                          name=f"{arm}: R^2 exponential - R^2 power law")]

    seeds_c = sam_fits.index.intersection(sgd_fits.index)
    ev_c = shape(sam_fits, "late_sam") + [paired_test(sam_fits.rate.reindex(seeds_c), sgd_fits.rate.reindex(seeds_c),
                                                       name="escape rate late_sam - SGD (per step)")]
    sgd_acc = _per_seed(m, "sgd", "train_acc").mean()
    ev_c_verdict = all_of([e.verdict for e in ev_c])
    c = Claim(
        "c", "After the switch, SAM escapes the SGD solution exponentially: log ||w_t - w_switch|| grows "
             f"linearly over the first {p.escape_steps} steps.",
        "SAM first escapes the minimum found by SGD exponentially fast",
        {"rate_per_step": float(sam_fits.rate.median()), "r2_exp": float(sam_fits.r2_exp.mean()),
         "r2_power_law": float(sam_fits.r2_pow.mean()), "power_law_exponent": float(sam_fits.power.median()),
         "sgd_rate_per_step": float(sgd_fits.rate.median())},
        f"over {p.seeds} seeds (95% t intervals): the R^2 of the exponential fit exceeds escape_r2_min = "
        f"{p.escape_r2_min}, it exceeds the power law's R^2 (d = c t^k), and the rate exceeds SGD's from the same "
        "w_switch (paired by seed)",
        ev_c, Control("SGD's own drift from the same w_switch over the same steps (no SAM after the switch): the "
                      "two shape tests of the criterion (the rate comparison has no counterpart)", shape(sgd_fits, "sgd")),
        note="; ".join(x for x in (
            "" if complete else "the escape was not recorded for every seed",
            f"w_switch is late in the decayed-lr phase (SGD ends fitting {sgd_acc:.0%} of the noisy training "
            f"labels); late SAM's distance from it grows as t^{float(sam_fits.power.median()):.2f} (power-law R^2 "
            f"{float(sam_fits.r2_pow.mean()):.3f} against {float(sam_fits.r2_exp.mean()):.3f} for the exponential): "
            "a steady drift, as normalised SAM's perturbation has length rho however close w is to a minimum, so its "
            "step does not shrink there and there is no small-deviation regime in which the paper's linear-stability "
            "escape would show as an exponential" if ev_c_verdict != "holds" else "") if x))

    # (d) no barrier on the line w_switch -> late SAM; control: a line as long, from w_switch towards another valley
    late_b = np.asarray(late_barriers, dtype=float)
    ctl_b = np.asarray(control_barriers, dtype=float)
    dist = _per_seed(m, "late_sam", "distance", rho)
    ev_d = mean_test(late_b, threshold=p.barrier_tolerance, direction="<", what="seeds")
    ctl_d = mean_test(ctl_b, threshold=p.barrier_tolerance, direction="<", what="seeds") if ctl_b.size else None
    d = Claim(
        "d", "The late-SAM solution lies in the same valley as w_switch: no loss barrier on the line between them.",
        "SAM converges to a flatter minimum within the same valley",
        {"max_barrier": float(late_b.max()), "mean_barrier": float(late_b.mean()),
         "matched_distance_barrier": float(ctl_b.mean()) if ctl_b.size else float("nan"),
         "distance_switch_to_late_sam": float(dist.mean()),
         "distance_switch_to_other_seed_sgd": float(np.mean(valley_distances)) if len(valley_distances) else np.nan},
        f"the 95% t interval over {p.seeds} seeds of the training-loss barrier (max over alpha in [0, 1] of L(alpha) "
        f"minus the chord) lies below barrier_tolerance = {p.barrier_tolerance} nats",
        ev_d, Control(f"from each seed's w_switch, a line as long as its late-SAM run went (matched distance, mean "
                      f"{float(dist.mean()):.3g}) towards the next seed's SGD solution (another initialisation, "
                      "another valley); the same barrier test", ctl_d),
        note="; ".join(x for x in (
            "the loss rises above the chord between the ends" if ev_d.verdict == "does not hold" else "",
            "the matched-distance line towards another valley shows no barrier either: over a segment this short "
            "a barrier test cannot tell one valley from two"
            + (f" (late SAM moves {float(dist.mean()):.3g} from w_switch, the other seed's solution lies "
               f"{float(np.mean(valley_distances)):.3g} away)" if len(valley_distances) else "")
            if ctl_d is not None and ctl_d.verdict == "holds" else "") if x))

    # (e) late AT closes >= thr of the robustness gap; control: late SAM (a late phase without AT)
    ev_e = [gap_exists("adv", "robust_acc", NO_SAM), closes("late_adv", "adv", "robust_acc", NO_SAM, NO_SAM)]
    ctl_e = closes("late_sam", "adv", "robust_acc", rho, NO_SAM)
    e = Claim(
        "e", f"Late adversarial training (the last {p.late_epochs} epochs) reaches nearly the robust accuracy of "
             "adversarial training throughout.",
        "the late-phase finding extends from SAM to adversarial training",
        {"robust_gap_closed": float(share("late_adv", "adv", "robust_acc", NO_SAM, NO_SAM).mean()),
         "robust_sgd": _per_seed(m, "sgd", "robust_acc").mean(),
         "robust_adv": _per_seed(m, "adv", "robust_acc").mean(),
         "robust_late_adv": _per_seed(m, "late_adv", "robust_acc").mean(),
         "robust_late_sam": _per_seed(m, "late_sam", "robust_acc", rho).mean()},
        f"over {p.seeds} seeds (paired), the 95% t intervals of AT - SGD and of the per-seed share (late AT - SGD) / "
        f"(AT - SGD) in PGD robust accuracy lie above 0 and gap_fraction_min = {thr}",
        ev_e, Control(f"late SAM at rho = {rho}: branched from the same SGD checkpoints with the same optimiser "
                      "restart, but no adversarial examples in the late phase; the same share test", ctl_e),
        )
    return [a, b, c, d, e]


def _figures(p, hist, m, esc, sam_fits, lines, fig_curves, fig_sweep, fig_mechanism, fig_robust):
    from papers.common.plotting import savefig, subplots

    colors = {"sgd": "tab:blue", "sam": "tab:green", "late_sam": "tab:orange", "early_sam": "tab:purple",
              "adv": "tab:red", "late_adv": "tab:brown"}

    # Test accuracy and training loss per epoch (the paper's test-error curves of SGD, SAM and the switch).
    fig, axes = subplots(1, 2, width=5.0, height=3.6)
    for arm in ("sgd", *SAM_ARMS, *ADV_ARMS):
        g = hist[(hist.arm == arm) & (np.isclose(hist.rho, p.rho) | (hist.rho == NO_SAM))]
        curve = g.groupby("epoch")[["test_acc", "train_loss"]].mean()
        curve = curve[curve.index >= p.epochs // 3]  # the paper's curves also omit the first epochs
        axes[0, 0].plot(curve.index, curve.test_acc, color=colors[arm], lw=1, label=arm)
        axes[0, 1].plot(curve.index, curve.train_loss, color=colors[arm], lw=1, label=arm)
    for ax in axes[0]:
        ax.axvline(p.switch_epoch, color="grey", ls=":", lw=0.8)
        ax.set_xlabel("epoch")
    axes[0, 0].set_ylabel("test accuracy (clean)")
    axes[0, 1].set_ylabel("training loss (batch mean)")
    axes[0, 1].set_yscale("log")
    axes[0, 0].legend(fontsize=7)
    axes[0, 0].set_title(f"rho = {p.rho}; dotted: switch epoch; first {p.epochs // 3} epochs omitted", fontsize=9)
    savefig(fig, fig_curves)

    # The rho sweep: final test accuracy and sharpness.
    fig, axes = subplots(1, 2, width=4.5, height=3.4)
    for ax, col, label in ((axes[0, 0], "test_acc", "test accuracy"), (axes[0, 1], "eig_1", "top Hessian eigenvalue")):
        base = m[m.arm == "sgd"][col]
        ax.axhline(base.mean(), color=colors["sgd"], lw=1, label="sgd")
        for arm in SAM_ARMS:
            g = m[m.arm == arm].groupby("rho")[col]
            ax.errorbar(g.mean().index, g.mean(), yerr=g.agg(_std), color=colors[arm], marker="o", ms=3, lw=1,
                        capsize=2, label=arm)
        ax.set_xticks(list(p.rhos))
        ax.set_xlabel("rho")
        ax.set_ylabel(label)
    axes[0, 0].legend(fontsize=7)
    savefig(fig, fig_sweep)

    # Mechanism: the escape on a log scale, and the loss along the line from w_switch.
    fig, axes = subplots(1, 2, width=4.8, height=3.6)
    ax = axes[0, 0]
    for arm in ("late_sam", "sgd"):
        g = esc[(esc.arm == arm) & (np.isclose(esc.rho, p.rho) | (arm == "sgd"))]
        for seed, s in g.groupby("seed"):
            ax.plot(s.step, s.distance, color=colors[arm], lw=0.8, alpha=0.8, label=arm if seed == 0 else None)
    if len(sam_fits):
        t = np.arange(1, p.escape_steps + 1)
        g = esc[(esc.arm == "late_sam") & np.isclose(esc.rho, p.rho)]
        from papers.sam_late.analysis import line_fit

        a, b, _ = line_fit(g.step, np.log(g.distance.clip(lower=1e-12)))
        ax.plot(t, np.exp(a + b * t), color="k", ls="--", lw=0.8, label="exponential fit (all seeds)")
    ax.set_yscale("log")
    ax.set_xlabel("step after the switch")
    ax.set_ylabel("||w_t - w_switch||")
    ax.legend(fontsize=7)
    ax = axes[0, 1]
    for kind, color in (("switch_to_late_sam", colors["late_sam"]), ("switch_to_late_adv", colors["late_adv"]),
                        ("matched_distance", "grey")):
        g = lines[(lines.kind == kind) & (np.isclose(lines.rho, p.rho) | (kind != "switch_to_late_sam"))]
        for seed, s in g.groupby("seed"):
            ax.plot(s.alpha, s.loss, color=color, lw=0.8, label=kind if seed == 0 else None)
    ax.axvline(0, color="k", lw=0.5)
    ax.axvline(1, color="k", lw=0.5)
    ax.set_xlabel("alpha: (1 - alpha) w_a + alpha w_b")
    ax.set_ylabel("training loss")
    ax.set_yscale("log")
    ax.legend(fontsize=7)
    savefig(fig, fig_mechanism)

    # Robust and clean accuracy of the main arms.
    fig, axes = subplots(1, 1, width=6.0, height=3.4)
    arms = ["sgd", *SAM_ARMS, *ADV_ARMS]
    sel = m[(m.rho == NO_SAM) | np.isclose(m.rho, p.rho)]
    for i, (col, label) in enumerate((("test_acc", "clean"), ("robust_acc", f"PGD eps={p.attack.epsilon}"))):
        g = sel.groupby("arm")[col]
        axes[0, 0].bar(np.arange(len(arms)) + 0.4 * i, g.mean().reindex(arms), width=0.4,
                       yerr=g.agg(_std).reindex(arms), capsize=2, label=label)
    axes[0, 0].set_xticks(np.arange(len(arms)) + 0.2, arms, fontsize=8)
    axes[0, 0].set_ylabel("test accuracy")
    axes[0, 0].legend(fontsize=7)
    savefig(fig, fig_robust)


def _switch_figure(p, m, fig_switch):
    """The switch sweep (the paper's "how late is late enough"): per-seed share of the SGD -> SAM gap that late
    SAM closes against the number of late SAM epochs, mean and 95% t interval over seeds; early SAM for reference."""
    from papers.common.claims import t_interval
    from papers.common.plotting import savefig, subplots

    ks = sorted([p.late_epochs, *p.late_sweep])
    fig, axes = subplots(1, 2, width=4.5, height=3.4)
    for ax, col, label in ((axes[0, 0], "test_acc", "test accuracy"), (axes[0, 1], "eig_1", "top Hessian eigenvalue")):
        stats = [t_interval(seed_fractions(m, "late_sam" if k == p.late_epochs else sweep_arm(k), "sam", col,
                                           p.rho, p.rho)) for k in ks]
        mid = np.array([x[0] for x in stats])
        ax.errorbar(ks, mid, yerr=[mid - [x[1] for x in stats], [x[2] for x in stats] - mid], color="tab:orange",
                    marker="o", ms=3, lw=1, capsize=2, label="late SAM (last K epochs)")
        early = seed_fractions(m, "early_sam", "sam", col, p.rho, p.rho).mean()
        ax.axhline(early, color="tab:purple", ls="--", lw=1, label=f"early SAM (first {p.late_epochs})")
        ax.axhline(p.gap_fraction_min, color="grey", ls=":", lw=0.8, label="gap_fraction_min")
        ax.axhline(1.0, color="tab:green", lw=0.8, label="SAM throughout")
        ax.axhline(0.0, color="tab:blue", lw=0.8, label="SGD")
        ax.set_xlabel(f"K: SAM for the last K of {p.epochs} epochs")
        ax.set_ylabel("share of the SGD -> SAM gap closed")
        ax.set_title(label, fontsize=9)
    axes[0, 0].legend(fontsize=6)
    savefig(fig, fig_switch)
