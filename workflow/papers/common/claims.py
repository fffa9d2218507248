"""The claims contract: each headline claim of a paper, measured, with a verdict computed in code.

A claim is decided by **evidence**: an effect (the number the criterion compares), its interval over
independent replicates (seeds, pools, splits), and a threshold fixed in the config before the run.

* ``holds``         -- the whole interval clears the threshold;
* ``does not hold`` -- the whole interval misses it;
* ``inconclusive``  -- the interval straddles it, or fewer than :data:`MIN_REPLICATES` replicates
  stand behind it, or the same criterion also holds on the negative control (the test is vacuous);
* ``not measured``  -- this run could not measure it (a GPU-only figure on a CPU); ``note`` says why.

The verdict is never passed in: :class:`Claim` derives it from its :class:`Evidence` (one, or several
that must all hold), and downgrades it when the :class:`Control` -- the same criterion applied where
the paper's mechanism is absent (shuffled labels, a random arm, a wrong formula) -- holds too.

Building evidence (each returns an :class:`Evidence`; ``threshold`` and ``direction`` are the criterion):

* :func:`mean_test` -- the mean of per-replicate values, Student-t interval (the default for a
  per-seed effect; with paired arms pass the per-seed differences, or use :func:`paired_test`);
* :func:`paired_test` / :func:`unpaired_test` -- mean difference of two arms, paired by replicate
  (arms share a seed) or not (Welch);
* :func:`bootstrap_test` -- any statistic of one or more samples (a ratio of means, a fitted
  exponent), percentile bootstrap, paired or not, with a fixed seed;
* :func:`proportion_test` -- a share of successes, exact (Clopper-Pearson) interval.

A report stage builds a list of :class:`Claim` and calls :func:`write_claims`, which validates the file
against ``workflow/schemas/claims.schema.json``. Worked example: ``papers.welfare.stages.report``.
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

    def __post_init__(self):
        self.effect = float(self.effect)
        self.interval = (float(self.interval[0]), float(self.interval[1]))
        self.replicates = int(self.replicates)
        self.threshold = float(self.threshold)
        decide(self.interval, self.threshold, self.direction)  # checks direction and bounds

    @property
    def verdict(self) -> str:
        raw = decide(self.interval, self.threshold, self.direction)
        if raw in (HOLDS, FAILS) and self.replicates < MIN_REPLICATES:
            return INCONCLUSIVE
        return raw

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
        return out


_PART_STATE = {FAILS: "misses the threshold", INCONCLUSIVE: "straddles the threshold", NOT_MEASURED: "not measured"}


def _verdict_of(evidence: Evidence | Sequence[Evidence] | None) -> str:
    if evidence is None:
        return NOT_MEASURED
    parts = [evidence] if isinstance(evidence, Evidence) else list(evidence)
    return all_of([e.verdict for e in parts])


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


def _evidence_json(evidence: Evidence | Sequence[Evidence]) -> dict:
    if isinstance(evidence, Evidence):
        return evidence.to_json()
    parts = list(evidence)
    head = _deciding(parts).to_json()
    head.pop("name", None)
    head["replicates"] = min(e.replicates for e in parts)
    head["verdict"] = all_of([e.verdict for e in parts])
    head["parts"] = [e.to_json() for e in parts]
    return head


@dataclasses.dataclass
class Control:
    """A negative control: the same criterion where the paper's mechanism is absent.

    `evidence` is built exactly as the claim's (same test, same threshold) from the control's data;
    None means the control was not run (then `description` says why and which issue adds it).
    """

    description: str
    evidence: Evidence | list[Evidence] | None = None
    measured: Any = None

    @property
    def verdict(self) -> str:
        return _verdict_of(self.evidence)

    def to_json(self) -> dict:
        out = {"description": self.description, "verdict": self.verdict,
               "measured": self.measured if self.measured is not None else
               (None if self.evidence is None else _evidence_json(self.evidence)["effect"])}
        if self.evidence is not None:
            out["evidence"] = _evidence_json(self.evidence)
        return out


@dataclasses.dataclass
class Claim:
    """One headline claim. The verdict is computed from `evidence` and `control`, never given."""

    id: str
    statement: str  # the claim in words
    paper: str  # the paper's number or direction
    measured: Any  # a number, or a dict of named numbers / strings (for the table)
    criterion: str  # the rule in words, with where its threshold comes from
    evidence: Evidence | list[Evidence] | None  # None: not measured (say why in `note`)
    control: Control
    note: str = ""  # why it does not hold / is inconclusive / was not measured, or what limits it

    def __post_init__(self):
        if not isinstance(self.control, Control):
            raise TypeError(f"claim {self.id}: control must be a Control, got {type(self.control).__name__}")
        if self.evidence is not None and not isinstance(self.evidence, Evidence):
            self.evidence = list(self.evidence)
            if not self.evidence or not all(isinstance(e, Evidence) for e in self.evidence):
                raise TypeError(f"claim {self.id}: evidence must be an Evidence or a non-empty list of them")
        if self.evidence is None and not self.note:
            raise ValueError(f"claim {self.id}: a claim that is not measured must say why in `note`")
        notes = [self.note] if self.note else []
        raw = _verdict_of(self.evidence)
        parts = [] if self.evidence is None else [self.evidence] if isinstance(self.evidence, Evidence) else self.evidence
        few = [e for e in parts if e.replicates < MIN_REPLICATES]
        if few and raw == INCONCLUSIVE:
            notes.append(f"rests on {min(e.replicates for e in few)} replicate(s), fewer than the "
                         f"{MIN_REPLICATES} a verdict needs")
        if raw == HOLDS and self.control.verdict == HOLDS:
            raw = INCONCLUSIVE
            notes.append("the criterion also holds on the negative control, so this test cannot tell the "
                         "paper's mechanism from its absence")
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

    @classmethod
    def not_measured(cls, id: str, statement: str, paper: str, criterion: str, why: str,
                     control_description: str = "") -> "Claim":
        """A claim this run could not measure (e.g. a GPU-only figure on a CPU)."""
        return cls(id, statement, paper, "not measured", criterion, None,
                   Control(control_description or "not run: the claim itself was not measured"), note=why)

    def to_json(self, scale: str) -> dict:
        out = {"id": self.id, "statement": self.statement, "paper": self.paper, "measured": self.measured,
               "criterion": self.criterion, "verdict": self.verdict, "control": self.control.to_json(),
               "scale": scale}
        if self.evidence is not None:
            out["evidence"] = _evidence_json(self.evidence)
        if self.note:
            out["note"] = self.note
        return out

    def describe_evidence(self) -> str:
        return describe(self.evidence)


def describe(evidence: Evidence | Sequence[Evidence] | None) -> str:
    """Evidence in one table cell: 'effect [low, high] > threshold (n=...)' per part."""
    if evidence is None:
        return "not measured"
    parts = [evidence] if isinstance(evidence, Evidence) else list(evidence)
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
                    threshold, direction, name)


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
                    threshold, direction, name)


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


def write_claims(claims: list[Claim], path: str | Path, *, paper: str, scale: str) -> dict:
    ids = [c.id for c in claims]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{paper}: duplicate claim ids {ids}")
    data = {"paper": paper, "scale": scale, "claims": [c.to_json(scale) for c in claims]}
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
