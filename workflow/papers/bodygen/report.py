"""The bodygen report: the return table with the learnability gate, learning curves, morphologies, the TCA bandit,
the claims and checks, and report.md."""
from __future__ import annotations

import numpy as np
import pandas as pd

from papers.bodygen.params import SLUG, parse
from papers.bodygen.stages import HEAVY_MODEL
from papers.bodygen.tasks import PAPER_TASKS, TERRAIN_GAP_PERIOD, get_task
from papers.common.claims import (Check, Claim, Control, Premise, Scope, convention, derived, mean_test, paired_test,
                                  write_claims)
from papers.common.io import read_json, read_parquet, read_parquets, write_json
from papers.common.params import to_dict
from papers.common.plotting import savefig, subplots
from papers.common.report import job_times, write_report
from papers.common.tables import mean_std, to_markdown, write_table

LABELS = {
    "bodygen": "BodyGen (MoSAT + TopoPE + TCA)", "t2a": "Transform2Act-style (GraphConv, GAE)",
    "no_topope": "BodyGen w/o TopoPE", "no_tca": "BodyGen w/o TCA (GAE everywhere)",
    "fixed": "initial morphology, control only", "bodygen_repeat": "control: BodyGen, second seed group",
    "blind_bodygen": "control: design-blind BodyGen", "blind_no_tca": "control: design-blind w/o TCA",
}
# The return claims: (id, statement, paper's words, method arm, compared arm).
RETURN_CLAIMS = (
    ("a", "BodyGen's final return beats the Transform2Act-style baseline at equal environment steps",
     "+60.03% averaged over ten tasks (Table 1)", "bodygen", "t2a"),
    ("b", "Removing temporal credit assignment lowers the co-design return", "ablation: lower return w/o TCA (Fig. 5)",
     "bodygen", "no_tca"),
    ("c", "Removing TopoPE lowers the co-design return", "ablation: lower return w/o TopoPE (Fig. 5)",
     "bodygen", "no_topope"),
)
NO_POSITIVE_RETURN = ("returns are read off simulated episodes of the final designs, not estimated by an analysis that "
                      "could be blind; the learnability gate shows the pipeline can register a gait (the fixed body)")


def scope(p) -> Scope:
    tasks = ", ".join(p.tasks)
    return Scope("analogue" if set(p.tasks) - set(PAPER_TASKS) else "replication",
                 f"BodyGen's method (MoSAT, TopoPE, TCA, PPO co-design) on {tasks} at {p.ppo['env_steps']} simulated "
                 f"control steps per arm and seed (the paper: ten 3-D tasks, 50M samples); crawler2d is a planar cut "
                 f"of the official ant template. Claim (e) isolates TCA on a design-only bandit of our own.")


def per_seed(returns: pd.DataFrame, arm: str, column: str = "return") -> np.ndarray:
    """`column` of `arm`'s final designs, ordered by seed (the pairing of the paired tests)."""
    return returns[returns.arm == arm].sort_values("seed")[column].to_numpy()


def gait_margin(returns: pd.DataFrame, arm: str) -> np.ndarray:
    """Per seed, the second half's return minus what the same final design earns with zero torque over the whole
    execution (clipped at 0 from below: a design that falls backward earns no credit): above 0, the body moves
    on under its learned control further than collapsing alone moves it."""
    return per_seed(returns, arm, "late_return") - np.maximum(per_seed(returns, arm, "passive_return"), 0.0)


def learned(returns: pd.DataFrame, arm: str, label: str = "") -> Premise:
    """The learnability gate of one arm: the t interval of :func:`gait_margin` over seeds above 0."""
    return Premise.from_evidence(f"{label}{arm} learned a gait (2nd-half return - zero-torque return of the same "
                                 "designs, per seed)", mean_test(gait_margin(returns, arm), threshold=0.0,
                                                                 direction=">", what="seeds"))


def return_claim(p, cid, statement, paper, arm, other, all_returns) -> Claim:
    """Paired-by-seed difference of final returns (arm - other) > margin, one test per task; gated on every compared
    arm (and the fixed-body reference, where it is trained) having learned a gait; the null control is the same
    test on the zero-torque returns of the same final designs."""
    margin, tasks = p.claims["return_margin"], list(p.tasks)
    criterion = (f"final return of {arm} minus {other}, paired by seed, 95% t interval above {margin:g} (config "
                 "bodygen.claims.return_margin)" + ("" if len(tasks) == 1 else ", on every task")
                 + "; premise: every compared arm learned a gait (its second-half return exceeds the zero-torque "
                   "return of its own final designs, t interval over seeds above 0)")
    source = convention(f"{margin:g}: 'beats' / 'lowers', the direction the paper reports")
    missing = [a for a in (arm, other) if a not in p.arms]
    if missing:
        return Claim.not_measured(
            cid, statement, paper, criterion,
            f"arm(s) {', '.join(missing)} not trained at this scale (bodygen.arms = {list(p.arms)}): the budget goes to "
            f"fewer arms trained longer ({p.ppo['env_steps']} simulated steps each); config/full.yaml trains them all",
            threshold_source=source, no_positive_control=NO_POSITIVE_RETURN)
    evs, ctrls, gates, measured = [], [], [], {}
    for task in tasks:
        r = all_returns[all_returns.task == task]
        label = "" if len(tasks) == 1 else f"{task}: "
        evs.append(paired_test(per_seed(r, arm), per_seed(r, other), threshold=margin, name=f"{label}{arm} - {other}"))
        ctrls.append(paired_test(per_seed(r, arm, "passive_return"), per_seed(r, other, "passive_return"),
                                 threshold=margin, name=f"{label}zero torque: {arm} - {other}"))
        gates += [learned(r, a, label) for a in dict.fromkeys([arm, other] + (["fixed"] if "fixed" in p.arms else []))]
        measured.update({f"{label}{a}": float(per_seed(r, a).mean()) for a in (arm, other)})
        measured.update({f"{label}{a} gait margin": float(gait_margin(r, a).mean()) for a in (arm, other)})
    one = len(tasks) == 1
    return Claim(cid, statement, paper, measured, criterion, evs[0] if one else evs,
                 Control("the same test on the zero-torque returns of the same final designs (what collapsing alone "
                         "earns): a gain that shows there comes from designs that fall further, not from control",
                         ctrls[0] if one else ctrls, kind="null"),
                 threshold_source=source, premise=gates, no_positive_control=NO_POSITIVE_RETURN)


def credit_auc(curves: pd.DataFrame, estimator: str, reward: str) -> np.ndarray:
    """Per replicate, the design policy's share of the possible improvement averaged over the iterations (the area
    under its learning curve: how far and how fast it improved)."""
    sel = curves[(curves.estimator == estimator) & (curves.reward == reward)]
    return sel.groupby("replicate", sort=True).share.mean().to_numpy()


def credit_claim(p, curves: pd.DataFrame) -> Claim:
    """Claim (e): on the design-only bandit, TCA moves the design policy further than GAE (paired by replicate)."""
    c, gain = p.credit, p.claims["credit_gain"]
    design = curves[curves.reward == "design"].groupby("replicate").first()
    late = float(design.late_share.mean())
    worth = (design.best - design.uniform) / design.start_noise  # the best design's lead in start-noise stds
    horizon = float(design.gae_horizon.iloc[0])
    return Claim(
        "e", "TCA's mechanism: with the design's reward arriving over a long execution, TCA improves the design "
             "policy more than GAE",
        "TCA gives design steps the undiscounted execution return; without it the design steps learn less (Sec. 3.3, "
        "Fig. 5 ablation)",
        {"TCA share": float(credit_auc(curves, "tca", "design").mean()),
         "GAE share": float(credit_auc(curves, "gae", "design").mean()),
         "TCA final share": float(curves[(curves.estimator == "tca") & (curves.reward == "design") &
                                         (curves.iteration == c["iterations"])].share.mean()),
         "GAE final share": float(curves[(curves.estimator == "gae") & (curves.reward == "design") &
                                         (curves.iteration == c["iterations"])].share.mean())},
        f"per replicate ({c['designs']} designs under a scripted gait, {c['iterations']} iterations of {c['episodes']} "
        "episodes, advantages by the co-design code's credit.estimate), the policy's share of the possible "
        "improvement of its exact expected return, averaged over the iterations; paired t interval over "
        f"{c['seeds']} replicates of TCA minus GAE above {gain:g} (config bodygen.claims.credit_gain)",
        paired_test(credit_auc(curves, "tca", "design"), credit_auc(curves, "gae", "design"), threshold=gain,
                    name="TCA - GAE, share of the possible improvement", what="replicates"),
        Control("the same with every episode given the rewards of a random design, whatever was chosen (the reward "
                "does not depend on the design: no estimator can improve it)",
                paired_test(credit_auc(curves, "tca", "shuffled"), credit_auc(curves, "gae", "shuffled"),
                            threshold=gain, name="shuffled rewards: TCA - GAE", what="replicates"), kind="null"),
        threshold_source=convention(f"{gain:g}: 'more', a sign"),
        premise=[Premise.at_least(f"share of the designs' reward differences arriving after GAE's horizon "
                                  f"1/(1 - gamma lambda) = {horizon:.3g} steps (mean over replicates)", late,
                                  p.claims["late_share"], what="config bodygen.claims.late_share: most of it"),
                 Premise.at_least("the design matters: the best design's return above the uniform policy's, in "
                                  "stds of one design's return over start draws (mean over replicates)",
                                  float(worth.mean()), 1.0, what="one episode's noise")],
        no_positive_control="the improvement is the policy's exact expected return over the known designs, not an "
                            "estimate; TCA's own curve (the table) shows the bandit can be learned")


def checks(p, counts: pd.DataFrame) -> list[Check]:
    """The parameter counts: facts of the configuration, not claims."""
    limit = p.claims["max_parameters"]

    def count(config, arch):  # the largest over the tasks (token width and TopoPE table differ per task)
        return int(counts[(counts.config == config) & (counts.arch == arch)].parameters.max())

    t2a = count("paper", "gnn")
    return [Check.at_most("d_this_run", f"BodyGen's four networks at this run's sizes have under 2M parameters "
                          f"(the Transform2Act-style baseline: {count('this run', 'gnn'):,})",
                          count("this run", "mosat"), limit, what="the paper's 'under 2M', config max_parameters"),
            Check.at_most("d_paper_sizes", f"BodyGen's four networks at the official sizes (hidden 64, 3 blocks, heads "
                          f"128) have under 2M parameters (the baseline at the same sizes: {t2a:,})",
                          count("paper", "mosat"), limit, what="the paper's 'under 2M'"),
            Check.at_least("d_heavy", f"a heavy MoSAT (hidden {HEAVY_MODEL['hidden']}, {HEAVY_MODEL['blocks']} blocks, "
                           f"heads {HEAVY_MODEL['head_hidden']}) exceeds the limit (the count can fail it)",
                           count("heavy control", "mosat"), limit)]


def bodygen_claims(p, returns: pd.DataFrame, curves: pd.DataFrame) -> list[Claim]:
    claims = [return_claim(p, cid, st, paper, arm, other, returns) for cid, st, paper, arm, other in RETURN_CLAIMS]
    claims.append(credit_claim(p, curves))
    return claims


def compute_note(p, hist: pd.DataFrame, template: dict) -> str:
    """The compute profile of this run, from the training histories' CPU timers and prepare's timing of a physics
    step, in words."""
    parts = []
    for arm, h in hist.groupby("arm", sort=False):
        cpu, roll, samples = h.cpu_seconds.sum(), h.rollout_cpu_seconds.sum(), h.samples.sum()
        parts.append(f"{arm} {1e3 * cpu / samples:.2f} ms of CPU per simulated control step, {100 * roll / cpu:.0f}% "
                     f"of it in the rollouts (the policy's forward passes and MuJoCo), the rest in the PPO update")
    timing = "; ".join(f"{name}: a {t['timing_limbs']}-limb body takes {t['ms_per_step']['Euler']:.3f} ms per physics "
                       f"step with Euler against {t['ms_per_step']['RK4']:.3f} ms with RK4"
                       for name, t in template.items() if "ms_per_step" in t)
    return ("- Compute (measured in this run, CPU time of each train job): " + "; ".join(parts) + ". Physics (prepare "
            f"stage, timed here): {timing}; this run integrates with {p.env['integrator']}.")


def draw(ax, design: dict, title: str) -> None:
    """A design's bones in its task's plane (xz: side view; xy: top view), the root as a dot."""
    start, end, size = np.array(design["start"]), np.array(design["end"]), np.array(design["size"])
    ax.add_patch(__import__("matplotlib.patches", fromlist=["Circle"]).Circle((0, 0), 0.25, color="tab:orange"))
    for i in range(1, len(start)):
        ax.plot([start[i, 0], end[i, 0]], [start[i, 1], end[i, 1]], lw=2 + 60 * size[i], color="tab:brown",
                solid_capstyle="round")
    pts = np.concatenate([start, end, [[-1.6, -1.6], [1.6, 0.6]]])
    ax.set(xlim=(pts[:, 0].min(), pts[:, 0].max()), ylim=(pts[:, 1].min(), pts[:, 1].max()), aspect="equal",
           title=title)
    ax.axis("off")


def report(*, cfg, scale, returns, designs, parameters, template, credit, histories, benchmarks, table_md, table_csv,
           claims, params_json, report_md, verdicts, curves_figure, designs_figure, credit_figure):
    p = parse(cfg)
    ret, counts, hist = read_parquet(returns), read_parquet(parameters), read_parquets(histories)
    curves, tmpl = read_parquet(credit), read_json(template)
    bodies = read_json(designs)
    n_seeds = ret.seed.nunique()
    md_rows, csv_rows = [], []
    many = len(p.tasks) > 1
    for task in p.tasks:
        for arm in p.arms:
            r, h = ret[(ret.arm == arm) & (ret.task == task)], hist[(hist.arm == arm) & (hist.task == task)]
            margin = gait_margin(r, arm)
            gate = learned(r, arm)
            md_rows.append({**({"task": task} if many else {}), "arm": LABELS[arm],
                            "final return": mean_std(r["return"].to_numpy()),
                            "return, 2nd half": mean_std(r.late_return.to_numpy()),
                            "zero-torque return": mean_std(r.passive_return.to_numpy()),
                            "gait margin [95% CI]": f"{gate.measured}",
                            "learned a gait": "yes" if gate.met else "no",
                            "episode length": mean_std(r.episode_length.to_numpy()),
                            "limbs": mean_std(r.limbs.to_numpy().astype(float)),
                            "parameters": int(h.parameters.iloc[0])})
            csv_rows.append({**({"task": task} if many else {}), "arm": arm, "return_mean": r["return"].mean(),
                             "return_std": r["return"].std(), "late_return_mean": r.late_return.mean(),
                             "passive_return_mean": r.passive_return.mean(), "gait_margin_mean": margin.mean(),
                             "learned": bool(gate.met), "episode_length": r.episode_length.mean(),
                             "limbs": r.limbs.mean(), "parameters": int(h.parameters.iloc[0]), "seeds": len(r)})
    task_words = "Planar crawler" if list(p.tasks) == ["crawler2d"] else f"Tasks {', '.join(p.tasks)}"
    caption = (f"{task_words}, final design of each arm after {p.ppo['env_steps']} simulated control steps "
               f"(episodes of at most {p.env['control_steps']} control steps); return of the deterministic design and "
               f"control over {p.evaluate['episodes']} episodes, mean +- std over {n_seeds} seeds. Return, 2nd half: "
               "the part earned in the second half of the execution (sustained motion). Zero-torque return: the same "
               "final designs from the same start states with zero torque (what collapsing alone earns). Gait "
               "margin: per seed, the 2nd-half return minus the zero-torque return (clipped at 0), mean [95% t "
               "interval] over seeds; 'learned a gait' when the whole interval is above 0 (the premise gate of the "
               "return claims). Parameters: all four networks.")
    c = p.credit
    bandit_rows = []
    for reward in ("design", "shuffled"):
        for est in ("tca", "gae"):
            auc = credit_auc(curves, est, reward)
            last = curves[(curves.estimator == est) & (curves.reward == reward) & (curves.iteration == c["iterations"])]
            bandit_rows.append({"rewards": "by design" if reward == "design" else "shuffled (null control)",
                                "estimator": est.upper(), "share, mean over iterations": mean_std(auc),
                                "share after the last iteration": mean_std(last.sort_values("replicate").share)})
    design = curves[curves.reward == "design"].groupby("replicate").first()
    write_table(pd.DataFrame(md_rows), table_md, table_csv, caption=caption, csv_df=pd.DataFrame(csv_rows))
    with open(table_md, "a") as fh:
        fh.write(f"\n\nTCA's mechanism (claim e): a design-only bandit over {c['designs']} designs per replicate, each "
                 f"executed under a scripted gait for {p.env['control_steps']} control steps ({c['noise_draws']} start "
                 f"draws); share of the possible improvement of the policy's expected return, mean +- std over "
                 f"{c['seeds']} replicates. Premise: share of the designs' reward differences after GAE's horizon "
                 f"{mean_std(design.late_share)}.\n\n" + to_markdown(pd.DataFrame(bandit_rows)))

    fig, axes = subplots(1, len(p.tasks), width=6.5, height=4.2)
    for t, task in enumerate(p.tasks):
        ax = axes[0, t]
        for arm in p.arms:
            h = hist[(hist.arm == arm) & (hist.task == task)]
            grid = np.linspace(0, p.ppo["env_steps"], 40)
            lines = [np.interp(grid, g.env_steps, g.train_return) for _, g in h.groupby("seed")]
            ax.plot(grid, np.mean(lines, 0), label=arm, ls=":" if arm in ("bodygen_repeat", "blind_bodygen",
                                                                         "blind_no_tca") else "-")
        ax.set(xlabel="simulated control steps", ylabel="training return per episode", title=task if many else None)
        ax.legend(fontsize=7)
    savefig(fig, curves_figure)
    cols = (len(p.arms) + 1) // 2
    fig, axes = subplots(2 * len(p.tasks), cols, width=2.4, height=2.2)
    for t, task in enumerate(p.tasks):
        for j, arm in enumerate(p.arms):
            r = ret[(ret.arm == arm) & (ret.task == task)]
            best = r.sort_values(["return", "seed"], ascending=[False, True]).iloc[0]
            draw(axes[2 * t + j % 2, j // 2], bodies[f"{task}/{arm}/{int(best.seed)}"],
                 f"{task + ': ' if many else ''}{arm}\nreturn {best['return']:.1f}")
        for k in range(len(p.arms), 2 * cols):
            axes[2 * t + k % 2, k // 2].axis("off")
    savefig(fig, designs_figure)
    fig, axes = subplots(1, 1, width=6.0, height=3.6)
    for est, colour in (("tca", "tab:blue"), ("gae", "tab:red")):
        for reward, style in (("design", "-"), ("shuffled", ":")):
            g = curves[(curves.estimator == est) & (curves.reward == reward)].groupby("iteration").share.mean()
            axes[0, 0].plot(g.index, g.values, style, color=colour, label=f"{est.upper()}, rewards {reward}")
    axes[0, 0].set(xlabel="policy iteration", ylabel="share of the possible improvement")
    axes[0, 0].legend(fontsize=7)
    savefig(fig, credit_figure)

    claim_list, check_list, sc = bodygen_claims(p, ret, curves), checks(p, counts), scope(p)
    write_claims(claim_list, claims, paper=SLUG, scale=scale, scope=sc, checks=check_list)
    write_json(to_dict(p), params_json)
    times = job_times(benchmarks)
    specs = [get_task(t) for t in p.tasks]
    task_text = "; ".join(
        f"{t.name} ({t.source}: plane {t.plane}, depth < {t.max_depth}, at most {t.max_children} children, "
        f"timestep {t.timestep}, control log-std {t.control_log_std:g}, " + (
            "no tilt termination" if t.max_tilt >= 360 else f"terminated past {t.max_tilt:g} degrees of tilt") + ")"
        for t in specs)
    what = (
        f"Tasks: {task_text}. Bodies (a root with two slides and a hinge when planar, a free joint in 3-D; capsule "
        f"limbs with hinge joints, motors) co-designed per episode: {p.env['skel_steps']} skeleton-transform steps "
        "(per limb no-op / add a child copying the parent / remove a leaf), one attribute-transform step (bounded "
        f"Gaussian deltas on bone offset, capsule size, gear), then up to {p.env['control_steps']} control steps "
        f"(frame skip {p.env['frame_skip']}, {p.env['integrator']} integration, reward = forward velocity - "
        f"{p.env['ctrl_cost']:g} x mean squared torque; every design starts just above the ground). MJCF generated "
        f"per design, simulated with the mujoco bindings. Networks: four encoders (skeleton, attribute, control "
        f"policy, critic) of hidden width {p.model['hidden']} and {p.model['blocks']} blocks/layers. PPO: "
        f"{p.ppo['samples']} control steps per iteration (batches of {p.ppo['episodes']} episodes), {p.ppo['epochs']} "
        f"epochs, minibatch {p.ppo['minibatch']}, clip {p.ppo['clip']}, gamma {p.ppo['gamma']}, lambda {p.ppo['lam']}, "
        f"{p.ppo['env_steps']} simulated control steps per arm and seed, {n_seeds} seeds, one job per arm and seed; "
        f"arms: {', '.join(p.arms)}. TCA's mechanism (claim e): a design-only bandit (papers/bodygen/bandit.py), "
        f"{c['seeds']} replicates of {c['designs']} designs (random attributes of the template) executed under a "
        f"scripted gait (period {c['gait_period']:g} control steps), {c['iterations']} policy iterations of "
        f"{c['episodes']} episodes with a tabular critic, advantages by the co-design code's credit.estimate under TCA "
        f"and GAE. Job times: {times['seconds']:.0f} s wall, {times['cpu_seconds']:.0f} s CPU over {times['jobs']} jobs.")
    gated = [cl for cl in claim_list if cl.premise and not cl.premise_met]
    ant, crawler, swimmer, tc = get_task("crawler"), get_task("crawler2d"), get_task("swimmer"), get_task("terraincrosser")
    hopper_height = tc.init_height

    def unmet(cl: Claim) -> str:
        return "; ".join(g.name for g in cl.premise if not g.met)

    differences = (
        f"- Tasks: this run {', '.join(p.tasks)}. The paper's ten ({', '.join(PAPER_TASKS)}) are built from the "
        f"official templates (papers.bodygen.tasks cites each file): the 3-D crawler (free root with {ant.sim_width} "
        "simulator features, four legs with bone offsets in the ground plane and hinges across them, TopoPE path codes "
        f"in base {ant.code_base}), cheetah and terraincrosser (hopper template: root capsule at {hopper_height:g} m, "
        "height and tilt termination; the terraincrosser on a height field of our own with a gap every "
        f"{TERRAIN_GAP_PERIOD:g} m, the official gap_terrain.png not being read), the swimmer (horizontal plane, fluid "
        f"density {swimmer.fluid[0]:g} and viscosity {swimmer.fluid[1]:g} as swimmer.xml) and the walkers and gliders "
        "(walker template, at most 1 / 2 / 3 children, depth 4 or 3: they differ only in these limits). The default "
        "scale runs crawler2d, a planar cut of the ant template a CPU affords; config/full.yaml lists the ten tasks at "
        "the paper's budget, one job per task, arm and seed. Not designed: the official ext_start geom parameter; not "
        "fed: the terraincrosser's phase feature.\n"
        f"- crawler2d: the gear bounds are [{crawler.bounds[3][0]:g}, {crawler.bounds[3][1]:g}] with {crawler.gear:g} "
        f"initially (official 3-D ant: [{ant.bounds[3][0]:g}, {ant.bounds[3][1]:g}], {ant.gear:g}): at the ant's gear "
        f"random torques flip the light planar body within a few steps. {p.env['integrator']} integration "
        "(the templates': RK4; the timing below). The control policy's initial log-std is each task's own "
        f"({crawler.name}: {crawler.control_log_std:g}; crawler.yml -0.5, the other task files 0).\n"
        + compute_note(p, hist, tmpl) + "\n"
        f"- Budget: {p.ppo['env_steps']} simulated control steps per arm and seed ({p.ppo['samples']} per PPO "
        "iteration) against the paper's 50k samples x 1000 iterations; episodes of "
        f"{p.env['control_steps']} control steps (official 1000). The arms trained here: {', '.join(p.arms)} (the "
        "others are built and run at the full scale): the budget goes to fewer arms trained longer. "
        + ("Claims gated off (a premise gate not met, so their comparison cannot speak for or against the paper): "
           + "; ".join(f"({cl.id}) {unmet(cl)}" for cl in gated) + "." if gated else
           "Every premise gate was met.") + "\n"
        "- Start and termination: every design starts lowered to the ground and raised in 0.05 steps until no geom "
        "touches the floor (the official planar environments' env_init_height). " + (
            "No tilt termination (the official default; crawler.yml terminates past 60 degrees, but the official "
            "ant's bone offsets are horizontal and it cannot grow tall; our planar designs can, and at 60 degrees "
            "they earned their return by toppling forward once). " if specs[0].max_tilt >= 360 else
            f"Episodes terminate past {specs[0].max_tilt:g} degrees of tilt (official crawler.yml: 60). ") +
        "The zero-torque column of the table states how much of each arm's return collapsing alone earns.\n"
        f"- Model: hidden {p.model['hidden']}, {p.model['blocks']} blocks, heads {p.model['head_hidden']} (official: "
        f"64, 3, 128 x 128; the checks count both); policy lr {p.ppo['policy_lr']:g} and value lr "
        f"{p.ppo['value_lr']:g} (official 5e-5, 3e-4) for the short budget; single-head attention as the official "
        "code.\n"
        "- Transform2Act-style baseline: GraphConv encoders (tanh) with plain GAE, not the full Transform2Act code "
        "(its JSMLP and graph-conv widths).\n"
        "- The official agent also feeds body depth/height, shortest distances and Laplacian position encodings to "
        "its transformer; ours feeds depth one-hots and TopoPE only.\n"
        "- Claim (e) is our own isolation of TCA, not an experiment of the paper: designs chosen from a fixed set by a "
        "softmax policy, a scripted gait instead of a learned controller, a tabular critic, one policy-gradient step "
        "per iteration; the advantage estimator is the co-design code's.")
    write_report(report_md, title="P3 bodygen: BodyGen, efficient embodiment co-design", scale=scale,
                 what_was_run=what, table_md=table_md, figures=[curves_figure, designs_figure, credit_figure],
                 claims=claim_list, benchmarks=benchmarks, differences=differences, scope=sc, verdicts_figure=verdicts,
                 checks=check_list)
