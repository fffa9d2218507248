"""P3 bodygen tasks: every template builds, compiles in MuJoCo, takes design actions and runs a few control steps;
the 3-D crawler's hinges, tilt and free joint, the swimmer's fluid, the terraincrosser's gaps and the walker /
glider limits against the official templates' values (GenesisOrigin/BodyGen assets/mujoco_envs, design_opt/cfg)."""
import dataclasses

import mujoco
import numpy as np
import pytest

from papers.bodygen.env import Execution, passive_rollout, tokens
from papers.bodygen.morphology import ADD
from papers.bodygen.params import ARMS, Params, parse
from papers.bodygen.tasks import PAPER_TASKS, TASKS, TERRAIN_GAP_PERIOD, get_task
from papers.bodygen.train import initial_body, make_agent, max_limbs, rollout, train_arm

ENV = dict(Params().env)


def compile_body(body, task):
    return mujoco.MjModel.from_xml_string(body.mjcf(task, "RK4"))


@pytest.mark.parametrize("name", PAPER_TASKS)
def test_template_compiles_and_design_actions_change_the_body(name):
    task = TASKS[name]
    body = initial_body(task)
    m = compile_body(body, task)
    root_q, root_v = (7, 6) if task.plane == "xyz" else (3, 3)
    assert len(body.limbs) == 1 + len(task.legs)
    assert m.nu == len(task.legs) and m.nq == root_q + len(task.legs) and m.nv == root_v + len(task.legs)
    np.testing.assert_allclose(m.actuator_gear[:, 0], task.gear, rtol=1e-4)
    np.testing.assert_allclose(m.jnt_range[-1], np.deg2rad([-task.joint_range, task.joint_range]), rtol=1e-6)
    # skeleton action: every limb adds a child -> one more motor per added limb, the body still compiles
    grown = body.transform_skeleton(np.full(len(body.limbs), ADD), task.max_depth, task.max_children)
    added = sum(1 for i in range(len(body.limbs)) if body.can_add(i, task.max_depth, task.max_children))
    assert len(grown.limbs) == len(body.limbs) + added > len(body.limbs)
    assert compile_body(grown, task).nu == len(grown.limbs) - 1
    # attribute action: a positive size delta widens every capsule of the compiled model
    wider = grown.transform_attributes(np.tile([0.0, 0.0, 0.5, 0.0], (len(grown.limbs), 1)))
    before, after = compile_body(grown, task).geom_size, compile_body(wider, task).geom_size
    capsules = np.arange(2, len(grown.limbs) + 1)  # geom 0: floor, 1: root
    assert np.all(after[capsules, 0] > before[capsules, 0])


@pytest.mark.parametrize("name", PAPER_TASKS)
def test_a_few_control_steps_run_and_the_reward_is_the_root_velocity(name):
    """Zero torque: the returns telescope to the root's x displacement over dt (no control cost)."""
    task = TASKS[name]
    body = initial_body(task)
    env = {**ENV, "control_steps": 5}
    returns, lengths, _ = passive_rollout([body], task, env, np.random.default_rng(0))
    ex = Execution([body], task, env, np.random.default_rng(0))
    x0 = ex.datas[0].qpos[0]
    mujoco.mj_step(ex.models[0], ex.datas[0], nstep=int(lengths[0]) * env["frame_skip"])
    assert returns[0] == pytest.approx((ex.datas[0].qpos[0] - x0) / (task.timestep * env["frame_skip"]), rel=1e-9,
                                       abs=1e-12)
    feats = ex.sim_features()[0]
    assert feats.shape == (len(body.limbs), task.sim_width) and np.isfinite(feats).all()
    t = tokens([body], 2, [feats], max_limbs(task), task.max_depth, task.sim_width, task.code_base)
    assert t["x"].shape[-1] == make_agent("mosat", Params().model, task).norm.mean.shape[0]


def test_crawler_hinges_match_the_ant_template():
    """ant.xml: leg 1 bone (0.4, 0.4, 0), axis (-0.707, 0.707, 0); leg 3 bone (-0.4, -0.4, 0), axis (0.707, -0.707, 0):
    the axis is z x bone, horizontal and across the bone."""
    task = TASKS["crawler"]
    m = compile_body(initial_body(task), task)
    s = np.sqrt(0.5)
    expected = [[-s, s, 0], [-s, -s, 0], [s, -s, 0], [s, s, 0]]  # ant.xml joints 1..4
    np.testing.assert_allclose(m.jnt_axis[1:], expected, atol=1e-6)
    assert m.jnt_type[0] == mujoco.mjtJoint.mjJNT_FREE
    codes = initial_body(task).transform_skeleton(np.full(5, ADD), 4, 2).codes(task.code_base)
    assert task.code_base == 5 and len(set(codes)) == len(codes)


@pytest.mark.parametrize("degrees,done", [(50.0, False), (70.0, True)])
def test_crawler_terminates_past_its_tilt(degrees, done):
    """crawler.yml max_ang 60: the root's z axis tilted by `degrees` about x (quaternion cos, sin of half)."""
    task = TASKS["crawler"]
    ex = Execution([initial_body(task)], task, ENV, np.random.default_rng(0), noise=False)
    d = ex.datas[0]
    half = np.deg2rad(degrees) / 2
    d.qpos[3:7] = [np.cos(half), np.sin(half), 0.0, 0.0]
    d.qpos[2] = 1.0  # in the air: the tilt stays within one step
    mujoco.mj_forward(ex.models[0], d)
    assert ex.tilt(d) == pytest.approx(np.deg2rad(degrees), abs=1e-9)
    _, terminal = ex.step(np.zeros((1, 5)), 0.0, np.array([True]))
    assert terminal[0] == done


def test_swimmer_fluid_slows_a_gliding_body():
    """swimmer.xml: density 4000, viscosity 0.1. Without the fluid a body gliding in the horizontal plane keeps
    its speed (no gravity in the plane, no contact); with it, drag slows it."""
    task = TASKS["swimmer"]
    speeds = {}
    for label, t in (("fluid", task), ("vacuum", dataclasses.replace(task, fluid=()))):
        m = compile_body(initial_body(t), t)
        if label == "fluid":
            assert m.opt.density == pytest.approx(4000.0) and m.opt.viscosity == pytest.approx(0.1)
        d = mujoco.MjData(m)
        d.qvel[0] = 1.0
        mujoco.mj_step(m, d, nstep=100)
        speeds[label] = d.qvel[0]
    assert speeds["vacuum"] == pytest.approx(1.0, rel=1e-3) and speeds["fluid"] < 0.9


def test_terraincrosser_has_gaps_where_the_height_field_says():
    """A ray cast down at a platform hits the surface at z = 0; at a gap it falls to the field's base (-0.75)."""
    task = TASKS["terraincrosser"]
    m = compile_body(initial_body(task), task)
    assert m.nhfield == 1
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    geomid = np.zeros(1, np.int32)

    def surface(x):
        return 5.0 - mujoco.mj_ray(m, d, np.array([x, 0.0, 5.0]), np.array([0.0, 0.0, -1.0]), None, 1, 1, geomid)

    gap_centre = 2.0 + TERRAIN_GAP_PERIOD - 0.4  # the first gap spans (4.4, 5.2)
    assert surface(1.0) == pytest.approx(0.0, abs=1e-3) and surface(3.5) == pytest.approx(0.0, abs=1e-3)
    assert surface(gap_centre) == pytest.approx(-0.75, abs=1e-3)
    assert surface(gap_centre + TERRAIN_GAP_PERIOD) == pytest.approx(-0.75, abs=1e-3)


@pytest.mark.parametrize("name,depth,children,largest", [
    ("walker-regular", 4, 1, 1 + 2 + 2 + 2), ("walker-medium", 4, 2, 1 + 2 + 4 + 8),
    ("walker-hard", 4, 3, 1 + 3 + 9 + 27),
    ("glider-regular", 3, 1, 1 + 2 + 2), ("glider-medium", 3, 2, 1 + 2 + 4), ("glider-hard", 3, 3, 1 + 3 + 9)])
def test_walkers_and_gliders_differ_only_in_their_limits(name, depth, children, largest):
    """walker-*.yml / glider-*.yml: max_body_depth 4 / 3 and max_nchild 1 / 2 / 3 on the one walker template; growing
    with ADD everywhere fills the largest tree the limits allow."""
    task, base = TASKS[name], TASKS["walker-regular"]
    assert (task.max_depth, task.max_children) == (depth, children)
    assert dataclasses.replace(task, name=base.name, source=base.source, max_depth=4, max_children=1) == base
    body = initial_body(task)
    for _ in range(12):  # one child per limb per step: enough steps to fill every level
        body = body.transform_skeleton(np.full(len(body.limbs), ADD), task.max_depth, task.max_children)
    assert len(body.limbs) == max_limbs(task) == largest
    assert compile_body(body, task).nu == largest - 1


def test_three_dimensional_crawler_trains_a_few_steps():
    p = dataclasses.replace(Params(), env={**Params().env, "control_steps": 4, "skel_steps": 2},
                            model={**Params().model, "hidden": 8, "blocks": 1, "head_hidden": 8},
                            ppo={**Params().ppo, "env_steps": 8, "samples": 8, "episodes": 2, "epochs": 1})
    agent, hist = train_arm(ARMS["bodygen"], p, 0, log=lambda *_: None, task=TASKS["crawler"])
    assert hist[-1]["env_steps"] >= 8 and np.isfinite(hist[-1]["train_return"])
    *_, bodies = rollout(agent, ARMS["bodygen"], p, TASKS["crawler"], np.random.default_rng(0), 2, deterministic=True)
    assert all(len(b.limbs) >= 5 for b in bodies)


def test_bad_task_names_and_malformed_templates_name_the_key():
    with pytest.raises(ValueError, match="bodygen.tasks.*'hopper'"):
        parse({"seeds": 3, "tasks": ["crawler", "hopper"]})
    with pytest.raises(ValueError, match="bodygen.tasks"):
        get_task("ant")
    with pytest.raises(ValueError, match="'crawler'.*'plane'"):
        dataclasses.replace(TASKS["crawler"], plane="xw")
    with pytest.raises(ValueError, match="'cheetah'.*'legs'"):
        dataclasses.replace(TASKS["cheetah"], legs=((0.0, -0.9),))
    with pytest.raises(ValueError, match="'swimmer'.*'bounds'"):
        dataclasses.replace(TASKS["swimmer"], bounds=((1.5, -1.5),) * 4)
