"""The adamanip report: the success-rate table (the shape of the paper's main results table), a figure, the three claims
with their controls, report.md."""
from __future__ import annotations

import numpy as np
import pandas as pd

from papers.adamanip.env import CONTROL, HIDDEN
from papers.adamanip.params import SLUG, parse
from papers.common.claims import Claim, Control, paired_test, write_claims
from papers.common.io import read_parquets, write_json
from papers.common.params import to_dict
from papers.common.plotting import savefig, subplots
from papers.common.report import write_report
from papers.common.tables import mean_std, to_markdown, write_table

TITLE = "P18 adamanip: AdaManip, adaptive articulated object manipulation (adaptive demonstrations + 3D diffusion policy)"
ARMS = (("diffusion", "adaptive"), ("diffusion", "one_go"), ("mlp_bc", "adaptive"), ("mlp_bc", "one_go"))


def why(claim_id: str, r: pd.DataFrame, mech: pd.DataFrame, hist: pd.DataFrame) -> str:
    """Why a claim does not hold or stays inconclusive, from this run's own numbers (as far as they tell)."""
    def m(pol, kind, cat, mechanism=None):
        sel = mech[(mech.policy == pol) & (mech.kind == kind) & (mech.category == cat)]
        if mechanism is not None:
            sel = sel[sel.mechanism == mechanism]
        return float(sel.success.mean()) if len(sel) else float("nan")

    def window(h, lo, hi):  # mean loss over steps [max - lo, max - hi)
        top = h.step.max()
        return h[(h.step > top - lo) & (h.step <= top - hi)].loss.mean()

    groups = hist.groupby(["policy", "kind"])
    start = groups.apply(lambda h: h[h.step < 10].loss.mean(), include_groups=False)
    end = groups.apply(lambda h: window(h, 50, 0), include_groups=False)
    before = groups.apply(lambda h: window(h, 100, 50), include_groups=False)
    losses = "; ".join(f"{pol}/{kind} {start[(pol, kind)]:.3f} -> {end[(pol, kind)]:.3f}"
                       + (" (still falling)" if end[(pol, kind)] < before[(pol, kind)] else "") for pol, kind in end.index)
    visible = m("diffusion", "one_go", CONTROL)
    seen = (f"on the control `{CONTROL}` (direction marked, lock at a fixed angle) diffusion trained on one-go "
            f"demonstrations succeeds in {m('diffusion', 'one_go', CONTROL, 'ccw'):.2f} (ccw) and "
            f"{m('diffusion', 'one_go', CONTROL, 'cw'):.2f} (cw) of the episodes, where the expert it imitates always "
            f"succeeds")
    visible_mlp = m("mlp_bc", "one_go", CONTROL)
    if visible < 0.8 and visible_mlp >= 0.8:  # the shared encoder sees the marker; the diffusion head is the weak part
        perception = (f"The diffusion policy is under-trained at this budget: {seen}, while MLP BC with the same encoder "
                      f"on the same demonstrations succeeds in {visible_mlp:.2f}: the point cloud shows the mechanism "
                      f"and an encoder learns to read it, but the denoiser has not learned to turn it into the right "
                      f"action in the steps it had (training losses below). ")
    elif visible < 0.8:
        perception = (f"The policies are limited by what they learn to see at this budget: {seen}, so even a visible "
                      f"mechanism is often misread. ")
    else:
        perception = f"The policies can read a visible mechanism: {seen}. "
    perception = (perception
                  + f"Training losses (first 10 -> last 50 steps, pooled over seeds; 'still falling' where the last 50 "
                    f"steps beat the 50 before): {losses}.")
    if claim_id == "a":
        extra = ""
        binary = [c for c in ("bottle", "door", "safe") if c in set(mech.category)]  # one hidden direction of two
        if binary:
            one_go = np.mean([m("diffusion", "one_go", c) for c in binary])
            extra += (f" On the binary hidden directions ({', '.join(binary)}) diffusion trained on one-go demonstrations "
                      f"succeeds in {one_go:.2f} of the episodes (MLP BC: "
                      f"{np.mean([m('mlp_bc', 'one_go', c) for c in binary]):.2f}), where one committed try succeeds in "
                      f"about half: a likely reason (not measured here) is that the diffusion policy draws a new sample "
                      f"after every action, so after a blocked turn it may try the other way by chance, which the "
                      f"deterministic MLP does not; the gap adaptive demonstrations close is then smaller than the "
                      f"paper's.")
        if "microwave" in set(mech.category):
            extra += (f" On a locked microwave the adaptive demonstrations show the fix (pull, see nothing move, press, "
                     f"pull) and diffusion trained on them succeeds in {m('diffusion', 'adaptive', 'microwave', 'locked'):.2f} "
                     f"of locked episodes (one-go: {m('diffusion', 'one_go', 'microwave', 'locked'):.2f}): where it fails, "
                     f"the retry after a failed pull is not learned from the few demonstrations that show it.")
        return perception + extra
    if claim_id == "b":
        return perception + " Both policies share the encoder, so the diffusion head's advantage on multi-modal actions " \
                            "shows only once the encoder tells the modes' situations apart."
    return ("The claim needs the diffusion policy on adaptive demonstrations to beat every other arm in every "
            "category; not every per-category difference (parts) clears the threshold, for the reasons given under (a).")


def rates(succ: pd.DataFrame) -> pd.DataFrame:
    """Success rate per (policy, kind, category, seed)."""
    return succ.groupby(["policy", "kind", "category", "seed"]).success.mean().reset_index()


def per_seed(r: pd.DataFrame, policy: str, kind: str, categories) -> np.ndarray:
    """One value per seed: the arm's success rate averaged over `categories`."""
    sel = r[(r.policy == policy) & (r.kind == kind) & r.category.isin(list(categories))]
    if sel.empty:
        raise ValueError(f"adamanip: no success rates for {policy}/{kind} on {list(categories)}")
    return sel.groupby("seed").success.mean().sort_index().to_numpy()


def adamanip_claims(p, r: pd.DataFrame) -> list[Claim]:
    hidden = [c for c in p.categories if c in HIDDEN]
    ga, gb, gc = p.claims["adaptive_gain"], p.claims["diffusion_gain"], p.claims["method_gain"]

    def gain_a(cats):
        return paired_test(per_seed(r, "diffusion", "adaptive", cats), per_seed(r, "diffusion", "one_go", cats),
                           threshold=ga, name=f"adaptive - one-go, {'+'.join(cats)}")

    def gain_b(cats, kind):
        return paired_test(per_seed(r, "diffusion", kind, cats), per_seed(r, "mlp_bc", kind, cats),
                           threshold=gb, name=f"diffusion - MLP BC on {kind}, {'+'.join(cats)}")

    def gain_c(cat):
        ours = per_seed(r, "diffusion", "adaptive", [cat])
        best_other = np.max([per_seed(r, pol, kind, [cat]) for pol, kind in ARMS[1:]], axis=0)
        return paired_test(ours, best_other, threshold=gc, name=f"{cat}: diffusion+adaptive - best other arm")

    def arm_means(cats):
        return {f"{pol}/{kind}": round(float(per_seed(r, pol, kind, cats).mean()), 4) for pol, kind in ARMS}

    claim_a = Claim(
        "a", "A diffusion policy trained on adaptive demonstrations succeeds far more often than one trained on "
             "one-go demonstrations on objects with hidden mechanisms",
        "adaptive > one-go demonstrations (Sec. 5, main results table, every category)",
        arm_means(hidden),
        f"per seed, the diffusion policy's success rate averaged over the hidden-mechanism categories "
        f"({', '.join(hidden)}), adaptive minus one-go; paired t interval over seeds > {ga:g} (config "
        f"adamanip.claims.adaptive_gain: on a binary hidden choice one-go is expected near 50 % and adaptive near "
        f"100 %; 0.2 is four binomial standard errors of a 100-episode rate)",
        gain_a(hidden),
        Control(f"the same on `{CONTROL}`, a bottle whose direction is marked and whose lock opens at a fixed "
                f"angle: nothing hidden, so one-go demonstrations suffice", gain_a([CONTROL])))
    claim_b = Claim(
        "b", "On adaptive demonstrations the diffusion policy beats MLP behaviour cloning (the retries make the "
             "action distribution multi-modal)",
        "the 3D diffusion policy beats the imitation baselines (Sec. 5)",
        arm_means(hidden),
        f"per seed, success averaged over the hidden-mechanism categories, diffusion minus MLP BC, both on adaptive "
        f"demonstrations; paired t interval over seeds > {gb:g} (adamanip.claims.diffusion_gain: ten points, two "
        f"binomial standard errors of a 100-episode rate)",
        gain_b(hidden, "adaptive"),
        Control(f"the same on one-go demonstrations of `{CONTROL}` (the action is a function of the visible "
                f"marker and the gripper state: unimodal)", gain_b([CONTROL], "one_go")))
    claim_c = Claim(
        "c", "The gains hold per category: diffusion on adaptive demonstrations beats every other arm in each category",
        "per object category (Sec. 5, main results table)",
        {cat: arm_means([cat]) for cat in hidden},
        f"per hidden-mechanism category and seed, diffusion+adaptive minus the best of the other three arms on that "
        f"seed; paired t interval over seeds > {gc:g} (adamanip.claims.method_gain) in every category",
        [gain_c(cat) for cat in hidden],
        Control(f"the same on `{CONTROL}` (nothing hidden: the one-go arms need not lose)", gain_c(CONTROL)))
    return [claim_a, claim_b, claim_c]


def _table(p, r: pd.DataFrame, stats: pd.DataFrame):
    md_rows, csv_rows = [], []
    for cat in p.categories:
        row = {"category": cat + (" (control)" if cat == CONTROL else "")}
        for pol, kind in ARMS:
            v = r[(r.policy == pol) & (r.kind == kind) & (r.category == cat)].sort_values("seed").success.to_numpy()
            row[f"{pol} / {kind}"] = mean_std(v, 2)
            csv_rows.append({"category": cat, "policy": pol, "kind": kind, "success_mean": float(v.mean()),
                             "success_std": float(v.std(ddof=1)) if v.size > 1 else 0.0, "seeds": int(v.size)})
        for kind in ("one_go", "adaptive"):
            s = stats[(stats.category == cat) & (stats.kind == kind)]
            row[f"demo length {kind}"] = f"{s.mean_length.mean():.1f}"
        md_rows.append(row)
    return pd.DataFrame(md_rows), pd.DataFrame(csv_rows)


def _figure(p, r: pd.DataFrame, path) -> None:
    fig, axes = subplots(1, 1, width=7.0, height=3.4)
    ax = axes[0, 0]
    cats = list(p.categories)
    x = np.arange(len(cats))
    for i, (pol, kind) in enumerate(ARMS):
        means = [r[(r.policy == pol) & (r.kind == kind) & (r.category == c)].success.mean() for c in cats]
        stds = [r[(r.policy == pol) & (r.kind == kind) & (r.category == c)].success.std(ddof=1) for c in cats]
        ax.bar(x + (i - 1.5) * 0.2, means, 0.2, yerr=np.nan_to_num(stds), label=f"{pol} / {kind}", capsize=2)
    ax.set_xticks(x, cats, rotation=15)
    ax.set_ylabel("success rate")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=7, ncol=2)
    ax.set_title("Success per category (mean +- std over seeds)")
    savefig(fig, path)


def mechanisms(succ: pd.DataFrame) -> pd.DataFrame:
    """Success per (policy, kind, category, hidden mechanism), pooled over seeds' episodes."""
    return succ.groupby(["policy", "kind", "category", "mechanism"]).success.mean().reset_index()


def report(*, cfg, scale, successes, stats, history, benchmarks, table_md, table_csv, claims, params_json, report_md,
           success_figure):
    p = parse(cfg)
    succ, st = read_parquets(successes), read_parquets(stats)
    r = rates(succ)
    md, csv = _table(p, r, st)
    seeds = succ.seed.nunique()
    caption = (f"Success rate over {p.evaluate['episodes']} randomised episodes per category and seed, mean +- std over "
               f"{seeds} seeds; the last columns: mean length (steps) of the expert demonstrations kept.")
    write_table(md, table_md, table_csv, caption=caption, csv_df=csv)
    mech = mechanisms(succ)
    wide = mech.assign(arm=mech.policy + " / " + mech.kind).pivot_table(
        index=["category", "mechanism"], columns="arm", values="success").reset_index()
    with open(table_md, "a") as fh:
        fh.write("\nSuccess by hidden mechanism (episodes of all seeds pooled): where each arm fails.\n\n"
                 + to_markdown(wide.round(3)))
    hist = read_parquets(history)
    _figure(p, r, success_figure)
    claim_list = adamanip_claims(p, r)
    for c in claim_list:  # why, from this run's numbers, beside the parts that miss or straddle
        if c.verdict in ("does not hold", "inconclusive"):
            c.note = why(c.id, r, mech, hist) + (" " + c.note if c.note else "")
    write_claims(claim_list, claims, paper=SLUG, scale=scale)
    write_json(to_dict(p), params_json)
    pol, tr, d = p.policy, p.train, p.demos
    what = (
        f"{p.seeds} seeds; each collects its own demonstrations, initialises its own networks and meets its own "
        f"randomised evaluation episodes (the same for every arm of the seed). Categories: {', '.join(p.categories)} "
        f"(`{CONTROL}` is the control with nothing hidden). Per category and kind, {d['per_category']} successful "
        f"expert demonstrations (one-go: reads the hidden mechanism; adaptive: tries and adapts), at most "
        f"{d['max_steps']} steps each. Two policies per demonstration kind, each one multi-task network over all "
        f"categories: the diffusion policy (PointNet {pol['hidden']}-{2 * pol['hidden']} -> {pol['feat']} features, "
        f"1D conditional U-Net {list(pol['unet_dims'])} with FiLM, DDPM with a cosine schedule over "
        f"{pol['diffusion_steps']} steps, epsilon prediction, "
        + (f"sampled by ancestral DDPM over all {pol['diffusion_steps']} steps"
           if pol['inference_steps'] == pol['diffusion_steps'] else
           f"sampled by deterministic DDIM over {pol['inference_steps']} of the {pol['diffusion_steps']} steps")
        + f"; obs horizon {pol['obs_horizon']}, prediction horizon "
        f"{pol['pred_horizon']} (the actions t .. t+{pol['pred_horizon'] - 1}), {pol['action_horizon']} action(s) executed "
        f"per prediction) and MLP behaviour cloning on the same encoder (hidden {pol['mlp_hidden']}); the condition: "
        f"the point clouds and the low-dimensional state (gripper pose, velocity, previous action) of the last "
        f"{pol['obs_horizon']} steps. {tr['steps']} AdamW steps of batch {tr['batch']} (peak lr {tr['lr']['diffusion']:g} diffusion, {tr['lr']['mlp_bc']:g} MLP BC, cosine "
        f"schedule), evaluated with the EMA of the weights (power 0.75), each. Evaluation: {p.evaluate['episodes']} episodes per category, at most "
        f"{p.evaluate['max_steps']} steps.")
    differences = (
        "Environment: our own MuJoCo objects (MJCF generated per episode, randomised sizes and placement), not the "
        "paper's IsaacGym assets; kinematic simulation (joints follow the gripper's targets within limits that encode "
        "the hidden mechanism; a blocked gripper strains by a fixed compliance, half a step, so a blocked try shows in the gripper's velocity as a real hand held back by a locked handle) instead of contact dynamics; the "
        "episode starts with the handle grasped (the paper learns grasping as a separate stage); a microwave's "
        "button is pressed by pushing the grasped handle inward, not by moving to the button. The paper's "
        "categories not built here: pen, coffee machine, pressure cooker, window (and, at the default scale, those "
        "left out of `categories`). Observation: a point cloud sampled from the geoms' surfaces (no rendering, no "
        "segmentation), fixed points per geom so that small moving parts are visible; the low-dimensional state is the "
        "gripper's pose and velocity in the grasp frame and the previous action (official: arm joint positions and "
        "velocities, hand pose, previous action). Policy: PointNet instead of "
        "PointNet++, one multi-task network per demonstration kind instead of one per category, small widths "
        f"(U-Net {list(pol['unet_dims'])}, official [256, 512, 1024]; kernel 3, official 5; diffusion-step embedding 32, "
        f"official 256) and {tr['steps']} training steps (cosine schedule with 5 % warm-up; EMA as official) at peak lrs "
        f"raised from the official 1e-4 (diffusion {tr['lr']['diffusion']:g}, MLP BC {tr['lr']['mlp_bc']:g}, each picked "
        f"by its held-out loss on the control's demonstrations; config/config.yaml gives the diagnosis: at U-Net "
        f"[16, 32] and lr 1e-3 the denoiser barely read its condition, raw and EMA weights alike) (the official trains "
        f"for hundreds of epochs), DDPM with "
        f"{pol['diffusion_steps']} training steps as official but, "
        + (f"where the official samples by DDPM over all 100, DDIM (deterministic, Song et al. 2021) over "
           f"{pol['inference_steps']} of them at evaluation (the sampling cost is linear in the steps; Chi et al. 2023 "
           f"do the same on their real robot; the full scale samples by DDPM over all 100), "
           if pol['inference_steps'] < pol['diffusion_steps'] else "sampled by DDPM over all of them, ")
        + "the x_0 estimate clipped to [-1, 1] at sampling (Chi et al.'s setting; the AdaManip code turns it off), "
        "the evaluation episodes of a category run side by side (one network call per step for all of them), actions as "
        "end-effector deltas in the grasp frame instead of absolute poses with 6D rotations. The baseline is MLP "
        "behaviour cloning (the issue's choice); the paper's other baselines are not run. Success latches at the "
        "first step it is reached."
        + ("" if {"door", "safe"} <= set(p.categories) else
           " Door and safe are built (env.py; the full scale runs them) but left out here: by a profile (session 41) "
           "they add ~40-50 s of CPU to the default run (their demonstrations and 200 more evaluation episodes per "
           "seed, kind and policy), which the 600 s budget buys only by cutting the training steps back to ~700, "
           "the under-training this scale was raised from."))
    write_report(report_md, title=TITLE, scale=scale, what_was_run=what, table_md=table_md, figures=[success_figure],
                 claims=claim_list, benchmarks=benchmarks, differences=differences)
