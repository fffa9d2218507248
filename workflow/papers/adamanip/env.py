"""Articulated objects with hidden mechanisms in MuJoCo, a floating gripper, point-cloud observations.

The paper's environment (Sec. 3, "AdaManip environment"; official code ``envs/open_*.py``) simulates
objects in IsaacGym whose *mechanism* cannot be seen: which way a cap or handle turns, how far it must
turn before a lock releases, whether a microwave is locked, which of push / turn cw / turn ccw switches
a lamp on. Here each object is an MJCF model generated per episode with randomised geometry; the
mechanism is drawn per episode and kept out of the observation.

Kinematic simulation (a deviation for the CPU budget): the gripper holds the handle from the start and
moves by end-effector targets in the *grasp frame* (x = the pull direction u, y/z lateral, a roll psi
about u). Each object joint follows the gripper's target within its limits,

.. math::
    \\theta = \\mathrm{clip}(\\psi, \\theta_{lo}, \\theta_{hi}), \\qquad
    s_{open} = \\mathrm{clip}(s, 0, s_{hi}), \\qquad b = \\mathrm{clip}(-s, 0, b_{hi}),

where the limits are the MuJoCo model's ``jnt_range`` (a hidden turning direction is a one-sided
range, a lock is a closed range ``[0, 0]`` on the opening joint until the unlock condition is met), and
the gripper itself can strain against a blocked part only by a compliance (``c_s`` metres, ``c_psi``
radians): a try in a blocked direction moves the gripper but not the part, which the observation shows.
MuJoCo's forward kinematics (``mj_kinematics``) then places every geom, and the point cloud is the
geoms' surface points (sampled once per episode in each geom's frame) carried to the world frame.
"""
from __future__ import annotations

import dataclasses

import mujoco
import numpy as np

# The objects: the paper's categories with hidden mechanisms (Sec. 3.2) and, as a negative control,
# `bottle_visible`, a bottle whose turning direction is marked on its body and whose lock releases at a
# fixed angle -- the same task with nothing hidden.
CATEGORIES = ("bottle", "door", "microwave", "safe", "lamp", "bottle_visible")
HIDDEN = ("bottle", "door", "microwave", "safe", "lamp")
CONTROL = "bottle_visible"

POSE_DIM = 4  # gripper pose: (s, lateral y, lateral z, psi) in the grasp frame
STATE_DIM = 2 * POSE_DIM  # gripper state: its pose and its velocity (the pose change of the last step, in units of
# the step sizes) -- the official proprioception holds qpos, qvel and the hand pose; the velocity is what shows a
# blocked try (the gripper moves less than commanded)
ACTION_DIM = 4  # end-effector target deltas (ds, dy, dz, dpsi), each in [-1, 1] x its step size


@dataclasses.dataclass(frozen=True)
class Physics:
    """Step sizes, compliance, thresholds (the turn follows the official collector's 15 deg per step in
    manipulation/open_bottle.py; its lift is ``open_size = 0.015`` m, ours 0.01 m per unit action: a
    difference from the official collector)."""

    step_s: float = 0.01  # metres of pull / push per unit action (official lift: 0.015)
    step_psi: float = 0.2618  # radians of roll per unit action (15 deg, the official rot_quat)
    # how far the gripper can strain past a blocked part (m), and in roll (rad): half a step, so a blocked try
    # moves the hand half as far as commanded (the official IsaacGym hand, holding a locked handle, barely follows
    # its target), which the gripper's velocity in the observation shows
    compliance_s: float = 0.005
    compliance_psi: float = 0.13
    open_success: float = 0.04  # opening (m of travel, arc length for hinged doors) that counts as success
    unlock_range: tuple = (0.5, 1.0)  # hidden turn (rad) that releases a lock, uniform (bottle, door, safe)
    lamp_on: float = 0.5  # turn (rad) that switches a lamp on
    button_travel: float = 0.012  # button stroke (m); pressed at 90 %
    points: int = 64  # points per cloud, shared out evenly over the geoms and the two fingers (so moving
    # parts are as densely sampled as the static body; the paper samples the scene, then down-samples)
    # blocked effort (the summed size, in steps, of the pulls, pushes and turns that moved no part of the object:
    # a full-step try counts 1) after which the mechanism jams for the rest of the
    # episode (no part moves again: the episode fails); 0 = never. Forcing a locked handle, or turning a cap the wrong
    # way, is what damages a real mechanism; it makes undirected retrying fail where adaptive trying does not.
    jam_after: int = 0


# ---- MJCF per category -------------------------------------------------------------------------
def _u(rng, lo, hi):
    return float(rng.uniform(lo, hi))


def _clamp(x: float, lo: float, hi: float) -> float:
    """np.clip for one float (lo <= hi), without numpy's per-call overhead (the environment's hot loop)."""
    return min(max(x, lo), hi)


def _mjcf(category: str, geo: dict, direction: int) -> str:
    """The MJCF of one object. `geo` holds its randomised sizes; `direction` (+1 / -1) is the hidden turning
    direction, written as a one-sided joint range (and, for the visible bottle, as a marker geom)."""
    turn = "0 1.6" if direction > 0 else "-1.6 0"
    b = geo
    if category in ("bottle", "bottle_visible"):
        R, H = b["radius"], b["height"]
        marker = (f'<geom name="marker" type="box" size="0.01 0.02 0.03" pos="0 {direction * (R + 0.02):.4f} {H:.4f}"/>'
                  if category == "bottle_visible" else "")
        return f"""<mujoco><compiler angle="radian"/><worldbody>
<body name="object" pos="{b['x']:.4f} {b['y']:.4f} 0">
  <geom name="body" type="cylinder" size="{R:.4f} {H:.4f}" pos="0 0 {H:.4f}"/>
  {marker}
  <body name="cap" pos="0 0 {2 * H:.4f}">
    <joint name="open" type="slide" axis="0 0 1" limited="true" range="0 0.001"/>
    <joint name="turn" type="hinge" axis="0 0 1" limited="true" range="{turn}"/>
    <geom name="cap" type="cylinder" size="{0.8 * R:.4f} 0.015" pos="0 0 0.015"/>
    <geom name="tab" type="box" size="0.025 0.006 0.008" pos="{0.8 * R + 0.025:.4f} 0 0.015"/>
    <site name="grasp" pos="0 0 0.03"/>
  </body>
</body></worldbody></mujoco>"""
    if category in ("door", "safe"):
        W, Hd = b["width"], b["height"]
        r = b["handle_at"] * W  # handle's distance from the hinge
        box = (f'<geom name="box" type="box" size="{W / 2:.4f} {W / 2:.4f} {Hd / 2:.4f}" pos="{-W / 2:.4f} 0 {Hd / 2:.4f}"/>'
               if category == "safe" else
               f'<geom name="frame" type="box" size="0.01 {W / 2 + 0.03:.4f} {Hd / 2 + 0.03:.4f}" pos="-0.02 0 {Hd / 2:.4f}"/>')
        part = ('<geom name="knob" type="cylinder" size="0.02 0.01" quat="0.7071 0 0.7071 0" pos="0.01 0 0"/>'
                '<geom name="pointer" type="box" size="0.004 0.005 0.018" pos="0.022 0 0.012"/>'
                if category == "safe" else
                '<geom name="lever" type="box" size="0.01 0.045 0.007" pos="0.025 -0.03 0"/>')
        return f"""<mujoco><compiler angle="radian"/><worldbody>
<body name="object" pos="{b['x']:.4f} {b['y']:.4f} 0">
  {box}
  <body name="door" pos="0 {-W / 2:.4f} {Hd / 2:.4f}">
    <joint name="open" type="hinge" axis="0 0 -1" limited="true" range="0 0.001"/>
    <geom name="plate" type="box" size="0.01 {W / 2:.4f} {Hd / 2:.4f}" pos="0.01 {W / 2:.4f} 0"/>
    <body name="handle" pos="0.02 {r:.4f} 0">
      <joint name="turn" type="hinge" axis="1 0 0" limited="true" range="{turn}"/>
      {part}
      <site name="grasp" pos="0.03 0 0"/>
    </body>
  </body>
</body></worldbody></mujoco>"""
    if category == "microwave":
        W, Hb, D = b["width"], b["height"], b["depth"]
        Wd = 0.7 * W  # the door spans 70 % of the front; the control panel with the button the rest
        return f"""<mujoco><compiler angle="radian"/><worldbody>
<body name="object" pos="{b['x']:.4f} {b['y']:.4f} 0">
  <geom name="box" type="box" size="{D / 2:.4f} {W / 2:.4f} {Hb / 2:.4f}" pos="{-D / 2:.4f} 0 {Hb / 2:.4f}"/>
  <body name="button" pos="0.005 {W / 2 - 0.15 * W:.4f} {Hb / 2:.4f}">
    <joint name="press" type="slide" axis="-1 0 0" limited="true" range="0 {b['travel']:.4f}"/>
    <geom name="button" type="box" size="0.008 0.015 0.015"/>
  </body>
  <body name="door" pos="0 {-W / 2:.4f} {Hb / 2:.4f}">
    <joint name="open" type="hinge" axis="0 0 -1" limited="true" range="0 0.001"/>
    <geom name="plate" type="box" size="0.01 {Wd / 2:.4f} {Hb / 2 - 0.01:.4f}" pos="0.01 {Wd / 2:.4f} 0"/>
    <geom name="handle" type="box" size="0.015 0.008 0.05" pos="0.03 {Wd - 0.03:.4f} 0"/>
    <site name="grasp" pos="0.045 {Wd - 0.03:.4f} 0"/>
  </body>
</body></worldbody></mujoco>"""
    if category == "lamp":
        Hs, Rb = b["height"], b["radius"]
        return f"""<mujoco><compiler angle="radian"/><worldbody>
<body name="object" pos="{b['x']:.4f} {b['y']:.4f} 0">
  <geom name="base" type="cylinder" size="{Rb:.4f} 0.015" pos="0 0 0.015"/>
  <geom name="stem" type="cylinder" size="0.012 {Hs / 2:.4f}" pos="0 0 {Hs / 2 + 0.03:.4f}"/>
  <geom name="shade" type="cylinder" size="{1.3 * Rb:.4f} 0.04" pos="0 0 {Hs + 0.07:.4f}"/>
  <body name="switch" pos="{Rb * 0.6:.4f} 0 0.04">
    <joint name="press" type="slide" axis="0 0 -1" limited="true" range="0 0.001"/>
    <joint name="turn" type="hinge" axis="0 0 1" limited="true" range="0 0.001"/>
    <geom name="switch" type="cylinder" size="0.015 0.01" pos="0 0 0.01"/>
    <geom name="lever" type="box" size="0.02 0.004 0.006" pos="0.02 0 0.012"/>
    <site name="grasp" pos="0 0 0.025"/>
  </body>
</body></worldbody></mujoco>"""
    raise ValueError(f"adamanip: unknown category {category!r} (known: {', '.join(CATEGORIES)})")


def _geometry(category: str, rng: np.random.Generator, phys: Physics) -> dict:
    """Randomised sizes and placement of one object (the paper randomises assets and poses, Sec. 3.3)."""
    g = {"x": _u(rng, -0.02, 0.02), "y": _u(rng, -0.02, 0.02)}
    if category in ("bottle", "bottle_visible"):
        g.update(radius=_u(rng, 0.03, 0.045), height=_u(rng, 0.05, 0.08))
    elif category == "door":
        g.update(width=_u(rng, 0.3, 0.45), height=_u(rng, 0.5, 0.7), handle_at=_u(rng, 0.75, 0.9))
    elif category == "safe":
        g.update(width=_u(rng, 0.15, 0.22), height=_u(rng, 0.15, 0.22), handle_at=_u(rng, 0.65, 0.8))
    elif category == "microwave":
        g.update(width=_u(rng, 0.3, 0.4), height=_u(rng, 0.18, 0.25), depth=_u(rng, 0.2, 0.3),
                 travel=phys.button_travel)
    elif category == "lamp":
        g.update(height=_u(rng, 0.2, 0.3), radius=_u(rng, 0.06, 0.08))
    return g


def _hidden_state(category: str, rng: np.random.Generator, phys: Physics) -> dict:
    """The mechanism, drawn per episode (official envs: clockwise / lock flags drawn at reset)."""
    h = {"direction": 1 if rng.random() < 0.5 else -1, "unlock": _u(rng, *phys.unlock_range),
         "locked": False, "mode": "none"}
    if category == "bottle_visible":
        h["unlock"] = float(np.mean(phys.unlock_range))  # fixed: nothing about the lock is hidden
    if category == "microwave":
        h["locked"] = bool(rng.random() < 0.5)  # official open_microwave: locked with probability 0.5
    if category == "lamp":
        h["mode"] = ("push", "cw", "ccw")[int(rng.integers(3))]
        h["direction"] = {"push": 0, "cw": -1, "ccw": 1}[h["mode"]]
    return h


def _surface_points(gtype: int, size: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k points uniform on a box's or a cylinder's surface, in the geom's frame. (k, 3)"""
    if gtype == mujoco.mjtGeom.mjGEOM_BOX:
        a = size[:3]
        areas = np.array([a[1] * a[2], a[0] * a[2], a[0] * a[1]]).repeat(2)
        face = rng.choice(6, size=k, p=areas / areas.sum())
        p = rng.uniform(-1, 1, size=(k, 3)) * a
        axis = face // 2
        p[np.arange(k), axis] = np.where(face % 2 == 0, 1.0, -1.0) * a[axis]
        return p
    if gtype == mujoco.mjtGeom.mjGEOM_CYLINDER:
        r, h = size[0], size[1]
        side, cap = 2 * np.pi * r * 2 * h, 2 * np.pi * r * r
        on_side = rng.random(k) < side / (side + cap)
        phi = rng.uniform(0, 2 * np.pi, k)
        rad = np.where(on_side, r, r * np.sqrt(rng.random(k)))
        z = np.where(on_side, rng.uniform(-h, h, k), np.where(rng.random(k) < 0.5, h, -h))
        return np.stack([rad * np.cos(phi), rad * np.sin(phi), z], 1)
    raise ValueError(f"adamanip: no surface sampler for geom type {gtype}")


# The grasp frame per category: u = pull direction (also the roll axis), v and w lateral (world frame).
FRAMES = {"bottle": ((0, 0, 1), (1, 0, 0), (0, 1, 0)), "lamp": ((0, 0, 1), (1, 0, 0), (0, 1, 0)),
          "door": ((1, 0, 0), (0, 1, 0), (0, 0, 1)), "safe": ((1, 0, 0), (0, 1, 0), (0, 0, 1)),
          "microwave": ((1, 0, 0), (0, 1, 0), (0, 0, 1))}
FRAMES["bottle_visible"] = FRAMES["bottle"]


class Episode:
    """One randomised object, its hidden mechanism, the gripper; `step` applies an action, `observe` reads.

    Args:
        category: one of :data:`CATEGORIES`.
        rng: the episode's generator (geometry, mechanism, surface points).
        phys: :class:`Physics`.
    """

    def __init__(self, category: str, rng: np.random.Generator, phys: Physics):
        self.category, self.phys = category, phys
        self.hidden = _hidden_state(category, rng, phys)
        self.geo = _geometry(category, rng, phys)
        direction = self.hidden["direction"] if category != "lamp" else 1
        self.model = mujoco.MjModel.from_xml_string(_mjcf(category, self.geo, direction))
        self.data = mujoco.MjData(self.model)
        m = self.model
        self.jid = {n: mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, n) for n in ("open", "turn", "press")}
        self.site = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, "grasp")
        if category == "lamp":  # the mode opens exactly one of the switch's three ways
            mode = self.hidden["mode"]
            m.jnt_range[self.jid["turn"]] = {"push": (0, 0), "cw": (-1.6, 0), "ccw": (0, 1.6)}[mode]
            m.jnt_range[self.jid["press"]] = (0, phys.button_travel) if mode == "push" else (0, 0)
        # (the MJCF writes closed ranges as [0, 0.001], which MuJoCo accepts; _set_open_range and the lamp
        # mode above set the true ranges)
        # hinged doors: joint angle = arc length / radius of the handle around the hinge
        self.radius = self.geo["handle_at"] * self.geo["width"] if category in ("door", "safe") else (
            0.7 * self.geo["width"] - 0.03 if category == "microwave" else 1.0)
        self.open_max = {"bottle": 0.08, "bottle_visible": 0.08}.get(category, 1.5 * self.radius)
        self.unlocked = category == "lamp" or (category == "microwave" and not self.hidden["locked"])
        self._set_open_range()
        self.u, self.v, self.w = (np.array(a, dtype=float) for a in FRAMES[category])
        self.cmd = np.zeros(POSE_DIM)  # gripper target in the grasp frame: s, lateral y, lateral z, psi
        self.velocity = np.zeros(POSE_DIM)  # its change over the last step / the step sizes
        self.q = {"open": 0.0, "turn": 0.0, "press": 0.0}  # s_open (m of travel), theta (rad), b (m)
        self.blocked = 0.0  # blocked effort so far: the summed size (in steps) of the moves that moved no part
        self.moves = 0  # steps taken, and those whose pull / push and turn were both under half a step (diagnostic)
        self.small_moves = 0
        self.jammed = False
        self._write_qpos()
        n_parts = m.ngeom + 2  # the object's geoms and the gripper's two fingers
        if phys.points < n_parts:
            raise ValueError(f"adamanip: physics.points = {phys.points} is fewer than the {n_parts} parts of a {category}")
        k = [phys.points // n_parts + (i < phys.points % n_parts) for i in range(n_parts)]
        self.local_points = [_surface_points(m.geom_type[g], m.geom_size[g], k[g], rng) for g in range(m.ngeom)]
        # the same points flat, with the geom each belongs to (observe carries them all in one product)
        self._local_flat = np.concatenate(self.local_points)
        self._point_geom = np.repeat(np.arange(m.ngeom), k[:m.ngeom])
        fingers = np.array([0.012, 0.004, 0.015])  # two finger boxes either side of the handle, grasp frame
        self.finger_points = np.concatenate([_surface_points(mujoco.mjtGeom.mjGEOM_BOX, fingers, k[-1 - i], rng)
                                             + np.array([0.0, sgn * 0.02, 0.0]) for i, sgn in enumerate((-1, 1))])

    # ---- mechanism ----
    def _has(self, joint: str) -> bool:
        return self.jid[joint] >= 0

    def _set_open_range(self) -> None:
        if self._has("open"):
            hi = self.open_max if self.unlocked else 0.0
            if self.model.jnt_type[self.jid["open"]] == mujoco.mjtJoint.mjJNT_HINGE:
                hi = hi / self.radius
            self.model.jnt_range[self.jid["open"]] = (0.0, hi)

    def _range(self, joint: str, scale: float = 1.0) -> tuple[float, float]:
        if not self._has(joint):
            return 0.0, 0.0
        lo, hi = self.model.jnt_range[self.jid[joint]]
        return float(lo) * scale, float(hi) * scale

    def _write_qpos(self) -> None:
        d, m = self.data, self.model
        for name, value in self.q.items():
            if self._has(name):
                j = self.jid[name]
                hinge_open = name == "open" and m.jnt_type[j] == mujoco.mjtJoint.mjJNT_HINGE
                d.qpos[m.jnt_qposadr[j]] = value / self.radius if hinge_open else value
        mujoco.mj_kinematics(m, d)

    def step(self, action: np.ndarray) -> None:
        """Move the gripper target by `action` (clipped to [-1, 1], times the step sizes); the joints follow
        within their limits; a lock releases when its condition is met; the gripper strains by at most the
        compliance past a blocked part."""
        ph = self.phys
        a = np.clip(np.asarray(action, dtype=float), -1.0, 1.0)
        steps = np.array([ph.step_s, ph.step_s, ph.step_s, ph.step_psi])
        before = self.cmd.copy()
        q_before = dict(self.q)
        self.cmd += a * steps
        s, psi = self.cmd[0], self.cmd[3]
        if self.jammed:  # nothing moves any more; the gripper strains by its compliance as against any block
            theta, press = self.q["turn"], self.q["press"]
        else:
            theta = _clamp(float(psi), *self._range("turn"))
            press = _clamp(float(-s), *self._range("press"))
        if self.category in ("bottle", "bottle_visible", "door", "safe"):
            if self.hidden["direction"] * theta >= self.hidden["unlock"] - 1e-9:
                self.unlocked = True
        if self.category == "microwave" and press >= 0.9 * ph.button_travel:
            self.unlocked = True  # the button releases the latch for the rest of the episode
        self._set_open_range()
        hinge = self._has("open") and self.model.jnt_type[self.jid["open"]] == mujoco.mjtJoint.mjJNT_HINGE
        lo, hi = self._range("open", self.radius if hinge else 1.0)
        s_open = self.q["open"] if self.jammed else _clamp(float(s), lo, hi)
        self.q = {"open": s_open, "turn": theta, "press": press}
        # Blocked effort: the size of the pull / push or turn (the larger, in steps) of every move that moved no
        # part, summed; the mechanism jams when it reaches jam_after full steps. A full-step try counts 1 (the
        # experts' and the reference's moves, so their jams are unchanged); a hesitant command counts its size, so
        # that many small moves against a block cost as much as one full one (a count of tries of at least half a
        # step let a policy strain a locked part for free by moving in small steps). Lateral moves are no tries.
        effort = max(abs(float(a[0])), abs(float(a[3])))
        self.moves += 1
        self.small_moves += effort < 0.5
        if effort > 0 and not any(abs(self.q[k] - q_before[k]) > 1e-9 for k in self.q):
            self.blocked += effort
            if ph.jam_after and self.blocked >= ph.jam_after - 1e-9:
                self.jammed = True
        s_part = s_open - press
        self.cmd[0] = _clamp(float(s), s_part - ph.compliance_s, s_part + ph.compliance_s)
        self.cmd[1:3] = np.clip(self.cmd[1:3], -ph.compliance_s, ph.compliance_s)
        self.cmd[3] = _clamp(float(psi), theta - ph.compliance_psi, theta + ph.compliance_psi)
        self.velocity = (self.cmd - before) / steps
        self._write_qpos()

    @property
    def success(self) -> bool:
        ph = self.phys
        if self.category == "lamp":
            return abs(self.q["turn"]) >= ph.lamp_on or self.q["press"] >= 0.9 * ph.button_travel
        return self.q["open"] >= ph.open_success

    # ---- observation ----
    def observe(self) -> tuple[np.ndarray, np.ndarray]:
        """(points (P, 3) in the world frame, gripper state (8,): pose and velocity in the grasp frame)."""
        d = self.data
        # every geom's points: x_world = p_geom + R_geom x_local, all geoms in one product
        g = self._point_geom
        pts = [d.geom_xpos[g] + np.einsum("nij,nj->ni", d.geom_xmat.reshape(-1, 3, 3)[g], self._local_flat)]
        # the gripper: at the handle, offset by how far it strains past the part, rolled by psi about u
        s_part = self.q["open"] - self.q["press"]
        c, sn = np.cos(self.cmd[3]), np.sin(self.cmd[3])
        v = c * self.v + sn * self.w
        w = -sn * self.v + c * self.w
        rot = np.stack([self.u, v, w], 1)  # columns: grasp-frame axes in the world
        origin = d.site_xpos[self.site] + self.u * (self.cmd[0] - s_part) + self.v * self.cmd[1] + self.w * self.cmd[2]
        pts.append(origin + self.finger_points @ rot.T)
        return np.concatenate(pts).astype(np.float32), np.concatenate([self.cmd, self.velocity]).astype(np.float32)

    def moved(self, before: dict, joint: str, tol: float = 1e-6) -> bool:
        """Whether `joint` moved since `before` (a copy of ``self.q``): what the adaptive expert watches."""
        return abs(self.q[joint] - before[joint]) > tol


def make_episodes(category: str, n: int, seed_seq: np.random.SeedSequence, phys: Physics) -> list[Episode]:
    """`n` independent randomised episodes of a category, one child generator each."""
    return [Episode(category, np.random.default_rng(s), phys) for s in seed_seq.spawn(n)]
