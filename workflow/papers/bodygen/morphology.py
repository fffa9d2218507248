"""The limb tree of a planar crawler, its two design transforms, and the MJCF it compiles to.

BodyGen (Lu et al., ICLR 2025, Sec. 3.1) and Transform2Act (Yuan et al., ICLR 2022, Sec. 4.1) grow the body
during each episode: skeleton-transform steps edit the tree (per limb: no-op, add a child, remove a leaf),
an attribute-transform step edits each limb's continuous parameters, and then the body is simulated.

Our crawler is planar (x forward, z up; every hinge turns about y) so that a CPU can afford the co-design
loop; the official crawler is the 3-D ant. A limb is a capsule from its attachment point to
``attach + offset``; the root is a sphere with a planar joint (slide x, slide z, hinge y). Children of the
root attach at its centre, deeper limbs at their parent's far end (as the official ant template). A new
child copies its parent's attributes (official ``add_child_to_body``).

Attributes live in a normalised space ``u in [-1, 1]`` per parameter and map linearly to their bounds
(:data:`ATTRIBUTES`); the attribute transform adds a bounded Gaussian delta in that space.
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
# Digits of a limb's path code (TopoPE's index): child k of a limb with code c has code c * BASE + k + 1.
BASE = 3


def to_unit(name_index: int, value: float) -> float:
    _, lo, hi = ATTRIBUTES[name_index]
    return 2.0 * (value - lo) / (hi - lo) - 1.0


def from_unit(u: np.ndarray) -> np.ndarray:
    """Physical attributes (..., N_ATTR) from normalised ones in [-1, 1]."""
    lo = np.array([a[1] for a in ATTRIBUTES])
    hi = np.array([a[2] for a in ATTRIBUTES])
    return lo + (np.clip(u, -1.0, 1.0) + 1.0) * 0.5 * (hi - lo)


@dataclasses.dataclass
class Limb:
    parent: int  # index of the parent limb, -1 for the root
    u: np.ndarray  # (N_ATTR,) normalised attributes
    children: list = dataclasses.field(default_factory=list)


class Body:
    """A limb tree. ``limbs[0]`` is the root; the order is breadth-first and is the token order."""

    def __init__(self, limbs: list[Limb]):
        self.limbs = limbs

    # ---- structure -------------------------------------------------------------------------------
    @classmethod
    def initial(cls, legs: list[list[float]], size: float, gear: float) -> "Body":
        """The template: a root with one leg per (offset_x, offset_z) in `legs` (official crawler: 4 legs)."""
        def unit(vals):
            return np.array([to_unit(i, v) for i, v in enumerate(vals)])

        root = Limb(-1, unit([0.0, 0.0, size, gear]))
        limbs = [root]
        for off in legs:
            limbs.append(Limb(0, unit([off[0], off[1], size, gear])))
            root.children.append(len(limbs) - 1)
        return cls(limbs)

    def copy(self) -> "Body":
        return Body([Limb(l.parent, l.u.copy(), list(l.children)) for l in self.limbs])

    def depth(self) -> np.ndarray:
        d = np.zeros(len(self.limbs), dtype=np.int64)
        for i, limb in enumerate(self.limbs):
            d[i] = 0 if limb.parent < 0 else d[limb.parent] + 1  # parents precede children
        return d

    def codes(self) -> np.ndarray:
        """Each limb's path from the root as one integer (TopoPE's index, Sec. 3.2)."""
        c = np.zeros(len(self.limbs), dtype=np.int64)
        for i, limb in enumerate(self.limbs):
            if limb.parent >= 0:
                c[i] = c[limb.parent] * BASE + self.limbs[limb.parent].children.index(i) + 1
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
            if i in add:
                kids.append((self.limbs[i].u.copy(), []))  # the new child copies its parent
            return (self.limbs[i].u.copy(), kids)

        return Body.from_nested(nested(0))

    @staticmethod
    def from_nested(tree) -> "Body":
        limbs, queue = [Limb(-1, tree[0])], [(0, tree[1])]
        while queue:
            parent, kids = queue.pop(0)
            for u, grand in kids:
                limbs.append(Limb(parent, u))
                limbs[parent].children.append(len(limbs) - 1)
                queue.append((len(limbs) - 1, grand))
        return Body(limbs)

    def transform_attributes(self, delta: np.ndarray) -> "Body":
        """u <- clip(u + delta, -1, 1) per limb (delta: (L, N_ATTR))."""
        out = self.copy()
        for limb, d in zip(out.limbs, delta):
            limb.u = np.clip(limb.u + d, -1.0, 1.0)
        return out

    # ---- geometry and MJCF -------------------------------------------------------------------------
    def attach_points(self) -> tuple[np.ndarray, np.ndarray]:
        """Start and end (x, z) of every limb's bone relative to the root centre (root: zero length)."""
        phys = from_unit(np.stack([l.u for l in self.limbs]))
        start, end = np.zeros((len(self.limbs), 2)), np.zeros((len(self.limbs), 2))
        for i, limb in enumerate(self.limbs):
            if limb.parent >= 0:
                start[i] = end[limb.parent] if limb.parent > 0 else 0.0
                end[i] = start[i] + phys[i, :2]
        return start, end

    def mjcf(self, root_radius: float, init_height: float, joint_range: float, timestep: float,
             integrator: str = "RK4") -> str:
        """The MuJoCo model of this body (compiler coordinates local: each body at its attachment point)."""
        phys = from_unit(np.stack([l.u for l in self.limbs]))
        start, end = self.attach_points()

        def body_xml(i, indent):
            pad = " " * indent
            kids = "".join(body_xml(k, indent + 2) for k in self.limbs[i].children)
            rel = start[i] - (start[self.limbs[i].parent] if self.limbs[i].parent > 0 else 0.0)
            dx, dz = phys[i, 0], phys[i, 1]
            return (f'{pad}<body name="b{i}" pos="{rel[0]:.5f} 0 {rel[1]:.5f}">\n'
                    f'{pad}  <joint name="j{i}" type="hinge" axis="0 1 0" range="{-joint_range} {joint_range}"/>\n'
                    f'{pad}  <geom type="capsule" fromto="0 0 0 {dx:.5f} 0 {dz:.5f}" size="{phys[i, 2]:.5f}"/>\n'
                    f'{kids}{pad}</body>\n')

        limbs = "".join(body_xml(k, 6) for k in self.limbs[0].children)
        motors = "".join(f'    <motor joint="j{i}" gear="{phys[i, 3]:.4f}" ctrllimited="true" ctrlrange="-1 1"/>\n'
                         for i in range(1, len(self.limbs)))
        return f"""<mujoco model="planar_crawler">
  <compiler angle="degree" inertiafromgeom="true"/>
  <option integrator="{integrator}" timestep="{timestep}"/>
  <default>
    <joint armature="1" damping="1" limited="true"/>
    <geom contype="1" conaffinity="0" condim="3" density="5.0" friction="1 0.5 0.5" margin="0.01"/>
  </default>
  <worldbody>
    <geom name="floor" type="plane" size="200 1 0.125" contype="0" conaffinity="1"/>
    <body name="b0" pos="0 0 {init_height}">
      <joint name="rootx" type="slide" axis="1 0 0" limited="false" armature="0" damping="0"/>
      <joint name="rootz" type="slide" axis="0 0 1" limited="false" armature="0" damping="0"/>
      <joint name="rooty" type="hinge" axis="0 1 0" limited="false" armature="0" damping="0"/>
      <geom type="sphere" size="{root_radius}"/>
{limbs}    </body>
  </worldbody>
  <actuator>
{motors}  </actuator>
</mujoco>
"""
