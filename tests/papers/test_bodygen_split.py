"""P3 bodygen: a training run split into chained jobs (bodygen.train_parts, issue 54) is the unsplit run, bit for bit.

Part k of a run resumes from part k - 1's state (papers.bodygen.train.Run.state: networks, optimisers, normalisers,
every random stream, counters, history) at a PPO iteration boundary; the last part writes the checkpoint and history
that the evaluation reads. Here the stage functions the rules call (papers.bodygen.stages.train_part, train) run a
small config whole and in parts, and the weights, the optimisers' states and the history must be identical.
"""
import pandas as pd
import pytest
import torch

from papers.bodygen import stages
from papers.bodygen.params import ARMS, Params, parse
from papers.bodygen.train import Run, part_end, train_until
from papers.bodygen.tasks import TASKS

# Four iterations of 24 simulated steps: 3 episodes x 8 control steps a batch (the planar crawler never terminates)
# fill the 12 samples an iteration needs, so a run of 96 steps splits in two after iteration 2.
SMALL = {"seeds": 1, "arms": ["bodygen", "t2a"], "tasks": ["crawler2d"],
         "env": {"skel_steps": 2, "control_steps": 8, "frame_skip": 4, "ctrl_cost": 1.0e-4, "integrator": "Euler"},
         "model": {**Params().model, "hidden": 8, "blocks": 1, "head_hidden": 8},
         "ppo": {**Params().ppo, "env_steps": 96, "samples": 12, "episodes": 3, "epochs": 2, "minibatch": 16}}
TIMERS = ["seconds", "cpu_seconds", "rollout_cpu_seconds"]


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    path = tmp_path_factory.mktemp("bodygen") / "template.json"
    stages.prepare(cfg=SMALL, template=str(path))
    return str(path)


def run_in_parts(folder, template, arm, parts, seed="0"):
    """The rules' chain: train_part 1 .. parts - 1, then train; returns the checkpoint and the history."""
    cfg = {**SMALL, "train_parts": parts}
    resume = None
    for part in range(1, parts):
        state = folder / f"{arm}_part{part}.pt"
        stages.train_part(cfg=cfg, task="crawler2d", arm=arm, seed=seed, part=str(part), template=template,
                          state=str(state), resume=resume)
        resume = str(state)
    checkpoint, history = folder / f"{arm}.pt", folder / f"history_{arm}.parquet"
    stages.train(cfg=cfg, task="crawler2d", arm=arm, seed=seed, template=template, checkpoint=str(checkpoint),
                 history=str(history), resume=resume)
    return torch.load(checkpoint, weights_only=False), pd.read_parquet(history)


def assert_same_tensors(a: dict, b: dict):
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k


@pytest.mark.parametrize("arm, threads", [("bodygen", 1), ("t2a", 1), ("t2a", 2)])
def test_two_parts_equal_one_job_bit_for_bit(tmp_path, template, arm, threads):
    """N iterations in one job = N/2, then a resume for the other N/2 (same thread count in every job)."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        whole = run_in_parts(tmp_path / "whole", template, arm, 1)
        split = run_in_parts(tmp_path / "split", template, arm, 2)
    finally:
        torch.set_num_threads(before)
    assert_same_tensors(whole[0]["states"][arm], split[0]["states"][arm])
    assert {k: v for k, v in whole[0].items() if k != "states"} == {k: v for k, v in split[0].items() if k != "states"}
    h1, h2 = whole[1].drop(columns=TIMERS), split[1].drop(columns=TIMERS)
    assert len(h1) == 4 and list(h1.env_steps) == [24, 48, 72, 96]  # the design above: the split falls at 48
    pd.testing.assert_frame_equal(h1, h2, check_exact=True)


def test_three_parts_carry_every_part_of_the_state(tmp_path, template):
    """Three parts (boundaries at 32 and 64 steps: after iterations 2 and 3) give the same weights; each part's state
    holds the optimisers, both return normalisers, every random stream, the counters and the history so far."""
    whole = run_in_parts(tmp_path / "whole", template, "bodygen", 1)
    split = run_in_parts(tmp_path / "split", template, "bodygen", 3)
    assert_same_tensors(whole[0]["states"]["bodygen"], split[0]["states"]["bodygen"])
    pd.testing.assert_frame_equal(whole[1].drop(columns=TIMERS), split[1].drop(columns=TIMERS), check_exact=True)
    saved = [torch.load(tmp_path / "split" / f"bodygen_part{k}.pt", weights_only=False) for k in (1, 2)]
    assert [s["part"] for s in saved] == [1, 2] and all(s["parts"] == 3 for s in saved)
    run = saved[1]["run"]
    assert set(run) == {"agent", "opt_pi", "opt_v", "ret_norm", "rng", "env_steps", "iteration", "history"}
    assert set(run["rng"]) == {"torch", "numpy", "numpy_global", "python"}
    assert set(run["ret_norm"]) == {"design", "control"} and run["ret_norm"]["design"]["count"] > 0  # TCA: both used
    assert run["opt_pi"]["state"] and run["opt_v"]["state"]  # Adam's moments, not a fresh optimiser
    assert (saved[0]["run"]["env_steps"], run["env_steps"]) == (48, 72) and run["iteration"] == len(run["history"]) == 3
    assert [part_end(k, 3, 96) for k in (1, 2, 3)] == [32, 64, 96]


def test_a_resume_without_the_env_s_random_stream_diverges(template):
    """The comparison can fail: resuming with the numpy stream (start noise, minibatch order) re-seeded, everything
    else restored, gives other weights."""
    p, arm, task = parse(SMALL), ARMS["bodygen"], TASKS["crawler2d"]
    whole = train_until(Run(arm, p, 0, task), arm, p, task, 96, log=lambda *_: None)
    state = train_until(Run(arm, p, 0, task), arm, p, task, 48, log=lambda *_: None).state()
    exact = train_until(Run.from_state(state, arm, p, task), arm, p, task, 96, log=lambda *_: None)
    state["rng"]["numpy"] = Run(arm, p, 1, task).rng.bit_generator.state
    lossy = train_until(Run.from_state(state, arm, p, task), arm, p, task, 96, log=lambda *_: None)
    assert_same_tensors(whole.agent.state_dict(), exact.agent.state_dict())
    kept, lost = whole.agent.state_dict(), lossy.agent.state_dict()
    assert not all(torch.equal(kept[k], lost[k]) for k in kept)


def test_a_part_refuses_the_wrong_state_and_the_config_bounds_the_parts(tmp_path, template):
    cfg = {**SMALL, "train_parts": 3}
    first = tmp_path / "part1.pt"
    stages.train_part(cfg=cfg, task="crawler2d", arm="bodygen", seed="0", part="1", template=template,
                      state=str(first))
    with pytest.raises(ValueError, match="not of crawler2d/t2a_0 part 1"):
        stages.train_part(cfg=cfg, task="crawler2d", arm="t2a", seed="0", part="2", template=template,
                          state=str(tmp_path / "x.pt"), resume=str(first))
    with pytest.raises(ValueError, match="resumes from the previous part's state"):
        stages.train_part(cfg=cfg, task="crawler2d", arm="bodygen", seed="0", part="2", template=template,
                          state=str(tmp_path / "x.pt"))
    with pytest.raises(ValueError, match="parts 1 .. 2 write a state"):
        stages.train_part(cfg=cfg, task="crawler2d", arm="bodygen", seed="0", part="3", template=template,
                          state=str(tmp_path / "x.pt"), resume=str(first))
    with pytest.raises(ValueError, match="bodygen.train_parts"):
        parse({**SMALL, "train_parts": 9})  # 96 // 12 = 8 parts at most
