"""The co-design episode on a planar crawler: limb tokens for every stage, and the execution stage in MuJoCo.

Episode structure (official ``ant.py``): ``skel_steps`` skeleton transforms, one attribute transform, then
up to ``control_steps`` control steps of ``frame_skip`` physics steps each. Reward (execution only):
forward velocity of the root, :math:`(x_{after} - x_{before}) / dt`, minus ``ctrl_cost`` times the mean
squared torque command; design steps get 0. At the start of execution qpos and qvel get uniform noise in
[-0.1, 0.1] (official ``reset_state(add_noise=True)``), then the body is lowered to the ground and raised until
it floats (official ``env_init_height``, :func:`place_on_ground`). An episode terminates when the root's pitch leaves
+-``max_tilt`` degrees (official crawler ``done_condition: max_ang: 60``), else it is truncated after
``control_steps``. Terminated bodies stop simulating (their later steps are not samples).
"""
from __future__ import annotations

import mujoco
import numpy as np

from papers.bodygen.morphology import N_ATTR, Body

N_STAGES = 3  # skeleton, attribute, execution
N_SIM = 5  # root: z, pitch, vx, vz, pitch rate; limb: joint angle, joint velocity (rest zero)


def n_features(max_depth: int) -> int:
    return max_depth + N_STAGES + N_SIM + N_ATTR


def tokens(bodies: list[Body], stage: int, sims: list[np.ndarray] | None, max_limbs: int, max_depth: int) -> dict:
    """Padded limb tokens of a batch of bodies.

    Returns x (N, L, F), codes (N, L), mask (N, L), adj (N, L, L) parent-child adjacency, and the valid
    action entries: skel (N, L), attr (N, L, N_ATTR) (the root has only its size), ctrl (N, L) (no root motor).
    """
    n, f = len(bodies), n_features(max_depth)
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
            x[b, :limbs, max_depth + N_STAGES: max_depth + N_STAGES + N_SIM] = sims[b]
        x[b, :limbs, -N_ATTR:] = np.stack([l.u for l in body.limbs])
        codes[b, :limbs] = body.codes()
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


def place_on_ground(m: mujoco.MjModel, d: mujoco.MjData, init_height: float) -> None:
    """Drop the body's root to ground level, then raise it in ``RAISE_STEP`` steps until no geom touches the floor.

    The official planar environments (``hopper.py`` ``reset_state`` with ``env_init_height``) start every
    design this way, so that a design whose limbs reach below the template's root height does not start
    inside the floor (the contact solver would launch it: a return earned with zero torque).
    ``qpos[1]`` is the root's vertical slide, relative to the MJCF height ``init_height``.
    """
    d.qpos[1] = -init_height
    while True:
        mujoco.mj_forward(m, d)
        if not any(0 in (c.geom1, c.geom2) for c in d.contact[:d.ncon]):  # geom 0: the floor
            return
        d.qpos[1] += RAISE_STEP


class Execution:
    """The execution stage of N bodies at once: one MuJoCo model per body (compiled from its MJCF)."""

    def __init__(self, bodies: list[Body], sim: dict, rng: np.random.Generator, noise: bool = True):
        self.bodies, self.sim = bodies, sim
        self.models, self.datas = [], []
        for body in bodies:
            xml = body.mjcf(sim["root_radius"], sim["init_height"], sim["joint_range"], sim["timestep"],
                            sim["integrator"])
            m = mujoco.MjModel.from_xml_string(xml)
            d = mujoco.MjData(m)
            if noise:  # official reset_state(add_noise=True)
                d.qpos[:] = m.qpos0 + rng.uniform(-0.1, 0.1, m.nq)
                d.qvel[:] = rng.uniform(-0.1, 0.1, m.nv)
            place_on_ground(m, d, sim["init_height"])
            self.models.append(m)
            self.datas.append(d)
        self.joint_order = [self._dfs_to_bfs(body) for body in bodies]
        self.dt = sim["timestep"] * sim["frame_skip"]

    def sim_features(self, rows=None) -> list[np.ndarray]:
        """Simulator features of the bodies in `rows` (default all), one (L, N_SIM) array each."""
        out = []
        for b in range(len(self.bodies)) if rows is None else rows:
            body, d, order = self.bodies[b], self.datas[b], self.joint_order[b]
            s = np.zeros((len(body.limbs), N_SIM))
            qvel = np.clip(d.qvel, -10.0, 10.0)  # official clip_qvel
            s[0] = [d.qpos[1], d.qpos[2], qvel[0], qvel[1], qvel[2]]
            # Joints in tree order: 3 root dofs, then one hinge per limb in MJCF (depth-first) order.
            s[1:, 0] = d.qpos[3:][order]
            s[1:, 1] = qvel[3:][order]
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

    def step(self, actions: np.ndarray, ctrl_cost: float, alive: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Apply per-limb torque commands (N, L) (clipped to [-1, 1]) to the bodies still `alive` (N,).

        Returns rewards (N,) (0 for the others) and which bodies terminated at this step (N,)."""
        rewards, terminal = np.zeros(len(self.bodies)), np.zeros(len(self.bodies), bool)
        max_tilt = np.deg2rad(self.sim["max_tilt"])
        for b, (body, m, d) in enumerate(zip(self.bodies, self.models, self.datas)):
            if not alive[b]:
                continue
            ctrl = np.clip(actions[b, 1:len(body.limbs)], -1.0, 1.0)
            d.ctrl[:] = ctrl  # motors are declared per limb in breadth-first order
            x_before = d.qpos[0]
            mujoco.mj_step(m, d, nstep=self.sim["frame_skip"])
            cost = ctrl_cost * float(np.mean(ctrl ** 2)) if len(ctrl) else 0.0
            rewards[b] = (d.qpos[0] - x_before) / self.dt - cost
            terminal[b] = not (np.isfinite(d.qpos).all() and abs(d.qpos[2]) < max_tilt)
        return rewards, terminal


def passive_rollout(bodies: list[Body], sim: dict, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The bodies' execution stage with zero torque: the return (N,) and episode length (N,) that a design earns
    by collapsing under gravity alone, which the policy's return must exceed to count as moving."""
    ex = Execution(bodies, sim, rng)
    alive = np.ones(len(bodies), bool)
    returns, lengths = np.zeros(len(bodies)), np.zeros(len(bodies))
    zero = np.zeros((len(bodies), max(len(b.limbs) for b in bodies)))
    for _ in range(sim["control_steps"]):
        lengths += alive
        r, done = ex.step(zero, sim["ctrl_cost"], alive)
        returns += r
        alive &= ~done
        if not alive.any():
            break
    return returns, lengths
