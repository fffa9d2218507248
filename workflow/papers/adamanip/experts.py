"""The demonstration collectors: one-go and adaptive experts (Sec. 4.1, "Adaptive demonstration collection").

Both act by the same primitives (official ``manipulation/open_*.py``: lift/pull ``z``, rotate ``o``/``r``,
press): ``PULL`` / ``PUSH`` move the gripper target one step along the grasp frame's u axis, ``TURN(d)``
rolls it one step about u in direction d.

* **one-go** (the official ``succ_policy``): reads the hidden mechanism and acts once -- turns the
  right way until the lock releases, then pulls; presses a locked microwave's button first; switches a
  lamp by its one working way.
* **adaptive** (the official ``ada_policy``): does not read the mechanism. It tries a move, watches
  whether the part moved (the joint values, which the point cloud shows), and adapts: a turn that does
  not move the part while the gripper strains at its compliance limit is reversed; after the first
  ``try_range`` of turning it tries a pull with probability 1/2 per step (the official 10/20), and
  turns on when the pull does not move the part; a microwave whose door does not follow a pull gets
  its button pressed; a lamp gets its three ways tried in random order.

Only successful episodes are kept (the official collectors store an episode when the part opened); an episode
whose mechanism jams (``Physics.jam_after`` blocked tries) is a failure.
"""
from __future__ import annotations

import numpy as np

from papers.adamanip.env import Episode, Physics, make_episodes

PULL = np.array([1.0, 0.0, 0.0, 0.0])
PUSH = np.array([-1.0, 0.0, 0.0, 0.0])


def TURN(direction: int) -> np.ndarray:
    return np.array([0.0, 0.0, 0.0, float(direction)])


KINDS = ("one_go", "adaptive")
TURN_LOCKED = ("bottle", "bottle_visible", "door", "safe")
# The primitives a category's experts use: the random-primitive reference picks among them.
PRIMITIVES = {**{c: (PULL, TURN(1), TURN(-1)) for c in TURN_LOCKED}, "microwave": (PULL, PUSH),
              "lamp": (PUSH, TURN(1), TURN(-1))}


def random_primitive_success(eps: list[Episode], max_steps: int, rng: np.random.Generator) -> np.ndarray:
    """The reference of undirected retrying: every step a primitive drawn uniformly from those the category's
    experts use (it knows which moves exist, not which one works nor when). Success (0/1) of each episode within
    `max_steps`, latched as in the policies' evaluation."""
    out = np.zeros(len(eps), dtype=np.int64)
    for i, ep in enumerate(eps):
        prims = PRIMITIVES[ep.category]
        for _ in range(max_steps):
            ep.step(prims[int(rng.integers(len(prims)))])
            if ep.success:
                out[i] = 1
                break
            if ep.jammed:
                break
    return out


def one_go_action(ep: Episode) -> np.ndarray:
    """The expert that knows the hidden state (official ``succ_policy``)."""
    h = ep.hidden
    if ep.category in TURN_LOCKED:
        return PULL if ep.unlocked else TURN(h["direction"])
    if ep.category == "microwave":
        return PULL if ep.unlocked else PUSH
    if ep.category == "lamp":
        return PUSH if h["mode"] == "push" else TURN(h["direction"])
    raise ValueError(f"adamanip: no one-go expert for {ep.category!r}")


def guessing_one_go_action(ep: Episode, guess: dict) -> np.ndarray:
    """The one-go expert acting on `guess` in place of the hidden mechanism (where it is visible, on the control,
    the guess is the truth): it commits to one way and never revises it. The planted contrast of claim (a)'s
    positive control: it fails where the mechanism is hidden and guessed wrong, the adaptive expert does not."""
    if ep.category in TURN_LOCKED:
        return PULL if ep.unlocked else TURN(guess["direction"])
    if ep.category == "microwave":
        return PULL if ep.unlocked or not guess["locked"] else PUSH
    if ep.category == "lamp":
        return PUSH if guess["mode"] == "push" else TURN(guess["direction"])
    raise ValueError(f"adamanip: no one-go expert for {ep.category!r}")


def expert_success(eps: list[Episode], kind: str, max_steps: int, rng: np.random.Generator) -> np.ndarray:
    """Success (0/1) of the adaptive expert (`kind` "adaptive") or the guessing one-go expert (`kind` "one_go":
    the hidden state drawn uniformly, the control's visible direction read) on each episode, latched and ended by a
    jam as in the policies' evaluation: the experts through the same difference in differences as the policies
    (claim (a)'s positive control; Sec. 4.1: one-go demonstrations commit, adaptive ones retry)."""
    from papers.adamanip.env import HIDDEN

    if kind not in KINDS:
        raise ValueError(f"adamanip: expert kind must be one of {KINDS}, got {kind!r}")
    out = np.zeros(len(eps), dtype=np.int64)
    for i, ep in enumerate(eps):
        if kind == "adaptive":
            expert = AdaptiveExpert(ep, rng, ep.phys.unlock_range[0])
        else:
            guess = dict(ep.hidden)
            if ep.category in HIDDEN:
                guess["direction"] = 1 if rng.random() < 0.5 else -1
                guess["locked"] = bool(rng.random() < 0.5)
                guess["mode"] = ("push", "cw", "ccw")[int(rng.integers(3))]
                if ep.category == "lamp" and guess["mode"] != "push":
                    guess["direction"] = -1 if guess["mode"] == "cw" else 1
        for _ in range(max_steps):
            a = expert.act() if kind == "adaptive" else guessing_one_go_action(ep, guess)
            before = dict(ep.q)
            ep.step(a)
            if kind == "adaptive":
                expert.observe(a, before)
            if ep.success:
                out[i] = 1
                break
            if ep.jammed:
                break
    return out


class AdaptiveExpert:
    """Trial and error on what the observation shows (official ``ada_policy``); one instance per episode.

    Args:
        ep: the episode it acts in (it reads ``ep.q`` and ``ep.cmd`` -- joint values and the gripper
            target, both visible -- never ``ep.hidden`` or ``ep.unlocked``).
        rng: its own generator (the random first direction, the random pull tries).
        try_range: turn (rad) before pull tries start: the smallest unlock angle there is.
    """

    def __init__(self, ep: Episode, rng: np.random.Generator, try_range: float):
        self.ep, self.rng, self.try_range = ep, rng, try_range
        self.direction = 1 if rng.random() < 0.5 else -1
        self.phase = "start"
        self.ways = list(rng.permutation(["push", "cw", "ccw"]))  # lamp: the order in which to try

    def _straining(self, axis: int, sign: float) -> bool:
        """The gripper sits at its compliance limit past the part in direction `sign` along `axis`."""
        ep, ph = self.ep, self.ep.phys
        if axis == 3:
            return sign * (ep.cmd[3] - ep.q["turn"]) >= ph.compliance_psi - 1e-9
        return sign * (ep.cmd[0] - (ep.q["open"] - ep.q["press"])) >= ph.compliance_s - 1e-9

    def act(self) -> np.ndarray:
        ep, cat = self.ep, self.ep.category
        if cat in TURN_LOCKED:
            if self.phase == "pull":
                return PULL
            if self.phase == "start" and self.rng.random() < 0.5:  # official: first step lift or rotate
                return PULL
            if abs(ep.q["turn"]) >= self.try_range and self.rng.random() < 0.5:
                return PULL
            return TURN(self.direction)
        if cat == "microwave":
            return {"start": PULL, "press": PUSH, "pull": PULL}[self.phase]
        if cat == "lamp":
            way = self.ways[0]
            return PUSH if way == "push" else TURN(-1 if way == "cw" else 1)
        raise ValueError(f"adamanip: no adaptive expert for {cat!r}")

    def observe(self, action: np.ndarray, before: dict) -> None:
        """Update the plan from whether the last move moved the part."""
        ep, cat = self.ep, self.ep.category
        if cat in TURN_LOCKED:
            if ep.moved(before, "open"):
                self.phase = "pull"
            elif self.phase != "pull":
                self.phase = "turn"
                if action[3] != 0 and not ep.moved(before, "turn") and self._straining(3, self.direction):
                    self.direction = -self.direction  # blocked this way: turn back and the other way
        elif cat == "microwave":
            if self.phase == "start":
                self.phase = "pull" if ep.moved(before, "open") else "press"
            elif self.phase == "press" and ep.q["press"] >= 0.9 * ep.phys.button_travel:
                self.phase = "pull"
        elif cat == "lamp":
            way = self.ways[0]
            joint, axis, sign = ("press", 0, -1.0) if way == "push" else ("turn", 3, -1.0 if way == "cw" else 1.0)
            if not ep.moved(before, joint) and self._straining(axis, sign) and len(self.ways) > 1:
                self.ways.pop(0)  # this way is blocked: try the next


def collect(category: str, kind: str, n_demos: int, max_steps: int, seed_seq: np.random.SeedSequence,
            phys: Physics, max_attempts: int | None = None) -> tuple[list[dict], dict]:
    """Run the `kind` expert on fresh episodes until `n_demos` succeed within `max_steps`.

    Returns (demos, stats): each demo holds ``points`` (L, P, 3), ``state`` (L, 4), ``action`` (L, 4),
    the observation *before* each action; stats counts attempts and successes.
    """
    if kind not in KINDS:
        raise ValueError(f"adamanip: demonstration kind must be one of {KINDS}, got {kind!r}")
    max_attempts = max_attempts or 4 * n_demos
    env_seq, expert_seq = seed_seq.spawn(2)
    demos, attempts = [], 0
    try_range = phys.unlock_range[0]
    while len(demos) < n_demos and attempts < max_attempts:
        ep = make_episodes(category, 1, env_seq.spawn(1)[0], phys)[0]
        expert = AdaptiveExpert(ep, np.random.default_rng(expert_seq.spawn(1)[0]), try_range) if kind == "adaptive" else None
        attempts += 1
        points, state, actions = [], [], []
        for _ in range(max_steps):
            p, s = ep.observe()
            a = one_go_action(ep) if expert is None else expert.act()
            points.append(p), state.append(s), actions.append(a)
            before = dict(ep.q)
            ep.step(a)
            if expert is not None:
                expert.observe(a, before)
            if ep.success:
                demos.append({"points": np.stack(points), "state": np.stack(state),
                              "action": np.stack(actions).astype(np.float32)})
                break
            if ep.jammed:  # a failure: the expert forced a blocked part too often
                break
    if len(demos) < n_demos:
        raise RuntimeError(f"adamanip: the {kind} expert succeeded in {len(demos)} of {attempts} {category} "
                           f"episodes, fewer than the {n_demos} demonstrations asked for (max_steps={max_steps})")
    return demos, {"category": category, "kind": kind, "attempts": attempts, "demos": len(demos),
                   "mean_length": float(np.mean([len(d["action"]) for d in demos]))}
