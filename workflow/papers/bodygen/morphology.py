"""The limb tree of a co-designed body, its two design transforms, and the MJCF it compiles to.

BodyGen (Lu et al., ICLR 2025, Sec. 3.1) and Transform2Act (Yuan et al., ICLR 2022, Sec. 4.1) grow the body
during each episode: skeleton-transform steps edit the tree (per limb: no-op, add a child, remove a leaf),
an attribute-transform step edits each limb's continuous parameters, and then the body is simulated.

The task (:mod:`papers.bodygen.tasks`) fixes the plane the bone offsets live in, the root and its joints (planar:
two slides and a hinge; 3-D: a free joint), the attribute bounds and the world (terrain, fluid). A limb is a
capsule from its attachment point to ``attach + offset``. Children of the root attach at the task's
``root_attach`` (the crawler's centre, the hopper's lower end), deeper limbs at their parent's far end (as the
official templates). A new child copies its parent's attributes, a new child of the root its first leg's
(official ``add_child_to_body``).

Attributes live in a normalised space ``u in [-1, 1]`` per parameter and map linearly to the task's bounds
(default :data:`ATTRIBUTES`, the planar crawler's); the attribute transform adds a bounded Gaussian delta in that
space.
"""
from __future__ import annotations

import dataclasses

import numpy as np

# (name, lower bound, upper bound) of each limb attribute. Bounds from the official crawler.yml
# (offset xy in [-0.5, 0.5], capsule size in [0.03, 0.10], gear in [20, 400]); offset is (x, z) here.
ATTRIBUTES = (("offset_x", -0.5, 0.5), ("offset_z", -0.5, 0.5), ("size", 0.03, 0.10), ("gear", 10.0, 100.0))
N_ATTR = len(ATTRIBUTES)
# Skeleton actions per limb (official: 0 no-op, 1 add a child, 2 remove the limb if it is a leaf).
NOOP, ADD, REMOVE = 0, 1, 2
N_SKEL = 3
# Digits of a limb's path code (TopoPE's index): child k of a limb with code c has code c * base + k + 1; the
# base is the task's (more than the most children a limb can have), 3 for the planar crawler.
BASE = 3
DEFAULT_BOUNDS = tuple((lo, hi) for _, lo, hi in ATTRIBUTES)


def to_unit(name_index: int, value: float, bounds=DEFAULT_BOUNDS) -> float:
    lo, hi = bounds[name_index]
    return 2.0 * (value - lo) / (hi - lo) - 1.0


def from_unit(u: np.ndarray, bounds=DEFAULT_BOUNDS) -> np.ndarray:
    """Physical attributes (..., N_ATTR) from normalised ones in [-1, 1]."""
    lo, hi = np.asarray(bounds, float).T
    return lo + (np.clip(u, -1.0, 1.0) + 1.0) * 0.5 * (hi - lo)


@dataclasses.dataclass
class Limb:
    parent: int  # index of the parent limb, -1 for the root
    u: np.ndarray  # (N_ATTR,) normalised attributes
    children: list = dataclasses.field(default_factory=list)


class Body:
    """A limb tree. ``limbs[0]`` is the root; the order is breadth-first and is the token order. ``bounds``: the
    task's attribute bounds ((lo, hi) per attribute)."""

    def __init__(self, limbs: list[Limb], bounds=DEFAULT_BOUNDS):
        self.limbs, self.bounds = limbs, tuple(tuple(b) for b in bounds)

    # ---- structure -------------------------------------------------------------------------------
    @classmethod
    def initial(cls, legs: list[list[float]], size: float, gear: float, bounds=DEFAULT_BOUNDS) -> "Body":
        """The template: a root with one leg per bone offset (a, b) in `legs` (official crawler: 4 legs)."""
        def unit(vals):
            return np.array([to_unit(i, v, bounds) for i, v in enumerate(vals)])

        root = Limb(-1, unit([0.0, 0.0, size, gear]))
        limbs = [root]
        for off in legs:
            limbs.append(Limb(0, unit([off[0], off[1], size, gear])))
            root.children.append(len(limbs) - 1)
        return cls(limbs, bounds)

    def copy(self) -> "Body":
        return Body([Limb(l.parent, l.u.copy(), list(l.children)) for l in self.limbs], self.bounds)

    def physical(self) -> np.ndarray:
        """(L, N_ATTR) attributes in physical units."""
        return from_unit(np.stack([l.u for l in self.limbs]), self.bounds)

    def depth(self) -> np.ndarray:
        d = np.zeros(len(self.limbs), dtype=np.int64)
        for i, limb in enumerate(self.limbs):
            d[i] = 0 if limb.parent < 0 else d[limb.parent] + 1  # parents precede children
        return d

    def codes(self, base: int = BASE) -> np.ndarray:
        """Each limb's path from the root as one integer (TopoPE's index, Sec. 3.2), digits in `base`."""
        c = np.zeros(len(self.limbs), dtype=np.int64)
        for i, limb in enumerate(self.limbs):
            if limb.parent >= 0:
                c[i] = c[limb.parent] * base + self.limbs[limb.parent].children.index(i) + 1
        return c

    def can_add(self, i: int, max_depth: int, max_children: int) -> bool:
        """Official allow_add_body: depth < max_depth - 1 and fewer than max_children children."""
        return self.depth()[i] < max_depth - 1 and len(self.limbs[i].children) < max_children

    def can_remove(self, i: int) -> bool:
        """Official allow_remove_body: a leaf below the root; a root child only if it is not the first."""
        limb = self.limbs[i]
        if limb.parent < 0 or limb.children:
            return False
        return limb.parent != 0 or self.limbs[0].children.index(i) > 0

    def transform_skeleton(self, actions: np.ndarray, max_depth: int, max_children: int) -> "Body":
        """Apply one skeleton action per limb (`actions` aligned with the current limbs); returns a new body.

        Additions and removals are decided on the current tree (as the official loop, which tests each body
        of the list it started from); a disallowed action is a no-op.
        """
        removed = {i for i, a in enumerate(actions) if a == REMOVE and self.can_remove(i)}
        add = [i for i, a in enumerate(actions) if a == ADD and self.can_add(i, max_depth, max_children)
               and i not in removed]
        # Rebuild breadth-first from a nested description: (u, [children]).
        def nested(i):
            kids = [nested(k) for k in self.limbs[i].children if k not in removed]
            if i in add:  # the new child copies its parent; the root's copies its first child (official
                # add_child_to_body clones bodies[0].child[0]: the root's own bone has zero length)
                source = self.limbs[self.limbs[0].children[0]] if i == 0 and self.limbs[0].children else self.limbs[i]
                kids.append((source.u.copy(), []))
            return (self.limbs[i].u.copy(), kids)

        return Body.from_nested(nested(0), self.bounds)

    @staticmethod
    def from_nested(tree, bounds=DEFAULT_BOUNDS) -> "Body":
        limbs, queue = [Limb(-1, tree[0])], [(0, tree[1])]
        while queue:
            parent, kids = queue.pop(0)
            for u, grand in kids:
                limbs.append(Limb(parent, u))
                limbs[parent].children.append(len(limbs) - 1)
                queue.append((len(limbs) - 1, grand))
        return Body(limbs, bounds)

    def transform_attributes(self, delta: np.ndarray) -> "Body":
        """u <- clip(u + delta, -1, 1) per limb (delta: (L, N_ATTR))."""
        out = self.copy()
        for limb, d in zip(out.limbs, delta):
            limb.u = np.clip(limb.u + d, -1.0, 1.0)
        return out

    # ---- geometry and MJCF -------------------------------------------------------------------------
    def attach_points(self, root_attach=(0.0, 0.0)) -> tuple[np.ndarray, np.ndarray]:
        """Start and end (a, b) in the task's plane of every limb's bone relative to the root centre (root: zero
        length); the root's children start at `root_attach`."""
        phys = self.physical()
        start, end = np.zeros((len(self.limbs), 2)), np.zeros((len(self.limbs), 2))
        for i, limb in enumerate(self.limbs):
            if limb.parent >= 0:
                start[i] = end[limb.parent] if limb.parent > 0 else np.asarray(root_attach, float)
                end[i] = start[i] + phys[i, :2]
        return start, end

    def mjcf(self, task, integrator: str = "RK4") -> str:
        """The MuJoCo model of this body in `task`'s world (a :class:`papers.bodygen.tasks.Task`; compiler
        coordinates local: each body at its attachment point relative to its parent's)."""
        from papers.bodygen.tasks import gap_heights

        phys = self.physical()
        start, end = self.attach_points(task.root_attach)
        start3, bone3 = start @ task.axes(), phys[:, :2] @ task.axes()

        def vec(v):
            return " ".join(f"{x:.5f}" for x in v)

        def body_xml(i, indent):
            pad = " " * indent
            kids = "".join(body_xml(k, indent + 2) for k in self.limbs[i].children)
            parent = self.limbs[i].parent
            rel = start3[i] - (start3[parent] if parent > 0 else 0.0)
            return (f'{pad}<body name="b{i}" pos="{vec(rel)}">\n'
                    f'{pad}  <joint name="j{i}" type="hinge" axis="{vec(task.hinge_axis(bone3[i]))}" '
                    f'range="{-task.joint_range} {task.joint_range}"/>\n'
                    f'{pad}  <geom type="capsule" fromto="0 0 0 {vec(bone3[i])}" size="{phys[i, 2]:.5f}"/>\n'
                    f'{kids}{pad}</body>\n')

        limbs = "".join(body_xml(k, 6) for k in self.limbs[0].children)
        motors = "".join(f'    <motor joint="j{i}" gear="{phys[i, 3]:.4f}" ctrllimited="true" ctrlrange="-1 1"/>\n'
                         for i in range(1, len(self.limbs)))
        free = 'limited="false" armature="0" damping="0"'
        if task.plane == "xyz":
            root_joints = '      <joint name="root" type="free" armature="0" damping="0"/>\n'
        else:
            slide2, hinge = ("0 0 1", "0 1 0") if task.plane == "xz" else ("0 1 0", "0 0 1")
            root_joints = (f'      <joint name="rootx" type="slide" axis="1 0 0" {free}/>\n'
                           f'      <joint name="rootz" type="slide" axis="{slide2}" {free}/>\n'
                           f'      <joint name="rooty" type="hinge" axis="{hinge}" {free}/>\n')
        if task.root_geom[0] == "sphere":
            root_geom = f'<geom type="sphere" size="{task.root_geom[1]}"/>'
        else:
            a0, a1 = task.to_world(task.root_geom[2]), task.to_world(task.root_geom[3])
            root_geom = f'<geom type="capsule" fromto="{vec(a0)} {vec(a1)}" size="{task.root_geom[1]}"/>'
        option = f'integrator="{integrator}" timestep="{task.timestep}"'
        if task.fluid:
            option += f' density="{task.fluid[0]}" viscosity="{task.fluid[1]}"'
        asset = ""
        if task.terrain == "gaps":  # official gap.xml: hfield size 32 32 2 0.1 at (17, 0, -1.5)
            ncol = 1280
            heights = np.tile(gap_heights(ncol, 32.0, 17.0), (2, 1))
            asset = (f'  <asset>\n    <hfield name="terrain" nrow="2" ncol="{ncol}" size="32 32 0.75 0.1" '
                     f'elevation="{" ".join(f"{h:g}" for h in heights.ravel())}"/>\n  </asset>\n')
            floor = ('<geom name="floor" type="hfield" hfield="terrain" pos="17 0 -0.75" contype="0" conaffinity="1" '
                     'condim="3"/>')
        elif task.plane == "xy":  # swimmer.xml: a floor nothing touches
            floor = '<geom name="floor" type="plane" size="40 40 0.1" pos="0 0 -0.1" contype="0" conaffinity="0"/>'
        else:
            floor = '<geom name="floor" type="plane" size="200 200 0.125" contype="0" conaffinity="1"/>'
        return f"""<mujoco model="{task.name}">
  <compiler angle="degree" inertiafromgeom="true"/>
  <option {option}/>
  <default>
    <joint {task.joint_defaults}/>
    <geom {task.geom_defaults}/>
  </default>
{asset}  <worldbody>
    {floor}
    <body name="b0" pos="0 0 {task.init_height}">
{root_joints}      {root_geom}
{limbs}    </body>
  </worldbody>
  <actuator>
{motors}  </actuator>
</mujoco>
"""
