"""The co-design tasks: each a template (the initial body, the plane it lives in, its attribute bounds, its world)
from the official BodyGen task files, plus the planar crawler of this reproduction's default scale.

The paper's ten tasks (Table 1) are defined in the official repository GenesisOrigin/BodyGen by a task config
``design_opt/cfg/<task>.yml`` (attribute bounds, ``max_body_depth``, ``add_body_condition.max_nchild``,
``done_condition``) and the MJCF template its ``env_name`` loads from ``assets/mujoco_envs/<env>.xml``:

=====================  =========================  ===============  ======================================
task                   cfg                        template         what distinguishes it
=====================  =========================  ===============  ======================================
crawler                cfg/crawler.yml            ant.xml          3-D: free root, 4 legs, offsets in xy
cheetah                cfg/cheetah.yml            hopper.xml       planar (xz), 1 leg, max tilt 20 deg
swimmer                cfg/swimmer.yml            swimmer.xml      planar (xy) in a viscous fluid
terraincrosser         cfg/terraincrosser.yml     gap.xml          hopper template on a height field
walker-regular/-medium/-hard  cfg/walker-*.yml    walker.xml       2 legs; max children 1 / 2 / 3
glider-regular/-medium/-hard  cfg/glider-*.yml    walker.xml       walker with max depth 3 (not 4)
=====================  =========================  ===============  ======================================

So the walkers and gliders differ only in ``max_depth`` / ``max_children`` on one template (the official
``walker.py`` serves both), terraincrosser only by its terrain from the cheetah's template (``gap.py`` is
``hopper.py`` with a height field and a termination below height 1.0). ``crawler2d`` is not a paper task: the
default scale's planar crawler (the ant template cut to the xz plane), kept because a CPU affords it.

Attributes per limb are always four: a bone offset in the task's plane (two numbers: ``xz`` or ``xy``; the
official ``body_params.offset.type``), capsule radius and motor gear; ``bounds`` map them from ``u in [-1, 1]``.
(The official ``ext_start`` geom parameter is not designed here.) The hinge of a limb turns about the plane's
normal for planar tasks; for the 3-D crawler about ``z x offset`` (horizontal, perpendicular to the bone), as the
four hinges of ``ant.xml`` (e.g. bone (0.4, 0.4, 0), axis (-0.707, 0.707, 0)).
"""
from __future__ import annotations

import dataclasses

import numpy as np

TERRAIN_GAP_PERIOD = 3.2  # official gap.py phase feature: x / 3.2 (the gap terrain's period, in metres)


@dataclasses.dataclass(frozen=True)
class Task:
    name: str
    source: str  # official files (GenesisOrigin/BodyGen) the template comes from
    plane: str  # "xz" (planar, gravity in plane), "xy" (planar, horizontal: the swimmer), "xyz" (free root)
    bounds: tuple  # ((lo, hi) of offset a, offset b, size, gear)
    legs: tuple  # bone offsets (a, b) of the root's initial children
    size: float  # capsule radius of every initial limb
    gear: float  # motor gear of every initial limb
    max_depth: int  # limbs have depth < max_depth (official max_body_depth)
    max_children: int  # official add_body_condition.max_nchild (3 where the cfg leaves it out)
    root_geom: tuple  # ("sphere", radius) or ("capsule", radius, (a0, b0), (a1, b1)) in the task's plane
    root_attach: tuple  # where the root's children attach, (a, b) in the plane
    init_height: float  # height of the root in the template
    joint_range: float  # hinge range +- degrees
    timestep: float
    max_tilt: float  # termination when the root's tilt exceeds it (degrees; 3600: never)
    min_height: float  # termination when the root drops below it (-inf: never)
    max_height: float = 2.0  # termination when the root rises above it (official done_condition default 2.0)
    terrain: str = "plane"  # "plane" or "gaps" (a height field)
    fluid: tuple = ()  # (density, viscosity) of the medium (swimmer), empty: none
    geom_defaults: str = 'contype="1" conaffinity="0" condim="3" density="5.0" friction="1 0.5 0.5" margin="0.01"'
    joint_defaults: str = 'armature="1" damping="1" limited="true"'
    control_log_std: float = 0.0  # initial log-std of the control policy (design_opt/cfg/<task>.yml; crawler: -0.5)

    def __post_init__(self):
        """A malformed template stops here, naming the task and the field."""
        def bad(field, why):
            raise ValueError(f"bodygen task {self.name!r}: template field '{field}' {why}")

        if self.plane not in ("xz", "xy", "xyz"):
            bad("plane", f"must be xz, xy or xyz, got {self.plane!r}")
        if len(self.bounds) != 4 or any(len(b) != 2 or not b[0] < b[1] for b in self.bounds):
            bad("bounds", f"must be four (lo, hi) pairs with lo < hi, got {self.bounds}")
        if not self.legs or any(len(leg) != 2 for leg in self.legs):
            bad("legs", f"must be a non-empty list of (a, b) bone offsets, got {self.legs}")
        for leg in self.legs:
            if not all(lo <= v <= hi for v, (lo, hi) in zip(leg, self.bounds[:2])):
                bad("legs", f"offset {leg} is outside the offset bounds {self.bounds[:2]}")
        if not self.bounds[2][0] <= self.size <= self.bounds[2][1]:
            bad("size", f"{self.size} is outside its bounds {self.bounds[2]}")
        if not self.bounds[3][0] <= self.gear <= self.bounds[3][1]:
            bad("gear", f"{self.gear} is outside its bounds {self.bounds[3]}")
        if self.max_depth < 2 or self.max_children < 1:
            bad("max_depth" if self.max_depth < 2 else "max_children", "is too small (depth >= 2, children >= 1)")
        if self.root_geom[0] not in ("sphere", "capsule"):
            bad("root_geom", f"must be a sphere or a capsule, got {self.root_geom[0]!r}")
        if self.terrain not in ("plane", "gaps"):
            bad("terrain", f"must be plane or gaps, got {self.terrain!r}")
        if self.fluid and (len(self.fluid) != 2 or min(self.fluid) < 0):
            bad("fluid", f"must be (density, viscosity) >= 0, got {self.fluid}")

    @property
    def code_base(self) -> int:
        """Base of TopoPE's path codes: more than the most children any limb can have (official index_base)."""
        return max(len(self.legs), self.max_children) + 1

    @property
    def sim_width(self) -> int:
        """Simulator features per token: the root's state (planar: height, angle, 3 velocities; 3-D: height,
        quaternion, 6 velocities: official ant.py get_sim_obs) or a limb's joint angle and velocity."""
        return 11 if self.plane == "xyz" else 5

    def axes(self) -> np.ndarray:
        """(2, 3): the world directions of the two offset coordinates."""
        return np.array([[1.0, 0, 0], [0, 0, 1.0]]) if self.plane == "xz" else np.array([[1.0, 0, 0], [0, 1.0, 0]])

    def to_world(self, ab) -> np.ndarray:
        return np.asarray(ab, float) @ self.axes()

    def hinge_axis(self, bone: np.ndarray) -> np.ndarray:
        """A limb's hinge axis (world frame) for a bone vector (3,)."""
        if self.plane == "xz":
            return np.array([0.0, 1.0, 0.0])
        if self.plane == "xy":
            return np.array([0.0, 0.0, 1.0])
        axis = np.cross([0.0, 0.0, 1.0], bone)
        n = np.linalg.norm(axis)
        return axis / n if n > 1e-9 else np.array([0.0, 1.0, 0.0])  # a vertical bone: any horizontal axis


# Hopper-family MJCF defaults (official hopper.xml / walker.xml / gap.xml <default>).
_HOPPER_GEOM = 'contype="1" conaffinity="0" condim="1" margin="0.001" solimp=".8 .8 .01" solref=".02 1" friction="2.0"'
_HOPPER = dict(bounds=((-0.5, 0.5), (-0.5, 0.5), (0.03, 0.08), (20.0, 400.0)), size=0.05, gear=200.0,
               root_geom=("capsule", 0.05, (0.0, 0.2), (0.0, -0.2)), root_attach=(0.0, -0.2), init_height=1.25,
               timestep=0.002, min_height=0.7, geom_defaults=_HOPPER_GEOM, plane="xz")

TASKS = {
    # The default scale's crawler: ant.xml cut to the xz plane (2 legs, front and back, pointing down and out),
    # gear 30 in [10, 100] (the planar body flips within a few steps at the ant's 150), timestep 0.01 as ant.xml.
    # max_tilt 3600 (the official default max_ang): crawler.yml's 60 is for the 3-D ant, whose horizontal (xy)
    # offsets keep it flat; our planar (xz) designs can grow tall, and at 60 degrees a tall design earns its
    # return by toppling forward once and terminating (a trial: the final BodyGen design ran 16.5 of 200 steps
    # and earned 92% of its return with zero torque).
    "crawler2d": Task("crawler2d", "cut from assets/mujoco_envs/ant.xml + design_opt/cfg/crawler.yml", "xz",
                      ((-0.5, 0.5), (-0.5, 0.5), (0.03, 0.10), (10.0, 100.0)), ((0.3, -0.3), (-0.3, -0.3)),
                      0.08, 30.0, 4, 2, ("sphere", 0.25), (0.0, 0.0), 0.5, 30.0, 0.01, 3600.0, -np.inf, np.inf,
                      control_log_std=-0.5),
    "crawler": Task("crawler", "assets/mujoco_envs/ant.xml + design_opt/cfg/crawler.yml", "xyz",
                    ((-0.5, 0.5), (-0.5, 0.5), (0.03, 0.10), (20.0, 400.0)),
                    ((0.4, 0.4), (-0.4, 0.4), (-0.4, -0.4), (0.4, -0.4)), 0.08, 150.0, 4, 2, ("sphere", 0.25),
                    (0.0, 0.0), 0.4, 30.0, 0.01, 60.0, 0.0, control_log_std=-0.5),
    "cheetah": Task("cheetah", "assets/mujoco_envs/hopper.xml + design_opt/cfg/cheetah.yml", legs=((0.0, -0.45),),
                    max_depth=4, max_children=3, joint_range=360.0, max_tilt=20.0, **_HOPPER),
    "swimmer": Task("swimmer", "assets/mujoco_envs/swimmer.xml + design_opt/cfg/swimmer.yml", "xy",
                    ((-1.5, 1.5), (-1.5, 1.5), (0.06, 0.20), (20.0, 300.0)), ((0.0, -1.0),), 0.08, 150.0, 4, 3,
                    ("capsule", 0.08, (0.0, 0.0), (0.0, -1.0)), (0.0, -1.0), 0.0, 100.0, 0.01, 3600.0, -np.inf, np.inf,
                    fluid=(4000.0, 0.1),
                    geom_defaults='contype="1" conaffinity="0" condim="1" margin="0.001" density="1000"',
                    joint_defaults='armature="0.1" limited="true"'),
    "terraincrosser": Task("terraincrosser", "assets/mujoco_envs/gap.xml + design_opt/cfg/terraincrosser.yml",
                           legs=((0.0, -0.45),), max_depth=4, max_children=3, joint_range=60.0, max_tilt=20.0,
                           terrain="gaps", **{**_HOPPER, "min_height": 1.0}),
}
for _level, _children in (("regular", 1), ("medium", 2), ("hard", 3)):
    for _kind, _depth in (("walker", 4), ("glider", 3)):
        _name = f"{_kind}-{_level}"
        TASKS[_name] = Task(_name, f"assets/mujoco_envs/walker.xml + design_opt/cfg/{_name}.yml",
                            legs=((0.0, -0.45), (0.0, -0.45)), max_depth=_depth, max_children=_children,
                            joint_range=180.0, max_tilt=60.0, **_HOPPER)

PAPER_TASKS = ("crawler", "cheetah", "swimmer", "terraincrosser", "walker-regular", "walker-medium", "walker-hard",
               "glider-regular", "glider-medium", "glider-hard")


def get_task(name: str, where: str = "bodygen.tasks") -> Task:
    if name not in TASKS:
        raise ValueError(f"{where}: unknown task {name!r} (known: {sorted(TASKS)})")
    return TASKS[name]


def gap_heights(ncol: int, half_length: float, centre: float) -> np.ndarray:
    """Elevation (0..1) of the terraincrosser's height field along x: flat platforms (1) with a 0.8 m gap (0)
    every ``TERRAIN_GAP_PERIOD`` metres from x = 2 on. Our own terrain: the official ``gap_terrain.png`` is a
    binary asset not read here; its period is the official phase feature's 3.2 m."""
    x = centre - half_length + (np.arange(ncol) + 0.5) * (2 * half_length / ncol)
    phase = (x - 2.0) % TERRAIN_GAP_PERIOD
    return np.where((x > 2.0) & (phase > TERRAIN_GAP_PERIOD - 0.8), 0.0, 1.0)
