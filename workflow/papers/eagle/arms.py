"""The arms of the study and the jobs that train them (no torch import: the workflow reads it when it is parsed).

An arm is a set of experts (each fed the canvas, noise or a constant), a fusion and an optional Pre-Alignment
(papers.eagle.train trains one). At the full scale each arm trains in a job of its own, one per (seed, arm) (issue
54: one arm is a 7B LM's whole LLaVA-1.5 schedule, and a seed's eleven did not fit a 48 h job); at the synthetic
scales an arm takes tens of CPU-seconds, and the arms that every seed of the block trains share one job per seed
(:func:`shared_jobs`: the job's start-up, the seed's data and the towers' frozen activations paid once, not once per
arm; issue 52), the others keep a job per (seed, arm). Every arm is seeded
from (seed, its name) and builds its model afresh from the pretrained experts and LM (the pretrain job, shared by
every arm): Pre-Alignment is a stage of its own arm (Sec. 2.5), so no arm reuses another's trained state. The one
dependency between arms is the round-robin selection (Sec. 2.6): which pairs it trains depends on the single experts'
validation accuracies, and each step's on the step before; its jobs are slots (:func:`rr_slot`) that read those
arms' accuracy files (:func:`selection`).
"""
from __future__ import annotations

from papers.eagle.params import BLIND, BLIND_CLIP, FUSIONS, SHUFFLED

RR = "rr"  # a round-robin slot's job name: rr<step>-<candidate>


def arm(name, experts, fusion="concat", inputs=None, prealign=None) -> dict:
    return {"name": name, "experts": list(experts), "fusion": fusion,
            "inputs": list(inputs or ["image"] * len(experts)), "prealign": prealign}


# The arms, by the claim they serve: the single experts (claim b) and the mixture with its non-CLIP experts fed noise
# (group blind: b's trained ablation of the gain over CLIP) or its CLIP expert reading a constant, the training
# canvases' mean CLIP activation map, throughout training and test (group blind_clip: b's trained ablation of the
# gain over the high-res expert), every
# fusion over the experts (a), Pre-Alignment (c) and its shuffled control (group shuffled). The channel concatenation,
# which every claim compares with, trains on every seed; each group on the first arm_seeds[group] seeds; group
# "single:<expert>" is that single expert alone (arm_seeds.single a mapping).
def fixed_arms(experts=("clip", "hires"), groups=("fusion", "single", "prealign", "blind", "blind_clip", "shuffled")) -> list[dict]:
    experts = list(experts)
    arms = [arm("fusion:concat", experts)]
    arms += [arm(f"single:{e}", [e]) for e in experts if "single" in groups or f"single:{e}" in groups]
    if "blind" in groups:
        arms.append(arm(BLIND, experts, inputs=["image"] + ["noise"] * (len(experts) - 1)))
    if "blind_clip" in groups:  # CLIP reads a constant (review r7; the ninth round's other canvas, the eighth's noise)
        arms.append(arm(BLIND_CLIP, experts, inputs=["constant" if e == "clip" else "image" for e in experts]))
    if "fusion" in groups:
        arms += [arm(f"fusion:{f}", experts, f) for f in FUSIONS if f != "concat"]
    if "prealign" in groups:
        arms.append(arm("prealign:concat", experts, prealign="aligned"))
    if "shuffled" in groups:
        arms.append(arm(SHUFFLED, experts, prealign="shuffled"))
    return arms


def seed_groups(arm_seeds: dict, seed: int) -> tuple[str, ...]:
    """The groups of arms that train on `seed` (those whose arm_seeds exceed it; a group not named trains on none).
    A mapping arm_seeds.single {expert: n} gives the groups "single:<expert>" of the experts whose n exceeds it."""
    out = []
    for g, n in arm_seeds.items():
        if isinstance(n, dict):
            out += [f"{g}:{e}" for e, k in n.items() if seed < k]
        elif seed < n:
            out.append(g)
    return tuple(out)


def all_singles(groups, experts) -> bool:
    """Every expert's single arm trains in `groups` (the round-robin starts from the best of them)."""
    return "single" in groups or all(f"single:{e}" in groups for e in experts)


def prealigned(arm: dict) -> list[int]:
    """The experts Pre-Alignment trains, by position in the arm (Sec. 2.5): every non-CLIP expert that sees the
    image, when the arm asks for it; none otherwise."""
    if not arm.get("prealign"):
        return []
    return [i for i, (name, source) in enumerate(zip(arm["experts"], arm["inputs"])) if name != "clip" and source == "image"]


# ---- jobs: one per (seed, arm), or a seed's shared arms in one ---------------------------------------------------
def job_name(name: str) -> str:
    """An arm's job and file name: its name with ':' as '-' ("fusion:concat" -> "fusion-concat")."""
    return name.replace(":", "-")


def round_robin(experts, groups) -> bool:
    """Whether the round-robin selection (Sec. 2.6) runs on a seed of these groups: three or more experts, every
    single expert trained."""
    return len(experts) >= 3 and all_singles(groups, experts)


def rr_slot(step: int, k: int) -> str:
    """The job name of the round-robin's step `step` (1 .. n - 2), candidate `k` (0 .. n - 1 - step): the pair (or
    set) of the experts chosen before the step and the k-th expert not yet chosen (in experts.names order)."""
    return f"{RR}{step}-{k}"


def rr_slots(experts) -> list[tuple[int, int]]:
    """(step, candidate) of every round-robin job, in the order the selection trains them."""
    n = len(experts)
    return [(s, k) for s in range(1, n - 1) for k in range(n - s)]


def parse_slot(job: str) -> tuple[int, int] | None:
    """(step, candidate) of a round-robin slot's job name; None for a fixed arm's."""
    if not job.startswith(RR) or "-" not in job:
        return None
    step, k = job[len(RR):].split("-", 1)
    return int(step), int(k)


def seed_jobs(experts, groups) -> list[str]:
    """The train jobs of one seed: each fixed arm of its groups, then the round-robin's slots where it runs."""
    jobs = [job_name(a["name"]) for a in fixed_arms(experts, groups)]
    if round_robin(experts, groups):
        jobs += [rr_slot(s, k) for s, k in rr_slots(experts)]
    return jobs


def shared_jobs(jobs_by_seed) -> list[str]:
    """The train jobs that every seed trains (`jobs_by_seed`: each seed's :func:`seed_jobs`), in their order: one job
    per seed trains them together at the synthetic scales (workflow/rules/eagle.smk, eagle_train_seed). The same list
    for every seed (a group trains on the first n seeds, so a seed's jobs are an ordered subset of seed 0's); a
    round-robin slot is among them only if the single experts its choice reads are too (it runs on a seed only where
    every single expert trains)."""
    jobs_by_seed = [list(jobs) for jobs in jobs_by_seed]
    if not jobs_by_seed:
        return []
    return [job for job in jobs_by_seed[0] if all(job in jobs for jobs in jobs_by_seed[1:])]


def selection(experts, job: str) -> list[str]:
    """The jobs whose validation accuracies a round-robin slot's choice reads: every single expert and every slot
    of the earlier steps (an edge of the DAG: the slot trains after them); none for a fixed arm."""
    slot = parse_slot(job)
    if slot is None:
        return []
    return [job_name(f"single:{e}") for e in experts] + [rr_slot(s, k) for s, k in rr_slots(experts) if s < slot[0]]


def rr_name(members) -> str:
    return f"rr:{'+'.join(sorted(members))}"


def rr_arm(experts, members) -> dict:
    """The round-robin's concatenation over `members` (experts.names order)."""
    return arm(rr_name(members), [x for x in experts if x in members])


def rr_choice(experts, val_acc, step: int) -> list[str]:
    """The experts chosen before the round-robin's step `step` (Sec. 2.6): the best single expert, then at each
    earlier step the expert whose addition gave the best validation accuracy (the first in experts.names order on a
    tie). `val_acc(name)`: an arm's validation accuracy (all questions)."""
    experts = list(experts)
    chosen = [max(experts, key=lambda e: val_acc(f"single:{e}"))]
    for _ in range(1, step):
        best = None
        for e in (e for e in experts if e not in chosen):
            name = rr_name([*chosen, e])
            if best is None or val_acc(name) > val_acc(best[1]):
                best = (e, name)
        chosen.append(best[0])
    return chosen


def rr_candidates(experts, val_acc, step: int) -> list[dict]:
    """The arms of the round-robin's step `step`, by candidate: the chosen experts with each one not yet chosen."""
    chosen = rr_choice(experts, val_acc, step)
    return [rr_arm(experts, [*chosen, e]) for e in experts if e not in chosen]


def rr_order(experts, val_acc) -> list[str]:
    """The arms along the round-robin's path, one per number of experts: the best single expert, each step's best
    pair (set), and last the concatenation over every expert (fusion:concat, trained as a fixed arm)."""
    chosen = rr_choice(experts, val_acc, len(experts) - 1)
    return [f"single:{chosen[0]}"] + [rr_name(chosen[:i]) for i in range(2, len(chosen) + 1)] + ["fusion:concat"]
