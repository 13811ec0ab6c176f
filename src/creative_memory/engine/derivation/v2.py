"""Derivation version ``"2"``: pairwise-aware, with provisional unary evidence (design.md §3).

Version 1 folds each signal into a record through the prototype's reversal ladder. That
cannot use contrastive evidence: a neutral feature that merely rode along with the real reason
collects random-signed evidence, and the ladder turns the noise into stable records. Version 2
instead treats every piece of feedback as an *observation about a set of features* and fits
one regularised linear paired-comparison model per bucket (global, or one project):

* a **comparison** "chose A over B" is a row ``x = 1[A] − 1[B]`` (features in both sides
  cancel; ``dimensions`` keeps only features whose ``preference_type`` starts with one of the
  given prefixes) with outcome ``y = +1``: the Thurstone model ``P(A ≻ B) = Φ(β·x)``,
  linearised;
* a **unary outcome** (accept, thumbs, abandon, rejection) is one bit about a whole artifact:
  the features the extractor listed for it (the adapter's signals of one handler call) form
  one row ``x = 1[listed]`` plus an intercept (the user's base rate), ``y = ±1``. Because
  every listed feature is a regressor, a salient-but-innocent feature that appears in
  accepted and rejected artifacts alike is explained away instead of being blamed;
* **explicit statements** (tag, edit-and-save, revert) are rows about the listed features
  without intercept.

Rows are weighted by the evidence-kind weights of :data:`V2_TABLE`. The sufficient statistics
``XᵀWX`` and ``XᵀWy`` are integer sums, so the estimate depends on the *set* of observations
only — never on their order. Two structural facts of design feedback shape the fit:

* an artifact carries **one pattern per type**, so only differences *within* a type are
  identified. Each type with two or more seen patterns gets a **type level** column
  (``x_t = Σ_{f∈t} x_f``, a linear map of the stored statistics: no extra state). It takes
  what the type's patterns have in common — e.g. "whenever the extractor lists a layout, a
  liked but rarely listed layout is absent" — so a salient neutral pattern is not blamed for
  it; a feature's estimate is its deviation from its type's level;
* most patterns are **neutral**: the feature prior is a spike-and-slab mixture (a tight
  spike at zero, a wide slab for the few that carry taste), fitted by a fixed number of EM
  steps (``fit_iterations``) that set each feature's ridge precision from its posterior slab
  probability. The type level is then where most of its patterns are, not their mean.

The estimate is the MAP ``β = (E XᵀWX Eᵀ + Λ)⁻¹ E XᵀWy`` at the final precisions ``Λ``; the
work is fixed, hence deterministic, and is redone lazily, only when a read needs it.

Each feature becomes one record. Its strength is a lower confidence bound on the effect,
``(|β| − z·sd) / full_effect`` clamped to [0, 1], with ``sd = sqrt(σ² [(E XᵀWX Eᵀ + Λ)⁻¹]_ff)``
(``σ²`` the residual variance estimated from the data): the confidence comes from the
evidence behind that particular estimate (collinear features share it). Records supported
only by unary outcomes are **provisional**: strength capped at ``provisional_cap`` (so the
label is at most ``medium``) until a reinforcing kind (tag, edit, revert or comparison)
supports the same direction. A feature whose unary and reinforcing
contributions materially disagree is marked ``under_review`` (not injected) — a large unary
aggregate is neither silently outweighed by a few comparisons nor silently kept against many.

Decay (``decay_pass`` events) works per feature as in version 1 (``decay_at`` = last evidence
+ 90 days; one ×0.70 step per pass that finds it due; archived 180 days after its last
evidence), but on the multiplier applied to the fitted strength; new evidence resets it.

:meth:`DerivedStateV2.evidence_for` returns, for a record, the estimate, its uncertainty, the
table in force, the type level, the slab probability and each evidence kind's events and exact
contribution to the estimate (the contributions add up to the estimate).
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from creative_memory.engine.constants import DECAY_DAYS
from creative_memory.engine.derivation.v1 import (
    DerivedState,
    _Bucket,
    confidence_of,
    register_version,
)
from creative_memory.engine.events import ComparisonEvent, Event, LegacyRecordEvent, SignalEvent
from creative_memory.engine.models import DecayResult, Preference, Refinement
from creative_memory.engine.timeutil import MS_PER_DAY, add_days_ts, format_ts, ts_to_ms

VERSION: Final = "2"

FeatureKey = tuple[str, str]  # (preference_type, pattern)

#: The version-2 weighting policy (design.md §1: "weighting policy is data inside the
#: version"). ``weight``: row precision in integer evidence units. ``outcome``: the row is a
#: verdict on a whole artifact (gets the intercept); else it is a statement about the listed
#: features. ``reinforcing``: releases the provisional cap. ``noise``: the class whose
#: residual variance weights the kind's rows in the final fit. Tuned on
#: ``benchmarks/taste_recovery.py`` (docs/quality.md).
V2_TABLE: Final[Mapping[str, Any]] = MappingProxyType(
    {
        "kinds": MappingProxyType(
            {
                "pairwise_comparison": MappingProxyType(
                    {"weight": 4, "outcome": False, "reinforcing": True, "noise": "comparison"}
                ),
                "explicit_tag": MappingProxyType(
                    {"weight": 6, "outcome": False, "reinforcing": True, "noise": "statement"}
                ),
                "revert_after_edit": MappingProxyType(
                    {"weight": 5, "outcome": False, "reinforcing": True, "noise": "statement"}
                ),
                "manual_refinement": MappingProxyType(
                    {"weight": 4, "outcome": True, "reinforcing": True, "noise": "verdict"}
                ),
                "legacy_record": MappingProxyType(
                    {"weight": 2, "outcome": False, "reinforcing": False, "noise": "statement"}
                ),
                "repeated_acceptance": MappingProxyType(
                    {"weight": 3, "outcome": True, "reinforcing": False, "noise": "verdict"}
                ),
                "thumbs_up": MappingProxyType(
                    {"weight": 2, "outcome": True, "reinforcing": False, "noise": "verdict"}
                ),
                "thumbs_down": MappingProxyType(
                    {"weight": 2, "outcome": True, "reinforcing": False, "noise": "verdict"}
                ),
                "single_rejection": MappingProxyType(
                    {"weight": 2, "outcome": True, "reinforcing": False, "noise": "verdict"}
                ),
                "abandoned_generation": MappingProxyType(
                    {"weight": 1, "outcome": True, "reinforcing": False, "noise": "verdict"}
                ),
            }
        ),
        # Gaussian prior precisions (evidence units): a feature effect before the first EM
        # step, the intercept, each type level
        "prior": 8,
        "intercept_prior": 32,
        "type_prior": 32,
        # spike-and-slab prior on feature effects: precision of the spike (neutral patterns)
        # and of the slab (patterns that carry taste), the slab's prior share, and the fixed
        # number of fits (EM steps + 1)
        "spike_prior": 160,
        "slab_prior": 8,
        "slab_share": 0.2,
        "fit_iterations": 6,
        # a comparison feature whose type the other side does not list: its contrast, in
        # halves (1 = x = ±½: it may be present there too, unlisted)
        "unaligned_contrast_halves": 1,
        # residual variance per evidence unit of each noise class (and of the unweighted
        # first pass): prior guess and its weight in rows. The weighted pass guesses 1.
        "sigma_prior": 2.0,
        "sigma_prior_rows": 4,
        # strength = clamp((|β| − z·sd) / full_effect, 0, 1); z by polarity (an Avoid that is
        # wrong costs more than a missed one: it steers generation away from good options)
        "z_positive": 1.0,
        "z_negative": 2.25,
        "full_effect": 0.30,
        # unary-only records: strength ≤ cap (label ≤ medium) until reinforced
        "provisional_cap": 0.65,
        # a legacy record of strength s counts as round(s × legacy_units) units
        "legacy_units": 20,
        # unary vs reinforcing contributions of opposite sign, both ≥ this ⇒ under_review
        "contest_min": 0.15,
        "decay_factor": 0.70,
        "decay_days": DECAY_DAYS,
        "archive_days": 180,
    }
)

_KINDS: Final = tuple(V2_TABLE["kinds"])


def _kind_weight(kind: str) -> int:
    return int(V2_TABLE["kinds"][kind]["weight"])


def _is_outcome(kind: str) -> bool:
    return bool(V2_TABLE["kinds"][kind]["outcome"])


def _is_reinforcing(kind: str) -> bool:
    return bool(V2_TABLE["kinds"][kind]["reinforcing"])


def _noise_class(kind: str) -> str:
    return str(V2_TABLE["kinds"][kind]["noise"])


@functools.lru_cache(maxsize=1 << 16)
def _content_id(bucket: str | None, key: FeatureKey, polarity: str) -> str:
    seed = f"v2\0{bucket or ''}\0{key[0]}\0{key[1]}\0{polarity}"
    n = int.from_bytes(hashlib.sha256(seed.encode()).digest()[:8], "big")
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    chars = []
    for _ in range(6):
        n, r = divmod(n, 36)
        chars.append(alphabet[r])
    return "pref_" + "".join(chars)


@dataclass
class _Feature:
    """Per-feature bookkeeping (everything except the fit)."""

    col: int
    counts: dict[str, list[int]] = field(default_factory=dict)  # kind → [for, against]
    support: list[int] = field(default_factory=lambda: [0, 0])  # reinforcing events +/−
    tags: set[str] = field(default_factory=set)
    events: int = 0
    last_ms: int = 0
    last_seen: str = ""
    decay_at_ms: int = 0  # kept as epoch ms; formatted only when shown or stored
    decay_steps: int = 0
    archived: bool = False

    # (events, decay_at_ms) → the record fields that depend on the bookkeeping only
    _summary: tuple[tuple[int, int], tuple[Any, ...]] | None = field(
        default=None, repr=False, compare=False
    )

    @property
    def decay_at(self) -> str:
        if not self.last_seen:
            return ""
        days = int(V2_TABLE["decay_days"])
        if self.decay_at_ms == self.last_ms + days * MS_PER_DAY:
            # the usual case (no decay pass since the last evidence): shift the date of
            # ``last_seen`` (``format_ts(last_ms)``), memoised per day — the same string
            return add_days_ts(self.last_seen, days)
        return format_ts(self.decay_at_ms)

    def summary(self) -> tuple[list[str], int, int, list[str], str]:
        """``(sources, accept_count, reject_count, explicit_tags, decay_at)`` of the
        feature's record, kept until its bookkeeping changes (every change of counts, tags
        or times also changes ``events`` or ``decay_at_ms``)."""
        stamp = (self.events, self.decay_at_ms)
        if self._summary is None or self._summary[0] != stamp:
            pos = sum(v[0] for v in self.counts.values())
            neg = sum(v[1] for v in self.counts.values())
            sources = [k for k in _KINDS if k in self.counts]
            self._summary = (stamp, (sources, pos, neg, sorted(self.tags), self.decay_at))
        sources, pos, neg, tags, decay_at = self._summary[1]
        return list(sources), pos, neg, list(tags), decay_at

    def dump(self) -> dict[str, Any]:
        return {
            "col": self.col,
            "counts": self.counts,
            "support": self.support,
            "tags": sorted(self.tags),
            "events": self.events,
            "last_ms": self.last_ms,
            "last_seen": self.last_seen,
            "decay_at": self.decay_at,
            "decay_steps": self.decay_steps,
            "archived": self.archived,
        }

    @classmethod
    def load(cls, d: Mapping[str, Any]) -> _Feature:
        return cls(
            col=int(d["col"]),
            counts={k: [int(v[0]), int(v[1])] for k, v in d["counts"].items()},
            support=[int(d["support"][0]), int(d["support"][1])],
            tags=set(d["tags"]),
            events=int(d["events"]),
            last_ms=int(d["last_ms"]),
            last_seen=str(d["last_seen"]),
            decay_at_ms=ts_to_ms(str(d["decay_at"])) if d["decay_at"] else 0,
            decay_steps=int(d["decay_steps"]),
            archived=bool(d["archived"]),
        )


@dataclass
class _Fit:
    sigma2: float  # residual variance per evidence unit (pooled, with a prior)
    order: list[int]  # canonical column order used for the factorisation
    pos: dict[int, int]  # column → position in ``order``
    inverse: Any  # (E A Eᵀ + Λ)⁻¹ at the final precisions
    beta: Mapping[int, float]
    var: dict[int, float]
    unary: Mapping[int, float]  # contribution of outcome kinds (+ legacy)
    reinforcing: Mapping[int, float]
    level: dict[str, float]  # estimated type levels
    slab: Mapping[int, float]  # posterior slab probability of each feature
    precision: Mapping[int, float]  # each column's final prior precision
    noise: dict[str, float]  # residual variance per unit of weight, by noise class
    omega: dict[str, float]  # the weight of each class in the final fit (1 / noise)
    b_kind: dict[str, Any]  # each kind's E·Σ w·y·x (unweighted by its class)

    def inverse_row(self, col: int) -> Any:
        """Row ``col`` of ``(E A Eᵀ + Λ)⁻¹``."""
        return self.inverse[self.pos[col]]


def _class_sums(b_kind: Mapping[str, Any], classes: Iterable[str], n: int) -> dict[str, Any]:
    """Each noise class's ``Σ w·y·x`` (the sum of its kinds' vectors)."""
    import numpy as np

    b_c = {c: np.zeros(n) for c in classes}
    for kind, vb in b_kind.items():
        b_c[_noise_class(kind)] += vb
    return b_c


def _by_reinforcement(
    b_kind: Mapping[str, Any], omega: Mapping[str, float], n: int
) -> tuple[Any, Any]:
    """The class-weighted ``Σ w·y·x`` of the unary and of the reinforcing kinds."""
    import numpy as np

    unary_b = np.zeros(n)
    reinf_b = np.zeros(n)
    for kind, vb in b_kind.items():
        if _is_reinforcing(kind):
            reinf_b += omega[_noise_class(kind)] * vb
        else:
            unary_b += omega[_noise_class(kind)] * vb
    return unary_b, reinf_b


class _Model:
    """Sufficient statistics and fit of one bucket."""

    def __init__(self) -> None:
        self.features: dict[FeatureKey, _Feature] = {}
        self.keys: list[FeatureKey | None] = [None]  # column → feature (0 = intercept)
        # per noise class (the kinds' "noise" in the table): the class's rows
        self.xx: dict[str, dict[tuple[int, int], int]] = {}  # (i ≤ j) → Σ w·x_i·x_j
        self.yy: dict[str, int] = {}  # Σ w·y²
        self.nrows: dict[str, int] = {}
        self.xy: dict[str, dict[int, int]] = {}  # kind → column → Σ w·y·x
        self.fit: _Fit | None = None

    @property
    def rows(self) -> int:
        return sum(self.nrows.values())

    def feature(self, key: FeatureKey) -> _Feature:
        f = self.features.get(key)
        if f is None:
            f = self.features[key] = _Feature(col=len(self.keys))
            self.keys.append(key)
        return f

    def add_row(self, kind: str, cols: list[tuple[int, int]], y: int, denom: int = 1) -> None:
        """Add one observation: ``cols`` are (column, x·denom) pairs, outcome ``y`` (±1).

        With ``denom = 2`` a feature can enter with x = ±½; the sums stay integral because
        such kinds have weights that are multiples of 4 (checked)."""
        w = _kind_weight(kind)
        d2 = denom * denom
        if w % d2:
            raise ValueError(f"weight of {kind} must be a multiple of {d2}")
        noise = _noise_class(kind)
        xx = self.xx.setdefault(noise, {})
        xy = self.xy.setdefault(kind, {})
        self.yy[noise] = self.yy.get(noise, 0) + w
        self.nrows[noise] = self.nrows.get(noise, 0) + 1
        for a, (i, xi) in enumerate(cols):
            xy[i] = xy.get(i, 0) + w * y * xi // denom
            for j, xj in cols[a:]:
                k = (i, j) if i <= j else (j, i)
                xx[k] = xx.get(k, 0) + w * xi * xj // d2
        self.fit = None

    def extend_row(self, kind: str, row: list[tuple[int, int]], col: int, y: int) -> None:
        """Add column ``col`` (x = 1) to the open row ``row`` (which already counted)."""
        w = _kind_weight(kind)
        xx = self.xx.setdefault(_noise_class(kind), {})
        xy = self.xy.setdefault(kind, {})
        xy[col] = xy.get(col, 0) + w * y
        for i, xi in row:
            k = (i, col) if i <= col else (col, i)
            xx[k] = xx.get(k, 0) + w * xi
        xx[(col, col)] = xx.get((col, col), 0) + w
        row.append((col, 1))
        self.fit = None

    # -- the fit -------------------------------------------------------------------------
    def solve(self) -> _Fit:
        """The MAP fit of this bucket (cached until the next observation).

        Columns: the intercept, the features in canonical ``(type, pattern)`` order, then one
        *type level* per preference type with two or more seen patterns, in sorted order. A
        type column is the sum of its features' columns (``x_t = Σ_{f∈t} x_f``), so its
        statistics are a linear map of the stored ones (``A' = E A Eᵀ``) — no extra state.
        Artifacts carry one pattern per type, so only differences within a type are
        identified; the type level takes what the type's patterns have in common, and a
        feature's estimate is its deviation from that level. The feature prior is a
        spike-and-slab mixture (most patterns of a type are neutral, a few carry taste),
        fitted by a fixed number of EM steps that set each feature's ridge precision from its
        posterior slab probability.

        Rows of different noise classes (verdicts, comparisons, statements) are not equally
        noisy per unit of weight, so the fit runs twice: the first pass estimates each
        class's residual variance, the second weights each class by its inverse (feasible
        generalised least squares). The statistics are integers (exact in float64), so the
        fit depends on the set of observations only."""
        if self.fit is not None:
            return self.fit
        import numpy as np  # imported on the first fit: commands that never fit start faster

        table = V2_TABLE
        feats, types, tpos, order, pos = self.canonical_layout()
        n0 = len(order)
        n = n0 + len(types)
        ext = np.zeros((n, n0))  # x' = E x: the columns, then the type levels
        ext[np.arange(n0), np.arange(n0)] = 1.0
        for p, (k, _) in enumerate(feats, start=1):
            if k[0] in tpos:
                ext[n0 + tpos[k[0]], p] = 1.0
        classes = sorted(self.nrows)
        gram_c: dict[str, Any] = {}
        for c in classes:
            a0 = np.zeros((n0, n0))
            for (i, j), v in self.xx.get(c, {}).items():
                a0[pos[i], pos[j]] = a0[pos[j], pos[i]] = float(v)
            gram_c[c] = ext @ a0 @ ext.T
        b_kind = {kind: self._extend(vec, pos, ext) for kind, vec in self.xy.items()}
        b_c = _class_sums(b_kind, classes, n)
        s0 = float(table["sigma_prior"])
        # pass 1: every class at its table weight; its residuals give each class's variance
        ones = dict.fromkeys(classes, 1.0)
        beta1 = self._emvs(gram_c, b_c, ones, n0, n, s0)[0]
        noise = self.class_noise({c: float(beta1 @ gram_c[c] @ beta1) for c in classes}, b_c, beta1)
        # pass 2: each class weighted by the inverse of its residual variance, so the
        # weighted residuals have unit variance: that is the prior guess of this pass
        omega = {c: 1.0 / noise[c] for c in classes}
        beta_v, inverse, sigma2, slab, prior = self._emvs(gram_c, b_c, omega, n0, n, 1.0)
        unary_b, reinf_b = _by_reinforcement(b_kind, omega, n)
        bu = inverse @ unary_b
        br = inverse @ reinf_b
        var = sigma2 * np.diag(inverse)
        self.fit = _Fit(
            sigma2=sigma2,
            order=order,
            pos=pos,
            inverse=inverse,
            beta={c: float(beta_v[pos[c]]) for c in order},
            var={c: float(var[pos[c]]) for c in order},
            unary={c: float(bu[pos[c]]) for c in order},
            reinforcing={c: float(br[pos[c]]) for c in order},
            level={t: float(beta_v[n0 + i]) for i, t in enumerate(types)},
            slab={c: float(slab[pos[c]]) for c in order},
            precision={c: float(prior[pos[c]]) for c in order},
            noise=noise,
            omega=omega,
            b_kind=b_kind,
        )
        return self.fit

    def class_noise(
        self, quad: Mapping[str, float], b_c: Mapping[str, Any], beta: Any
    ) -> dict[str, float]:
        """Each noise class's residual variance per unit of weight at the first pass's
        ``beta`` (``quad[c] = βᵀ G_c β``), with the table's prior guess."""
        nu0 = float(V2_TABLE["sigma_prior_rows"])
        s0 = float(V2_TABLE["sigma_prior"])
        noise: dict[str, float] = {}
        for c in sorted(self.nrows):
            rss = float(self.yy[c]) - 2.0 * float(beta @ b_c[c]) + quad[c]
            noise[c] = (max(rss, 0.0) + nu0 * s0) / (self.nrows[c] + nu0)
        return noise

    def canonical_layout(
        self,
    ) -> tuple[list[tuple[FeatureKey, int]], list[str], dict[str, int], list[int], dict[int, int]]:
        """The unknowns in canonical order: ``(feats, types, tpos, order, pos)`` — the
        features sorted by ``(type, pattern)`` with their columns, the types that get a
        level (two or more seen patterns: a level needs two to be told apart from a
        pattern's own effect) and their index, the column order (intercept first) and each
        column's position in it."""
        feats = sorted((k, f.col) for k, f in self.features.items())
        seen: dict[str, int] = {}
        for k, _ in feats:
            seen[k[0]] = seen.get(k[0], 0) + 1
        types = sorted(t for t, count in seen.items() if count > 1)
        tpos = {t: i for i, t in enumerate(types)}
        order = [0] + [c for _, c in feats]
        pos = {c: p for p, c in enumerate(order)}
        return feats, types, tpos, order, pos

    def _emvs(
        self,
        gram_c: Mapping[str, Any],
        b_c: Mapping[str, Any],
        omega: Mapping[str, float],
        n0: int,
        n: int,
        s0: float,
    ) -> tuple[Any, Any, float, Any, Any]:
        """The spike-and-slab MAP fit with the classes weighted by ``omega`` (see
        :meth:`spike_slab_em`), each ridge fit by a dense inverse. Returns (β, (A + Λ)⁻¹,
        σ², slab probability at the final estimate, final precisions Λ)."""
        import numpy as np

        classes = sorted(omega)
        gram = sum((omega[c] * gram_c[c] for c in classes), np.zeros((n, n)))
        b_all = sum((omega[c] * b_c[c] for c in classes), np.zeros(n))
        kept: dict[str, Any] = {}

        def ridge(prior: Any, _previous: Any, _last: bool) -> tuple[Any, float]:
            inverse = kept["inverse"] = np.linalg.inv(gram + np.diag(prior))
            return inverse @ b_all, float(prior @ np.diag(inverse))

        beta_v, sigma2, slab, prior = self.spike_slab_em(b_all, omega, n0, n, s0, ridge)
        return beta_v, kept["inverse"], sigma2, slab, prior

    def spike_slab_em(
        self,
        b_all: Any,
        omega: Mapping[str, float],
        n0: int,
        n: int,
        s0: float,
        ridge: Callable[[Any, Any, bool], tuple[Any, float]],
    ) -> tuple[Any, float, Any, Any]:
        """The spike-and-slab EM steps: a fixed number of ridge fits, each setting every
        feature's precision from its posterior slab probability at the previous estimate.
        ``ridge(Λ, β_previous, last)`` solves ``(A + Λ) β = b`` and returns β and
        ``Σᵢ Λᵢ [(A + Λ)⁻¹]ᵢᵢ`` (for the effective number of parameters); ``s0`` is the
        prior guess of the residual variance per unit of (weighted) evidence. Returns (β,
        σ², slab probability at the final estimate, final precisions Λ)."""
        import numpy as np

        table = V2_TABLE
        yy = sum(omega[c] * float(self.yy[c]) for c in sorted(omega))
        lam1 = float(table["slab_prior"])
        lam0 = float(table["spike_prior"])
        share = float(table["slab_share"])
        # log prior odds of spike vs slab, up to the data term
        log_odds0 = math.log((1.0 - share) / share) + 0.5 * math.log(lam0 / lam1)
        prior = np.array(
            [float(table["intercept_prior"])]
            + [float(table["prior"])] * (n0 - 1)
            + [float(table["type_prior"])] * (n - n0)
        )
        nu0 = float(table["sigma_prior_rows"])
        iterations = int(table["fit_iterations"])
        slab = np.ones(n)
        beta_v: Any = None
        sigma2 = s0
        for step in range(iterations):
            last = step == iterations - 1
            beta_v, trace = ridge(prior, beta_v, last)
            # residual variance: RSS = yᵀWy − βᵀb − βᵀΛβ; dof = rows − effective parameters
            rss = yy - float(beta_v @ b_all) - float(prior @ (beta_v * beta_v))
            p_eff = n - trace
            sigma2 = (max(rss, 0.0) + nu0 * s0) / max(self.rows - p_eff + nu0, 1.0)
            # E step: posterior slab probability of each feature (at the final step: at the
            # final estimate); M step: its precision for the next fit
            t = log_odds0 - 0.5 * (lam0 - lam1) * beta_v[1:n0] ** 2 / sigma2
            r = 1.0 / (1.0 + np.exp(np.minimum(t, 700.0)))
            slab[1:n0] = r
            if last:
                break
            prior[1:n0] = r * lam1 + (1.0 - r) * lam0
        return beta_v, sigma2, slab, prior

    @staticmethod
    def _extend(vec: Mapping[int, int], pos: Mapping[int, int], ext: Any) -> Any:
        """``E b``: a kind's ``Σ w·y·x`` over the columns, with the type levels appended."""
        import numpy as np

        b0 = np.zeros(ext.shape[1])
        for c, v in vec.items():
            b0[pos[c]] += float(v)
        return ext @ b0

    def kind_contributions(self, col: int) -> dict[str, float]:
        fit = self.solve()
        row = fit.inverse_row(col)
        out: dict[str, float] = {}
        for kind in _KINDS:
            if self.xy.get(kind):
                weight = fit.omega[_noise_class(kind)]
                out[kind] = weight * float(row @ fit.b_kind[kind])
        return out

    # -- persistence ---------------------------------------------------------------------
    def dump(self) -> dict[str, Any]:
        return {
            "features": [[list(k), f.dump()] for k, f in self.features.items()],
            "xx": {c: [[i, j, v] for (i, j), v in xx.items()] for c, xx in self.xx.items()},
            "xy": {kind: [[c, v] for c, v in vec.items()] for kind, vec in self.xy.items()},
            "yy": self.yy,
            "rows": self.nrows,
        }

    @classmethod
    def load(cls, d: Mapping[str, Any]) -> _Model:
        if not isinstance(d.get("xx"), Mapping):
            # a cache entry from before the statistics were kept per noise class: the
            # store treats it as unreadable and derives from the log
            raise ValueError("version-2 state without per-class statistics")
        m = cls()
        feats = [((str(k[0]), str(k[1])), _Feature.load(f)) for k, f in d["features"]]
        m.keys = [None] * (1 + len(feats))
        for key, f in feats:
            m.features[key] = f
            m.keys[f.col] = key
        m.xx = {str(c): {(int(i), int(j)): int(v) for i, j, v in xx} for c, xx in d["xx"].items()}
        m.xy = {kind: {int(c): int(v) for c, v in vec} for kind, vec in d["xy"].items()}
        m.yy = {str(c): int(v) for c, v in d["yy"].items()}
        m.nrows = {str(c): int(v) for c, v in d["rows"].items()}
        return m


#: What a signal's :meth:`DerivedStateV2.apply` returns inside ``fold()`` (never handed out).
_QUIET: Final = Preference(
    id="",
    preference_type="",
    pattern="",
    polarity="positive",
    signal_strength=0.0,
    confidence="low",
    sources=[],
    accept_count=0,
    reject_count=0,
    explicit_tags=[],
    last_seen="",
    decay_at="",
    scope="global",
    reversal_signals=0,
    reversal_first_seen=None,
    polarity_status="stable",
    shadow_of=None,
    derivation_version="",
    source_event_count=0,
    last_derived_event_seq=0,
)


class DerivedStateV2(DerivedState):
    """Version 2 state: per-bucket models; records are materialised lazily from the fit."""

    records_per_event = False
    #: The bucket model (statistics and fit); a later version may fit differently.
    model_class: type[_Model] = _Model

    def __init__(self, version: str) -> None:
        super().__init__(version)
        self._models: dict[str | None, _Model] = {}
        self._row: tuple[tuple[Any, ...], str | None, list[tuple[int, int]]] | None = None
        self._stale = False
        self._quiet = False  # inside fold(): apply returns no records

    # -- lazy materialisation: every read path refreshes the records first ----------------
    def materialize(self) -> None:
        """Bring the record lists up to date with the evidence (no-op when fresh)."""
        if not self._stale:
            return
        self._stale = False
        for bucket_id, model in self._models.items():
            bucket = super()._bucket_for(bucket_id)
            recs = self._records_for(bucket_id, model)
            bucket.records[:] = recs  # in place: callers may hold the list
            bucket.first.clear()
            bucket.by_id.clear()
            for r in recs:
                bucket.first.setdefault((r.preference_type, r.pattern, r.polarity), r)
                bucket.by_id.setdefault(r.id, r)

    @property
    def global_records(self) -> list[Preference]:
        self.materialize()
        return self.global_bucket.records

    def project_records(self, project_id: str) -> list[Preference] | None:
        self.materialize()
        return super().project_records(project_id)

    def buckets(self) -> Iterable[_Bucket]:
        self.materialize()
        return super().buckets()

    def export_record(self, rec: Preference) -> Preference:
        """A copy of the *current* record for ``rec``'s feature (its polarity may have
        changed since ``rec`` was returned by :meth:`apply`)."""
        self.materialize()
        bucket_id = None if rec.scope == "global" else rec.scope[len("project:") :]
        first = super()._bucket_for(bucket_id).first
        for polarity in (rec.polarity, "negative" if rec.polarity == "positive" else "positive"):
            live = first.get((rec.preference_type, rec.pattern, polarity))
            if live is not None:
                return super().export_record(live)
        return super().export_record(rec)

    def dump(self) -> bytes:
        self.materialize()
        return super().dump()

    # -- persistence hooks ---------------------------------------------------------------
    def _dump_extra(self) -> Any:
        return {
            "models": [[b, m.dump()] for b, m in self._models.items()],
            "row": None
            if self._row is None
            else [list(self._row[0]), self._row[1], [list(c) for c in self._row[2]]],
        }

    def _load_extra(self, extra: Any) -> None:
        if not extra:
            return
        self._models = {b: self.model_class.load(m) for b, m in extra["models"]}
        row = extra.get("row")
        if row is not None:
            self._row = (tuple(row[0]), row[1], [(int(c), int(x)) for c, x in row[2]])
        self._stale = True

    # -- the fold ------------------------------------------------------------------------
    def fold(self, events: Iterable[Event]) -> None:
        """Fold without building the records :meth:`apply` returns for signals."""
        self._quiet = True
        try:
            for ev in events:
                self.apply(ev)
        finally:
            self._quiet = False

    def apply(self, event: Event) -> Preference | Refinement | None:
        if not isinstance(event, SignalEvent):
            self._row = None  # a signal row never spans another event
        out = super().apply(event)
        if isinstance(event, ComparisonEvent):
            return self._apply_comparison(event)
        return out

    def _model(self, bucket_id: str | None) -> _Model:
        m = self._models.get(bucket_id)
        if m is None:
            m = self._models[bucket_id] = self.model_class()
            super()._bucket_for(bucket_id)  # keep bucket order = first evidence
        return m

    def _touch(self, f: _Feature, at: str) -> None:
        ms = ts_to_ms(at)
        f.events += 1
        if ms >= f.last_ms or not f.last_seen:
            f.last_ms = ms
            f.last_seen = at
        f.decay_at_ms = f.last_ms + int(V2_TABLE["decay_days"]) * MS_PER_DAY
        f.decay_steps = 0
        f.archived = False

    def _apply_signal(self, ev: SignalEvent) -> Preference:
        kind = ev.signal_type
        bucket_id = ev.project_id if ev.scope == "project" else None
        model = self._model(bucket_id)
        key = (ev.preference_type, ev.pattern)
        f = model.feature(key)
        y = 1 if ev.polarity == "positive" else -1
        row_key = (
            ev.artifact_id,
            ev.session_id,
            ev.at,
            kind,
            ev.polarity,
            ev.scope,
            ev.tag_text,
        )
        open_row = self._row
        if (
            ev.artifact_id is not None
            and open_row is not None
            and open_row[0] == row_key
            and open_row[1] == bucket_id
            and all(c != f.col for c, _ in open_row[2])
        ):
            row = open_row[2]
            if _is_outcome(kind) and len(row) == 1:
                # a verdict on an artifact with several listed features: part of it is the
                # user's general tendency (the intercept), identified across artifacts
                model.extend_row(kind, row, 0, y)
            model.extend_row(kind, row, f.col, y)
        else:
            # a verdict on an artifact with one listed feature is about that feature (as in
            # version 1): the intercept is not identifiable from such rows
            cols = [(f.col, 1)]
            model.add_row(kind, cols, y)
            self._row = (row_key, bucket_id, cols)
        c = f.counts.setdefault(kind, [0, 0])
        c[0 if y > 0 else 1] += 1
        if _is_reinforcing(kind):
            f.support[0 if y > 0 else 1] += 1
        if ev.tag_text:
            f.tags.add(ev.tag_text)
        self._touch(f, ev.at)
        self._stale = True
        if self._quiet:
            return _QUIET
        return self._stub(bucket_id, key, ev)

    def _apply_comparison(self, ev: ComparisonEvent) -> Preference | None:
        bucket_id = ev.project_id if ev.scope == "project" else None
        dims = ev.dimensions

        def keep(ptype: str) -> bool:
            return dims is None or any(ptype.startswith(d) for d in dims)

        chose = {(x.preference_type, x.pattern) for x in ev.chose.features}
        over = {(x.preference_type, x.pattern) for x in ev.over.features}
        plus = sorted(k for k in chose - over if keep(k[0]))
        minus = sorted(k for k in over - chose if keep(k[0]))
        if not plus and not minus:
            return None
        # A feature listed on one side only is a full contrast (x = ±1) when the other side
        # lists a different pattern of the same type; when the other side says nothing about
        # that type the feature may be present there too, just not listed (extractors list
        # the salient features only), so it counts as half a contrast (x = ±½).
        chose_types = {k[0] for k in chose}
        over_types = {k[0] for k in over}
        model = self._model(bucket_id)
        kind = "pairwise_comparison"
        cols: list[tuple[int, int]] = []
        for keys, sign, other in ((plus, 1, over_types), (minus, -1, chose_types)):
            for key in keys:
                half = 2 if key[0] in other else int(V2_TABLE["unaligned_contrast_halves"])
                if half == 0:
                    continue
                f = model.feature(key)
                cols.append((f.col, sign * half))
                c = f.counts.setdefault(kind, [0, 0])
                c[0 if sign > 0 else 1] += 1
                f.support[0 if sign > 0 else 1] += 1
                self._touch(f, ev.at)
        if not cols:
            return None
        cols.sort()
        model.add_row(kind, cols, 1, denom=2)
        self._stale = True
        return None

    def _apply_legacy(self, ev: LegacyRecordEvent) -> None:
        r = ev.record
        model = self._model(ev.bucket)
        key = (str(r["preference_type"]), str(r["pattern"]))
        f = model.feature(key)
        units = round(float(r.get("signal_strength") or 0.0) * float(V2_TABLE["legacy_units"]))
        y = 1 if r.get("polarity") == "positive" else -1
        kind = "legacy_record"
        # one unit-weight row per unit keeps the statistics integral
        for _ in range(max(units, 0) // _kind_weight(kind)):
            model.add_row(kind, [(f.col, 1)], y)
        c = f.counts.setdefault(kind, [0, 0])
        c[0 if y > 0 else 1] += 1
        strong = {"explicit_tag", "manual_refinement", "revert_after_edit"}
        if strong & set(r.get("sources") or []):
            f.support[0 if y > 0 else 1] += 1
        for t in r.get("explicit_tags") or []:
            f.tags.add(str(t))
        last_seen = str(r.get("last_seen") or ev.at)
        try:
            self._touch(f, format_ts(ts_to_ms(last_seen)))
        except ValueError:
            self._touch(f, ev.at)
        self._used_ids.add(str(r.get("id")))
        self._row = None
        self._stale = True

    # -- decay ---------------------------------------------------------------------------
    def _decay(self, now_ms: int, *, apply: bool) -> DecayResult:
        decayed = archived = 0
        archive_ms = int(V2_TABLE["archive_days"]) * MS_PER_DAY
        new_decay_at = now_ms + int(V2_TABLE["decay_days"]) * MS_PER_DAY
        for model in self._models.values():
            for f in model.features.values():
                if f.archived:
                    continue
                if now_ms - f.last_ms >= archive_ms:
                    archived += 1
                    if apply:
                        f.archived = True
                    continue
                if now_ms - f.decay_at_ms >= 0:
                    decayed += 1
                    if apply:
                        f.decay_steps += 1
                        f.decay_at_ms = new_decay_at
        if apply and (decayed or archived):
            self._stale = True
        return DecayResult(decayed=decayed, archived=archived)

    # -- records -------------------------------------------------------------------------
    def _stub(self, bucket_id: str | None, key: FeatureKey, ev: SignalEvent) -> Preference:
        """What :meth:`apply` returns for a signal without fitting: the feature's identity.
        :meth:`export_record` turns it into the current record (fitting lazily)."""
        scope = "global" if bucket_id is None else "project:" + bucket_id
        return Preference(
            id=_content_id(bucket_id, key, ev.polarity),
            preference_type=key[0],
            pattern=key[1],
            polarity=ev.polarity,
            signal_strength=0.0,
            confidence="low",
            sources=[ev.signal_type],
            accept_count=0,
            reject_count=0,
            explicit_tags=[],
            last_seen=ev.at,
            decay_at=ev.at,
            scope=scope,
            reversal_signals=0,
            reversal_first_seen=None,
            polarity_status="stable",
            shadow_of=None,
            derivation_version=self.version,
            source_event_count=0,
            last_derived_event_seq=ev.seq,
        )

    def _records_for(self, bucket_id: str | None, model: _Model) -> list[Preference]:
        if not model.features:
            return []
        fit = model.solve()
        table = V2_TABLE
        z_pos = float(table["z_positive"])
        z_neg = float(table["z_negative"])
        full = float(table["full_effect"])
        cap = float(table["provisional_cap"])
        contest = float(table["contest_min"])
        factor = float(table["decay_factor"])
        scope = "global" if bucket_id is None else "project:" + bucket_id
        out: list[Preference] = []
        for key in sorted(model.features):
            f = model.features[key]
            beta = fit.beta[f.col]
            if beta > 0:
                polarity = "positive"
            elif beta < 0:
                polarity = "negative"
            else:
                polarity = "positive" if f.support[0] >= f.support[1] else "negative"
            sd = math.sqrt(max(fit.var[f.col], 0.0))
            z = z_pos if polarity == "positive" else z_neg
            strength = min(max((abs(beta) - z * sd) / full, 0.0), 1.0)
            sign = 1 if polarity == "positive" else -1
            reinforced = f.support[0 if sign > 0 else 1] > 0
            if not reinforced:
                strength = min(strength, cap)
            strength *= factor**f.decay_steps
            cu, cr = fit.unary[f.col], fit.reinforcing[f.col]
            contested = cu * cr < 0 and min(abs(cu), abs(cr)) >= contest
            status = "archived" if f.archived else ("under_review" if contested else "stable")
            out.append(self._record(bucket_id, key, f, polarity, strength, status, scope))
        return out

    def _record(
        self,
        bucket_id: str | None,
        key: FeatureKey,
        f: _Feature,
        polarity: str,
        strength: float,
        status: str,
        scope: str | None = None,
    ) -> Preference:
        """The record of feature ``f`` with its fitted polarity, strength and status."""
        sources, pos, neg, tags, decay_at = f.summary()
        return Preference(
            id=_content_id(bucket_id, key, polarity),
            preference_type=key[0],
            pattern=key[1],
            polarity=polarity,
            signal_strength=strength,
            confidence=confidence_of(strength),
            sources=sources,
            accept_count=pos,
            reject_count=neg,
            explicit_tags=tags,
            last_seen=f.last_seen,
            decay_at=decay_at,
            scope=scope or ("global" if bucket_id is None else "project:" + bucket_id),
            reversal_signals=0,
            reversal_first_seen=None,
            polarity_status=status,
            shadow_of=None,
            derivation_version=self.version,
            source_event_count=f.events,
            last_derived_event_seq=self.last_seq,
        )

    # -- explanation ---------------------------------------------------------------------
    def evidence_for(self, record: Preference) -> dict[str, Any]:
        """Which evidence kinds contributed to ``record``, how much, and its estimate.

        ``kinds[k]``, for every kind with evidence in the bucket: events for / against the
        feature (for a comparison: the feature was on the chosen / the rejected side; 0 / 0
        for a kind that never named it), the kind's table weight and its exact
        ``contribution`` to ``estimate`` (contributions sum to the estimate).
        """
        bucket_id = None if record.scope == "global" else record.scope[len("project:") :]
        model = self._models.get(bucket_id)
        key = (record.preference_type, record.pattern)
        if model is None or key not in model.features:
            raise KeyError(f"no evidence for {record.preference_type}/{record.pattern}")
        f = model.features[key]
        fit = model.solve()
        contrib = model.kind_contributions(f.col)
        beta = fit.beta[f.col]
        sd = math.sqrt(max(fit.var[f.col], 0.0))
        sign = 1 if record.polarity == "positive" else -1
        # every kind with evidence in the bucket: a kind that never named this feature still
        # moves its estimate through the intercept, the type level and correlated features
        kinds = {
            kind: {
                "for": f.counts.get(kind, [0, 0])[0],
                "against": f.counts.get(kind, [0, 0])[1],
                "weight": _kind_weight(kind),
                "contribution": contrib.get(kind, 0.0),
            }
            for kind in _KINDS
            if kind in f.counts or kind in contrib
        }
        return {
            "derivation_version": self.version,
            "estimate": beta,
            "sd": sd,
            "lower_bound": abs(beta) - float(V2_TABLE[f"z_{record.polarity}"]) * sd,
            # the feature's type level (None: the only pattern seen of its type) — the
            # estimate is the deviation from it — and the spike-and-slab state of the feature
            "type_level": fit.level.get(record.preference_type),
            "slab_probability": fit.slab[f.col],
            "prior_precision": fit.precision[f.col],
            # residual variance per unit of weight of each noise class in this bucket, and
            # the weight each class had in the fit (its inverse)
            "noise": dict(fit.noise),
            "class_weights": dict(fit.omega),
            "unary_contribution": fit.unary[f.col],
            "reinforcing_contribution": fit.reinforcing[f.col],
            "provisional": f.support[0 if sign > 0 else 1] == 0,
            "decay_steps": f.decay_steps,
            "kinds": kinds,
            "table": _plain(V2_TABLE),
        }


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


register_version(VERSION, DerivedStateV2)
