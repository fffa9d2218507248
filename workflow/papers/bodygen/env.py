"""The co-design episode of a task (:mod:`papers.bodygen.tasks`): limb tokens for every stage, and the execution
stage in MuJoCo.

Episode structure (official ``ant.py``): ``skel_steps`` skeleton transforms, one attribute transform, then
up to ``control_steps`` control steps of ``frame_skip`` physics steps each. Reward (execution only):
forward velocity of the root, :math:`(x_{after} - x_{before}) / dt`, minus ``ctrl_cost`` times the mean
squared torque command; design steps get 0. At the start of execution qpos and qvel get uniform noise in
[-0.1, 0.1] (official ``reset_state(add_noise=True)``), then the body is lowered to the ground and raised until
it floats (official ``env_init_height``, :func:`place_on_ground`; the swimmer floats in its fluid and is not
placed). An episode terminates when the root's tilt leaves +-``max_tilt`` degrees (planar: the root hinge; 3-D:
the angle of the root's z axis from vertical, official ``ant.py``) or its height leaves
[``min_height``, ``max_height``] (official ``done_condition``), else it is truncated after ``control_steps``.
Terminated bodies stop simulating (their later steps are not samples).
"""
from __future__ import annotations

import mujoco
import numpy as np

from papers.bodygen.morphology import BASE, N_ATTR, Body

N_STAGES = 3  # skeleton, attribute, execution
N_SIM = 5  # planar root: height, angle, 2 velocities, angular rate; limb: joint angle, joint velocity (rest zero)


def n_features(max_depth: int, sim_width: int = N_SIM) -> int:
    return max_depth + N_STAGES + sim_width + N_ATTR


def tokens(bodies: list[Body], stage: int, sims: list[np.ndarray] | None, max_limbs: int, max_depth: int,
           sim_width: int = N_SIM, code_base: int = BASE) -> dict:
    """Padded limb tokens of a batch of bodies (simulator features `sim_width` wide, path codes in `code_base`).

    Returns x (N, L, F), codes (N, L), mask (N, L), adj (N, L, L) parent-child adjacency, and the valid
    action entries: skel (N, L), attr (N, L, N_ATTR) (the root has only its size), ctrl (N, L) (no root motor).
    """
    n, f = len(bodies), n_features(max_depth, sim_width)
    x = np.zeros((n, max_limbs, f), np.float32)
    codes = np.zeros((n, max_limbs), np.int64)
    mask = np.zeros((n, max_limbs), bool)
    adj = np.zeros((n, max_limbs, max_limbs), np.float32)
    for b, body in enumerate(bodies):
        limbs = len(body.limbs)
        if limbs > max_limbs:
            raise ValueError(f"body with {limbs} limbs exceeds max_limbs = {max_limbs}")
        depth = body.depth()
        x[b, np.arange(limbs), depth] = 1.0
        x[b, :limbs, max_depth + stage] = 1.0
        if sims is not None:
            x[b, :limbs, max_depth + N_STAGES: max_depth + N_STAGES + sim_width] = sims[b]
        x[b, :limbs, -N_ATTR:] = np.stack([l.u for l in body.limbs])
        codes[b, :limbs] = body.codes(code_base)
        mask[b, :limbs] = True
        for i, limb in enumerate(body.limbs[1:], start=1):
            adj[b, i, limb.parent] = adj[b, limb.parent, i] = 1.0
    valid_attr = np.repeat(mask[..., None], N_ATTR, -1).astype(np.float32)
    valid_attr[:, 0, :] = 0.0
    valid_attr[:, 0, 2] = 1.0  # the root's own size
    valid_ctrl = mask.astype(np.float32).copy()
    valid_ctrl[:, 0] = 0.0
    return {"x": x, "codes": codes, "mask": mask, "adj": adj,
            "valid_skel": mask.astype(np.float32), "valid_attr": valid_attr, "valid_ctrl": valid_ctrl}


RAISE_STEP = 0.05  # official hopper.py reset_state: the body is raised in steps of 0.05 until it floats


def place_on_ground(m: mujoco.MjModel, d: mujoco.MjData, task) -> None:
    """Drop the body's root to ground level, then raise it in ``RAISE_STEP`` steps until no geom touches the floor.

    The official planar environments (``hopper.py`` ``reset_state`` with ``env_init_height``) start every
    design this way, so that a design whose limbs reach below the template's root height does not start
    inside the floor (the contact solver would launch it: a return earned with zero torque). The vertical
    coordinate is ``qpos[1]`` for planar (xz) roots, a slide relative to the template height, and ``qpos[2]``
    for the 3-D root's free joint (absolute height). The swimmer (xy) has no vertical coordinate.
    """
    if task.plane == "xy":
        mujoco.mj_forward(m, d)
        return
    k = 1 if task.plane == "xz" else 2
    d.qpos[k] = -task.init_height if task.plane == "xz" else 0.0
    while True:
        mujoco.mj_forward(m, d)
        if not any(0 in (c.geom1, c.geom2) for c in d.contact[:d.ncon]):  # geom 0: the floor
            return
        d.qpos[k] += RAISE_STEP


class Execution:
    """The execution stage of N bodies at once in `task`: one MuJoCo model per body (compiled from its MJCF)."""

    def __init__(self, bodies: list[Body], task, sim: dict, rng: np.random.Generator, noise: bool = True):
        self.bodies, self.task, self.sim = bodies, task, sim
        self.models, self.datas = [], []
        for body in bodies:
            m = mujoco.MjModel.from_xml_string(body.mjcf(task, sim["integrator"]))
            d = mujoco.MjData(m)
            if noise:  # official reset_state(add_noise=True)
                d.qpos[:] = m.qpos0 + rng.uniform(-0.1, 0.1, m.nq)
                d.qvel[:] = rng.uniform(-0.1, 0.1, m.nv)
                if task.plane == "xyz":  # keep the free joint's quaternion a unit one
                    d.qpos[3:7] /= np.linalg.norm(d.qpos[3:7])
            place_on_ground(m, d, task)
            self.models.append(m)
            self.datas.append(d)
        self.joint_order = [self._dfs_to_bfs(body) for body in bodies]
        self.dt = task.timestep * sim["frame_skip"]
        # root dofs in qpos / qvel: planar 3 (slide, slide, hinge); free joint 7 / 6
        self.root_q, self.root_v = (7, 6) if task.plane == "xyz" else (3, 3)

    def sim_features(self, rows=None) -> list[np.ndarray]:
        """Simulator features of the bodies in `rows` (default all), one (L, sim_width) array each."""
        out = []
        for b in range(len(self.bodies)) if rows is None else rows:
            body, d, order = self.bodies[b], self.datas[b], self.joint_order[b]
            s = np.zeros((len(body.limbs), self.task.sim_width))
            qvel = np.clip(d.qvel, -10.0, 10.0)  # official clip_qvel
            if self.task.plane == "xyz":  # official ant.py: qpos[2:7] (height, quaternion), qvel[:6]
                s[0] = np.concatenate([d.qpos[2:7], qvel[:6]])
            elif self.task.plane == "xz":
                s[0] = [d.qpos[1], d.qpos[2], qvel[0], qvel[1], qvel[2]]
            else:  # swimmer: no height; heading, planar velocity, turn rate
                s[0] = [0.0, d.qpos[2], qvel[0], qvel[1], qvel[2]]
            # Joints in tree order: the root's dofs, then one hinge per limb in MJCF (depth-first) order.
            s[1:, 0] = d.qpos[self.root_q:][order]
            s[1:, 1] = qvel[self.root_v:][order]
            out.append(s)
        return out

    @staticmethod
    def _dfs_to_bfs(body: Body) -> np.ndarray:
        """For each non-root limb (breadth-first order), its joint's position in the MJCF's depth-first order."""
        order = []

        def visit(i):
            order.append(i)
            for k in body.limbs[i].children:
                visit(k)

        for k in body.limbs[0].children:
            visit(k)
        pos = {limb: j for j, limb in enumerate(order)}
        return np.array([pos[i] for i in range(1, len(body.limbs))], dtype=np.int64)

    def tilt(self, d: mujoco.MjData) -> float:
        """The root's tilt in radians: the planar hinge angle, or the 3-D z axis's angle from vertical."""
        if self.task.plane == "xyz":
            return float(np.arccos(np.clip(d.xmat[1][8], -1.0, 1.0)))  # xmat row-major: [2, 2] = z axis's z
        return 0.0 if self.task.plane == "xy" else float(d.qpos[2])

    def step(self, actions: np.ndarray, ctrl_cost: float, alive: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Apply per-limb torque commands (N, L) (clipped to [-1, 1]) to the bodies still `alive` (N,).

        Returns rewards (N,) (0 for the others) and which bodies terminated at this step (N,)."""
        rewards, terminal = np.zeros(len(self.bodies)), np.zeros(len(self.bodies), bool)
        task = self.task
        max_tilt = np.deg2rad(task.max_tilt)
        for b, (body, m, d) in enumerate(zip(self.bodies, self.models, self.datas)):
            if not alive[b]:
                continue
            ctrl = np.clip(actions[b, 1:len(body.limbs)], -1.0, 1.0)
            d.ctrl[:] = ctrl  # motors are declared per limb in breadth-first order
            x_before = d.qpos[0]
            mujoco.mj_step(m, d, nstep=self.sim["frame_skip"])
            cost = ctrl_cost * float(np.mean(ctrl ** 2)) if len(ctrl) else 0.0
            rewards[b] = (d.qpos[0] - x_before) / self.dt - cost
            height = d.xpos[1][2]  # the root's height (world)
            terminal[b] = not (np.isfinite(d.qpos).all() and abs(self.tilt(d)) < max_tilt
                               and task.min_height < height < task.max_height)
        return rewards, terminal


def passive_rollout(bodies: list[Body], task, sim: dict, rng: np.random.Generator):
    """The bodies' execution stage with zero torque: the return (N,), episode length (N,) and the return of the
    second half of the execution (N,) that a design earns by collapsing under gravity alone, which the policy's
    return must exceed to count as moving."""
    ex = Execution(bodies, task, sim, rng)
    alive = np.ones(len(bodies), bool)
    returns, lengths, late = np.zeros(len(bodies)), np.zeros(len(bodies)), np.zeros(len(bodies))
    zero = np.zeros((len(bodies), max(len(b.limbs) for b in bodies)))
    for t in range(sim["control_steps"]):
        lengths += alive
        r, done = ex.step(zero, sim["ctrl_cost"], alive)
        returns += r
        if t >= sim["control_steps"] // 2:
            late += r
        alive &= ~done
        if not alive.any():
            break
    return returns, lengths, late
