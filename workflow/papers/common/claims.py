"""The claims contract: each headline claim of a paper, measured, with a verdict computed in code.

A claim is decided by **evidence**: an effect (the number the criterion compares), its interval over
independent replicates (seeds, pools, splits), and a threshold fixed in the config before the run,
whose source is stated (:class:`ThresholdSource`: the paper, a reference measured in the same run, or
a convention such as a sign).

* ``holds``         -- the whole interval clears the threshold;
* ``does not hold`` -- the whole interval misses it;
* ``inconclusive``  -- the interval straddles it, or fewer than :data:`MIN_REPLICATES` replicates
  stand behind it, or the same criterion also holds on the negative control (the test is vacuous),
  or a **premise** gate is unmet (the setting lacks what the paper's claim presupposes: the model
  did not learn, the arms did not converge, a proxy does not track the real measure), or the
  **positive control** does not hold (the analysis does not find the effect where it is planted);
* ``not measured``  -- this run could not measure it (a GPU-only figure on a CPU); ``note`` says why.

So a setting without the paper's premise never yields "does not hold", and an analysis never shown
able to say "holds" never yields it either.

The verdict is never passed in: :class:`Claim` derives it from its :class:`Evidence` (one, or several
that must all hold), its :class:`Premise` gates, its negative :class:`Control` (``kind``
``"ablation"``: exactly the paper's mechanism removed, everything else kept, which a causal claim
needs; ``"null"``: shuffled labels, a random arm, a wrong formula) and its :class:`PositiveControl`.
Facts true by construction (a parameter count, the project's derivation against itself) are
:class:`Check` entries, kept apart from the claims. Each paper states its :class:`Scope`:
``replication`` (the paper's data and method at reduced size) or ``analogue`` (a named stand-in).

Building evidence (each returns an :class:`Evidence`; ``threshold`` and ``direction`` are the criterion):

* :func:`mean_test` -- the mean of per-replicate values, Student-t interval (the default for a
  per-seed effect; with paired arms pass the per-seed differences, or use :func:`paired_test`);
* :func:`paired_test` / :func:`unpaired_test` -- mean difference of two arms, paired by replicate
  (arms share a seed) or not (Welch);
* :func:`bootstrap_test` -- any statistic of one or more samples (a ratio of means, a fitted
  exponent), percentile bootstrap, paired or not, with a fixed seed;
* :func:`proportion_test` -- a share of successes, exact (Clopper-Pearson) interval.

A report stage builds a list of :class:`Claim` (and :class:`Check`) and calls :func:`write_claims`,
which validates the file against ``workflow/schemas/claims.schema.json``; ``papers.common.report``
writes the verdict table and the forest plot (:func:`papers.common.figures.forest_plot`) at the head
of ``report.md``. Worked examples: ``papers.orion.stages`` (a premise gate and a positive-control
model) and ``papers.flexpert.report`` (a claim decided on an ablation).
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from papers.common.io import read_json, write_json

SCHEMA = Path(__file__).resolve().parents[2] / "schemas" / "claims.schema.json"

HOLDS, FAILS, INCONCLUSIVE, NOT_MEASURED = "holds", "does not hold", "inconclusive", "not measured"
STATES = (HOLDS, FAILS, INCONCLUSIVE, NOT_MEASURED)
# Two-sided 95% intervals: the usual level of the papers' own error bars.
LEVEL = 0.95
# The fewest independent replicates an interval may rest on (the project's standard): with fewer a
# verdict is "inconclusive" whatever the interval says.
MIN_REPLICATES = 3
# Bootstrap resamples and the fixed seed that makes intervals identical across reruns.
BOOTSTRAP_SAMPLES = 10_000
BOOTSTRAP_SEED = 0
DIRECTIONS = (">", "<")
# A conjunction over more parts than this is summarised in tables (claims.json keeps every part).
MAX_PARTS_SHOWN = 8


def decide(interval: Sequence[float], threshold: float, direction: str) -> str:
    """The four-way decision of an interval against a threshold.

    ``direction`` ``">"``: the claim is that the effect exceeds `threshold`; ``"<"``: that it stays
    below it. A NaN bound (nothing measured) gives ``not measured``.
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    low, high = (float(x) for x in interval)
    if math.isnan(low) or math.isnan(high) or math.isnan(threshold):
        return NOT_MEASURED
    if low > high:
        raise ValueError(f"interval [{low}, {high}] has low > high")
    if direction == ">":
        return HOLDS if low > threshold else FAILS if high <= threshold else INCONCLUSIVE
    return HOLDS if high < threshold else FAILS if low >= threshold else INCONCLUSIVE


def all_of(verdicts: Sequence[str]) -> str:
    """A conjunction: fails if any part fails; holds only if every part holds; else the weakest state."""
    verdicts = list(verdicts)
    if not verdicts:
        raise ValueError("all_of needs at least one verdict")
    for state in (FAILS, NOT_MEASURED, INCONCLUSIVE):
        if state in verdicts:
            return state
    return HOLDS


@dataclasses.dataclass
class Evidence:
    """One comparison: `effect` with its `interval` over `replicates`, against `threshold`."""

    effect: float
    interval: tuple[float, float]
    replicates: int
    method: str  # how the interval was computed, e.g. "paired t over 10 seeds, 95%"
    threshold: float
    direction: str  # ">" (the effect must exceed the threshold) or "<"
    name: str = ""  # which part of a conjunctive claim this is
    timed: bool = False  # measured from wall-clock time: a rerun gives other numbers (and may decide otherwise)
    values: tuple[float, ...] | None = None  # the per-replicate values behind the interval, where there are such

    def __post_init__(self):
        self.effect = float(self.effect)
        self.interval = (float(self.interval[0]), float(self.interval[1]))
        self.replicates = int(self.replicates)
        self.threshold = float(self.threshold)
        if self.values is not None:
            self.values = tuple(float(v) for v in self.values)
        decide(self.interval, self.threshold, self.direction)  # checks direction and bounds

    @property
    def verdict(self) -> str:
        raw = decide(self.interval, self.threshold, self.direction)
        if raw in (HOLDS, FAILS) and self.replicates < MIN_REPLICATES:
            return INCONCLUSIVE
        return raw

    @property
    def identical(self) -> bool:
        """Every replicate gave the same value: deterministic reruns (one replicate, whatever their seeds are
        called) or a saturated measure; either way the interval's zero width is not evidence of precision."""
        return self.values is not None and len(self.values) >= 2 and len(set(self.values)) == 1

    @property
    def half_width(self) -> float:
        lo, hi = self.interval
        return (hi - lo) / 2

    def describe(self) -> str:
        """'0.12 [0.05, 0.19] > 0 (n=10)'"""
        name = f"{self.name}: " if self.name else ""
        lo, hi = self.interval
        return f"{name}{self.effect:.4g} [{lo:.4g}, {hi:.4g}] {self.direction} {self.threshold:.4g} (n={self.replicates})"

    def to_json(self) -> dict:
        out = {"effect": self.effect, "interval": list(self.interval), "replicates": self.replicates,
               "method": self.method, "threshold": self.threshold, "direction": self.direction,
               "verdict": self.verdict}
        if self.name:
            out["name"] = self.name
        if self.timed:
            out["timed"] = True
        if self.values is not None:
            out["values"] = list(self.values)
            if self.identical:
                out["identical_replicates"] = True
        return out


_PART_STATE = {FAILS: "misses the threshold", INCONCLUSIVE: "straddles the threshold", NOT_MEASURED: "not measured"}
# How a note reads a positive control that did not hold ("the positive control does not hold").
_CONTROL_STATE = {FAILS: "does not hold", INCONCLUSIVE: "is inconclusive", NOT_MEASURED: "is not measured"}


def _parts(evidence: Evidence | Sequence[Evidence] | None) -> list[Evidence]:
    return [] if evidence is None else [evidence] if isinstance(evidence, Evidence) else list(evidence)


def _verdict_of(evidence: Evidence | Sequence[Evidence] | None) -> str:
    if evidence is None:
        return NOT_MEASURED
    return all_of([e.verdict for e in _parts(evidence)])


def _deciding(parts: Sequence[Evidence]) -> Evidence:
    """The part that decides a conjunction: the first failing, else not measured, else inconclusive,
    else the one whose interval clears its threshold by the least (relative to the interval width)."""
    for state in (FAILS, NOT_MEASURED, INCONCLUSIVE):
        for e in parts:
            if e.verdict == state:
                return e

    def margin(e: Evidence) -> float:
        lo, hi = e.interval
        gap = lo - e.threshold if e.direction == ">" else e.threshold - hi
        return gap / max(hi - lo, 1e-300)

    return min(parts, key=margin)


def deciding(evidence: Evidence | Sequence[Evidence] | None) -> Evidence | None:
    """The single part that decides `evidence` (itself when it is one test), or None when not measured."""
    parts = _parts(evidence)
    return _deciding(parts) if parts else None


def _evidence_json(evidence: Evidence | Sequence[Evidence]) -> dict:
    if isinstance(evidence, Evidence):
        return evidence.to_json()
    parts = list(evidence)
    head = _deciding(parts).to_json()
    head.pop("name", None)
    head.pop("values", None)
    head.pop("identical_replicates", None)
    head["replicates"] = min(e.replicates for e in parts)
    head["verdict"] = all_of([e.verdict for e in parts])
    head["parts"] = [e.to_json() for e in parts]
    return head


def _as_evidence(owner: str, evidence) -> Evidence | list[Evidence] | None:
    if evidence is None or isinstance(evidence, Evidence):
        return evidence
    evidence = list(evidence)
    if not evidence or not all(isinstance(e, Evidence) for e in evidence):
        raise TypeError(f"{owner}: evidence must be an Evidence or a non-empty list of them")
    return evidence


# ---- what stands beside the evidence ---------------------------------------------------------------
THRESHOLD_SOURCES = ("paper", "derived", "convention")


@dataclasses.dataclass(frozen=True)
class ThresholdSource:
    """Where a claim's threshold comes from, so that a reader can tell the paper's number from ours.

    ``paper``: the paper's number and the section it comes from; ``derived``: a reference named and
    measured in the same run (the same method's seed spread, a random policy, the baseline's own score);
    ``convention``: a sign, or the tolerance of a numerical check. Build with :func:`from_paper`,
    :func:`derived` or :func:`convention`.
    """

    kind: str
    detail: str

    def __post_init__(self):
        if self.kind not in THRESHOLD_SOURCES:
            raise ValueError(f"threshold source kind must be one of {THRESHOLD_SOURCES}, got {self.kind!r}")
        if not str(self.detail).strip():
            raise ValueError(f"a {self.kind} threshold source needs a detail (which number, section or reference)")

    def to_json(self) -> dict:
        return {"kind": self.kind, "detail": self.detail}


def from_paper(detail: str) -> ThresholdSource:
    """The threshold is the paper's number: `detail` names it and the section it comes from."""
    return ThresholdSource("paper", detail)


def derived(detail: str) -> ThresholdSource:
    """The threshold is a reference measured in the same run: `detail` names it."""
    return ThresholdSource("derived", detail)


def convention(detail: str) -> ThresholdSource:
    """The threshold is a sign or a numerical tolerance: `detail` says which and why."""
    return ThresholdSource("convention", detail)


SCOPES = ("replication", "analogue")


@dataclasses.dataclass(frozen=True)
class Scope:
    """What a paper's run is: ``replication`` (the paper's data and method at reduced size) or
    ``analogue`` (a stand-in task or model, named in `detail`). A "does not hold" in an analogue is
    "not reproduced in this analogue", not a refutation of the paper."""

    kind: str
    detail: str

    def __post_init__(self):
        if self.kind not in SCOPES:
            raise ValueError(f"scope must be one of {SCOPES}, got {self.kind!r}")
        if not str(self.detail).strip():
            raise ValueError("a scope needs a detail: what is the paper's, what stands in for it")


@dataclasses.dataclass
class Premise:
    """One measured condition the claim's test needs (the model learned the task, every arm converged,
    the members disagree, the proxy tracks the reference). If it is not met, the claim cannot be
    decided either way: its verdict is at most "inconclusive". Build with :meth:`at_least`,
    :meth:`at_most` or :meth:`from_evidence` so that `met` is computed from `measured`."""

    name: str
    measured: Any
    requirement: str
    met: bool

    def __post_init__(self):
        if not self.name or not self.requirement:
            raise ValueError("a premise gate needs a name and a requirement")
        self.met = bool(self.met)

    @classmethod
    def at_least(cls, name: str, value: float, minimum: float, *, what: str = "") -> "Premise":
        """`value` >= `minimum` (NaN: not met). `what` says where the minimum comes from."""
        value = float(value)
        return cls(name, value, f">= {minimum:.4g}" + (f" ({what})" if what else ""),
                   bool(np.isfinite(value) and value >= minimum))

    @classmethod
    def at_most(cls, name: str, value: float, maximum: float, *, what: str = "") -> "Premise":
        """`value` <= `maximum` (NaN: not met)."""
        value = float(value)
        return cls(name, value, f"<= {maximum:.4g}" + (f" ({what})" if what else ""),
                   bool(np.isfinite(value) and value <= maximum))

    @classmethod
    def from_evidence(cls, name: str, evidence: Evidence | Sequence[Evidence]) -> "Premise":
        """A gate decided by a test of its own: met when that test holds (its whole interval clears)."""
        return cls(name, describe(evidence), "holds: " + "; ".join(
            f"{e.direction} {e.threshold:.4g}" for e in _parts(evidence)), _verdict_of(evidence) == HOLDS)

    def describe(self) -> str:
        from papers.common.report import short

        return f"{self.name}: {short(self.measured)} (requires {self.requirement})"

    def to_json(self) -> dict:
        return {"name": self.name, "measured": self.measured, "requirement": self.requirement, "met": self.met}


CONTROL_KINDS = ("ablation", "null")


@dataclasses.dataclass
class Control:
    """A negative control: the same criterion where the paper's mechanism is absent.

    `kind` ``"ablation"``: exactly the paper's mechanism removed, everything else kept (a causal claim
    needs one); ``"null"``: shuffled labels, a random arm, a wrong formula. `evidence` is built exactly
    as the claim's (same test, same threshold) from the control's data; None means the control was not
    run (then `description` says why).
    """

    description: str
    evidence: Evidence | list[Evidence] | None = None
    measured: Any = None
    _: dataclasses.KW_ONLY
    kind: str

    def __post_init__(self):
        if self.kind not in CONTROL_KINDS:
            raise ValueError(f"control kind must be one of {CONTROL_KINDS}, got {self.kind!r}")
        self.evidence = _as_evidence("control", self.evidence)

    @property
    def verdict(self) -> str:
        return _verdict_of(self.evidence)

    def to_json(self) -> dict:
        out = {"kind": self.kind, "description": self.description, "verdict": self.verdict,
               "measured": self.measured if self.measured is not None else
               (None if self.evidence is None else _evidence_json(self.evidence)["effect"])}
        if self.evidence is not None:
            out["evidence"] = _evidence_json(self.evidence)
        return out


@dataclasses.dataclass
class PositiveControl:
    """The same analysis on a setting where the effect is planted by construction: it must hold.

    Where the verdict depends on an analysis that could be blind (patching, retrieval, an estimator, a
    detector), a "does not hold" means something only if that analysis says "holds" where the effect
    is known to be there. If this control does not hold, the claim is "inconclusive".
    """

    description: str
    evidence: Evidence | list[Evidence] | None = None

    def __post_init__(self):
        self.evidence = _as_evidence("positive control", self.evidence)

    @property
    def verdict(self) -> str:
        return _verdict_of(self.evidence)

    def to_json(self) -> dict:
        out = {"description": self.description, "verdict": self.verdict}
        if self.evidence is not None:
            out["evidence"] = _evidence_json(self.evidence)
        return out


@dataclasses.dataclass
class Check:
    """A fact true by construction or a self-consistency check (a parameter count, the project's
    derivation against itself, a sanity bound): shown in the report, never counted as a claim."""

    id: str
    statement: str
    measured: Any
    requirement: str
    passed: bool

    def __post_init__(self):
        self.passed = bool(self.passed)

    @classmethod
    def at_most(cls, id: str, statement: str, value: float, maximum: float, *, what: str = "") -> "Check":
        value = float(value)
        return cls(id, statement, value, f"<= {maximum:.4g}" + (f" ({what})" if what else ""),
                   bool(np.isfinite(value) and value <= maximum))

    @classmethod
    def at_least(cls, id: str, statement: str, value: float, minimum: float, *, what: str = "") -> "Check":
        value = float(value)
        return cls(id, statement, value, f">= {minimum:.4g}" + (f" ({what})" if what else ""),
                   bool(np.isfinite(value) and value >= minimum))

    def to_json(self) -> dict:
        return {"id": self.id, "statement": self.statement, "measured": self.measured,
                "requirement": self.requirement, "passed": self.passed}


@dataclasses.dataclass
class Claim:
    """One headline claim. The verdict is computed from `evidence`, `premise`, `control` and
    `positive_control`, never given."""

    id: str
    statement: str  # the claim in words; its wording matches its threshold ("nearly", "markedly", ...)
    paper: str  # the paper's number or direction
    measured: Any  # a number, or a dict of named numbers / strings (for the table)
    criterion: str  # the rule in words, with where its threshold comes from
    evidence: Evidence | list[Evidence] | None  # None: not measured (say why in `note`)
    control: Control
    note: str = ""  # why it does not hold / is inconclusive / was not measured, or what limits it
    _: dataclasses.KW_ONLY
    threshold_source: ThresholdSource
    premise: Sequence[Premise] = ()  # the measured conditions the test needs; any unmet: at most inconclusive
    positive_control: PositiveControl | None = None  # the analysis where the effect is planted: must hold
    no_positive_control: str = ""  # where none is run: why the analysis cannot be blind, or why none exists
    paper_effect: float | None = None  # the paper's effect, in the evidence's units (for the power column)

    def __post_init__(self):
        if not isinstance(self.control, Control):
            raise TypeError(f"claim {self.id}: control must be a Control, got {type(self.control).__name__}")
        if not isinstance(self.threshold_source, ThresholdSource):
            raise TypeError(f"claim {self.id}: threshold_source must be a ThresholdSource "
                            f"(from_paper / derived / convention), got {type(self.threshold_source).__name__}")
        if self.positive_control is not None and not isinstance(self.positive_control, PositiveControl):
            raise TypeError(f"claim {self.id}: positive_control must be a PositiveControl")
        self.premise = list(self.premise)
        if not all(isinstance(g, Premise) for g in self.premise):
            raise TypeError(f"claim {self.id}: premise must be a list of Premise gates")
        self.evidence = _as_evidence(f"claim {self.id}", self.evidence)
        if self.evidence is None and not self.note:
            raise ValueError(f"claim {self.id}: a claim that is not measured must say why in `note`")
        notes = [self.note] if self.note else []
        raw = _verdict_of(self.evidence)
        parts = _parts(self.evidence)
        few = [e for e in parts if e.replicates < MIN_REPLICATES]
        if few and raw == INCONCLUSIVE:
            notes.append(f"rests on {min(e.replicates for e in few)} replicate(s), fewer than the "
                         f"{MIN_REPLICATES} a verdict needs")
        same = [e for e in parts if e.identical]
        if same:
            notes.append(f"{len(same)} of {len(parts)} tests rest on replicates with identical values (a "
                         "deterministic rerun counts once; a saturated measure has no spread to show)")
        if raw == HOLDS and self.control.verdict == HOLDS:
            raw = INCONCLUSIVE
            notes.append("the criterion also holds on the negative control, so this test cannot tell the "
                         "paper's mechanism from its absence")
        unmet = [g for g in self.premise if not g.met]
        if unmet and raw != NOT_MEASURED:
            raw = INCONCLUSIVE
            notes.append("premise not met: " + "; ".join(g.describe() for g in unmet)
                         + " (without it the data cannot speak for or against the claim)")
        if self.positive_control is not None and self.positive_control.verdict != HOLDS and raw != NOT_MEASURED:
            raw = INCONCLUSIVE
            notes.append(f"the positive control {_CONTROL_STATE[self.positive_control.verdict]}: the analysis does "
                         "not find the effect where it is planted")
        # Why a claim does not hold or is inconclusive: the parts that miss their threshold or straddle it
        # (those resting on too few replicates are said above).
        weak = [e for e in parts if e.verdict in (FAILS, NOT_MEASURED) or
                (e.verdict == INCONCLUSIVE and e.replicates >= MIN_REPLICATES)]
        if raw in (FAILS, INCONCLUSIVE) and weak:
            shown = weak[:MAX_PARTS_SHOWN]
            notes.append("; ".join(f"{e.describe()}: {_PART_STATE[e.verdict]}" for e in shown)
                         + (f"; and {len(weak) - len(shown)} more" if len(weak) > len(shown) else ""))
        self._verdict = raw
        self.note = "; ".join(notes)

    @property
    def verdict(self) -> str:
        return self._verdict

    @property
    def premise_met(self) -> bool:
        return all(g.met for g in self.premise)

    @classmethod
    def not_measured(cls, id: str, statement: str, paper: str, criterion: str, why: str,
                     control_description: str = "", *, threshold_source: ThresholdSource,
                     control_kind: str = "null", **kwargs) -> "Claim":
        """A claim this run could not measure (e.g. a GPU-only figure on a CPU)."""
        return cls(id, statement, paper, "not measured", criterion, None,
                   Control(control_description or "not run: the claim itself was not measured", kind=control_kind),
                   note=why, threshold_source=threshold_source, **kwargs)

    def power(self) -> dict | None:
        """The deciding test's half-width beside the paper's effect: could this design tell the paper's effect
        from the threshold? (None when not measured.)"""
        e = deciding(self.evidence)
        if e is None:
            return None
        out = {"half_width": e.half_width}
        if self.paper_effect is not None:
            gap = abs(float(self.paper_effect) - e.threshold)
            out.update(paper_effect=float(self.paper_effect), paper_effect_to_threshold=gap,
                       resolves_paper_effect=bool(e.half_width < gap))
        return out

    def to_json(self, scale: str) -> dict:
        out = {"id": self.id, "statement": self.statement, "paper": self.paper, "measured": self.measured,
               "criterion": self.criterion, "threshold_source": self.threshold_source.to_json(),
               "verdict": self.verdict, "premise": [g.to_json() for g in self.premise],
               "control": self.control.to_json(), "scale": scale}
        if self.positive_control is not None:
            out["positive_control"] = self.positive_control.to_json()
        if self.no_positive_control:
            out["no_positive_control"] = self.no_positive_control
        if self.evidence is not None:
            out["evidence"] = _evidence_json(self.evidence)
            out["power"] = self.power()
        if self.note:
            out["note"] = self.note
        return out

    def describe_evidence(self) -> str:
        return describe(self.evidence)


def describe(evidence: Evidence | Sequence[Evidence] | None) -> str:
    """Evidence in one table cell: 'effect [low, high] > threshold (n=...)' per part."""
    if evidence is None:
        return "not measured"
    parts = _parts(evidence)
    if len(parts) > MAX_PARTS_SHOWN:  # a claim over a long range: the count, and the part that decides
        held = sum(e.verdict == HOLDS for e in parts)
        return f"{held} of {len(parts)} parts hold; deciding part: {_deciding(parts).describe()}"
    return "; ".join(e.describe() for e in parts)


# ---- intervals ---------------------------------------------------------------------------------
def _finite(values, what: str) -> np.ndarray:
    x = np.asarray(values, dtype=float).ravel()
    return x[np.isfinite(x)]


def t_interval(values, level: float = LEVEL) -> tuple[float, float, float]:
    """(mean, low, high): Student-t interval of the mean of independent replicates.

    With one replicate the interval is the point itself (the verdict is then inconclusive anyway);
    NaNs (a replicate that measured nothing) are dropped.
    """
    from scipy import stats

    x = _finite(values, "values")
    if x.size == 0:
        return float("nan"), float("nan"), float("nan")
    m = float(x.mean())
    if x.size == 1:
        return m, m, m
    half = float(stats.t.ppf(0.5 + level / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))
    return m, m - half, m + half


def mean_test(values, *, threshold: float, direction: str, name: str = "", level: float = LEVEL,
              what: str = "replicates") -> Evidence:
    """The mean of per-replicate values (e.g. per-seed effects) against `threshold`, t interval."""
    x = _finite(values, name)
    m, lo, hi = t_interval(x, level)
    return Evidence(m, (lo, hi), x.size, f"Student t {level:.0%} interval of the mean over {x.size} {what}",
                    threshold, direction, name, values=x)


def paired_test(a, b, *, threshold: float = 0.0, direction: str = ">", name: str = "", level: float = LEVEL,
                what: str = "seeds") -> Evidence:
    """Mean of a - b over replicates that the two arms share (same seed, same split): paired t."""
    a, b = np.asarray(a, dtype=float).ravel(), np.asarray(b, dtype=float).ravel()
    if a.shape != b.shape:
        raise ValueError(f"paired_test: arms have {a.size} and {b.size} replicates")
    d = a - b
    x = d[np.isfinite(d)]
    m, lo, hi = t_interval(x, level)
    return Evidence(m, (lo, hi), x.size, f"paired t {level:.0%} interval of the mean difference over {x.size} {what}",
                    threshold, direction, name, values=x)


def unpaired_test(a, b, *, threshold: float = 0.0, direction: str = ">", name: str = "", level: float = LEVEL,
                  what: str = "replicates") -> Evidence:
    """mean(a) - mean(b) for independent arms: Welch's t interval; replicates = the smaller arm."""
    from scipy import stats

    a, b = _finite(a, "a"), _finite(b, "b")
    n = min(a.size, b.size)
    m = float(a.mean() - b.mean()) if n else float("nan")
    if n < 2:
        lo = hi = m
    else:
        va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
        se = math.sqrt(va + vb)
        dof = (va + vb) ** 2 / (va ** 2 / (a.size - 1) + vb ** 2 / (b.size - 1)) if se > 0 else a.size + b.size - 2
        half = float(stats.t.ppf(0.5 + level / 2, dof) * se)
        lo, hi = m - half, m + half
    return Evidence(m, (lo, hi), n, f"Welch t {level:.0%} interval of the difference of means "
                    f"({a.size} and {b.size} {what})", threshold, direction, name)


def bootstrap_interval(stat: Callable[..., float], *samples, paired: bool = True, level: float = LEVEL,
                       n_boot: int = BOOTSTRAP_SAMPLES, seed: int = BOOTSTRAP_SEED) -> tuple[float, float, float]:
    """(stat(*samples), low, high): percentile bootstrap over replicates, with a fixed seed.

    Each sample is an array whose first axis indexes replicates. ``paired``: all samples are
    resampled with the same indices (they share replicates: arms run on the same seeds); otherwise
    each is resampled on its own. With 3-5 replicates a percentile interval is too narrow (it cannot
    reach beyond the observed values): prefer :func:`mean_test` for a mean.
    """
    samples = [np.asarray(s, dtype=float) for s in samples]
    if not samples:
        raise ValueError("bootstrap_interval needs at least one sample")
    n = samples[0].shape[0]
    if paired and any(s.shape[0] != n for s in samples):
        raise ValueError(f"paired bootstrap: samples have {[s.shape[0] for s in samples]} replicates")
    point = float(stat(*samples))
    rng = np.random.default_rng(seed)
    draws = np.empty(n_boot)
    for i in range(n_boot):
        if paired:
            idx = rng.integers(0, n, n)
            draws[i] = stat(*(s[idx] for s in samples))
        else:
            draws[i] = stat(*(s[rng.integers(0, s.shape[0], s.shape[0])] for s in samples))
    draws = draws[np.isfinite(draws)]
    if draws.size == 0:
        return point, float("nan"), float("nan")
    lo, hi = np.quantile(draws, [0.5 - level / 2, 0.5 + level / 2])
    return point, float(lo), float(hi)


def bootstrap_test(stat: Callable[..., float], *samples, threshold: float, direction: str, paired: bool = True,
                   name: str = "", level: float = LEVEL, n_boot: int = BOOTSTRAP_SAMPLES, seed: int = BOOTSTRAP_SEED,
                   what: str = "replicates") -> Evidence:
    """Any statistic of replicated samples against `threshold`, percentile bootstrap interval."""
    point, lo, hi = bootstrap_interval(stat, *samples, paired=paired, level=level, n_boot=n_boot, seed=seed)
    n = min(np.asarray(s).shape[0] for s in samples)
    kind = "paired" if paired else "unpaired"
    return Evidence(point, (lo, hi), n, f"{kind} percentile bootstrap {level:.0%} over {n} {what} "
                    f"({n_boot} resamples, seed {seed})", threshold, direction, name)


def proportion_test(successes: int, trials: int, *, threshold: float, direction: str = ">", name: str = "",
                    level: float = LEVEL, what: str = "trials") -> Evidence:
    """A share of successes among independent trials: exact (Clopper-Pearson) interval."""
    from scipy import stats

    k, n = int(successes), int(trials)
    if n == 0:
        return Evidence(float("nan"), (float("nan"), float("nan")), 0, "no trials", threshold, direction, name)
    a = 1 - level
    lo = 0.0 if k == 0 else float(stats.beta.ppf(a / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(stats.beta.ppf(1 - a / 2, k + 1, n - k))
    return Evidence(k / n, (lo, hi), n, f"Clopper-Pearson {level:.0%} interval of {k}/{n} {what}",
                    threshold, direction, name)


# ---- files ---------------------------------------------------------------------------------------
def validate_claims(data: dict) -> None:
    """Raise ``jsonschema.ValidationError`` if `data` breaks the claims contract."""
    import jsonschema

    jsonschema.validate(data, read_json(SCHEMA))


def write_claims(claims: list[Claim], path: str | Path, *, paper: str, scale: str, scope: Scope,
                 checks: Sequence[Check] = ()) -> dict:
    """Write ``claims.json``: the paper's `scope`, its claims and its `checks` (kept apart from the claims);
    the file is validated against the schema after it is written."""
    if not isinstance(scope, Scope):
        raise TypeError(f"{paper}: scope must be a Scope (replication or analogue), got {type(scope).__name__}")
    ids = [c.id for c in claims] + [c.id for c in checks]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{paper}: duplicate claim or check ids {ids}")
    if not all(isinstance(c, Check) for c in checks):
        raise TypeError(f"{paper}: checks must be Check entries")
    data = {"paper": paper, "scale": scale, "scope": scope.kind, "scope_detail": scope.detail,
            "claims": [c.to_json(scale) for c in claims], "checks": [c.to_json() for c in checks]}
    write_json(data, path)
    validate_claims(read_json(path))  # what was written, NaN turned into null included
    return data


def count_states(verdicts) -> dict[str, int]:
    """{state: count} over the four states, in their fixed order."""
    verdicts = list(verdicts)
    return {s: sum(v == s for v in verdicts) for s in STATES}


def states_text(verdicts) -> str:
    """'3 hold, 1 does not hold, 0 inconclusive, 0 not measured'"""
    c = count_states(verdicts)
    return (f"{c[HOLDS]} hold{'s' if c[HOLDS] == 1 else ''}, {c[FAILS]} {'do' if c[FAILS] != 1 else 'does'} not hold, "
            f"{c[INCONCLUSIVE]} inconclusive, {c[NOT_MEASURED]} not measured")
