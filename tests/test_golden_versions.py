"""Golden outputs pinning every registered derivation version (docs/architecture.md,
"Derivation versions").

A fixed, seeded history (plain ``random.Random``, an injected :class:`ManualClock`) of about
3,000 mixed events for two users is driven through ``MemoryStore(root,
derivation_version=v, clock=...)`` and the public adapter: unary signals of every signal
type (single- and multi-signal artifacts), pairwise comparisons, decay passes, reversal
streaks (enough for version 1's reversal ladder and its shadow records), global and project
scopes, a prototype import (legacy records), two restarts that resume from the derivation
cache, and a project that ignores global memory. For each version the derived output — every
record (``list_preferences`` → ``to_dict()``), the refinement log, ``retrieve_for_injection``
(records and diagnostics) and ``build_prompt_block`` for several contexts, plus retrievals and
decay results taken along the way — must equal ``tests/fixtures/golden/v<version>.json.gz``
byte for byte (canonical JSON: sorted keys, compact separators, floats in ``repr``
precision; the file is gzip with ``mtime=0``). A registered version without a golden file
fails.

The same log is also derived by a fresh store with no cache (cold, from an export imported
into a new root) and by a fresh store on the original root (warm disk cache); both must
equal what the store that derived incrementally returned.

A golden file is the definition of its version's output. **Regenerating the file of a
released version is forbidden**: a change in a version's output is a new derivation version
(docs/architecture.md, "Derivation versions"), registered beside the old one, with its own
golden file. Only a version that has never been released may have its file rewritten. The
history generator below is part of every golden file: changing it would invalidate all of
them, so leave it alone (a new scenario belongs in a new test).

Write the golden file of a new version (existing files are never overwritten unless
``--force`` is given, which is only for a version not yet released)::

    .venv/bin/python -m tests.test_golden_versions --write            # every missing file
    .venv/bin/python -m tests.test_golden_versions --write --version 3

``--check`` compares every version and prints the time each one took.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import json
import os
import platform
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

import msgspec
import pytest

from creative_memory import MemoryStore, adapter, build_prompt_block
from creative_memory.engine.constants import SIGNAL_WEIGHTS, TAG_POLARITY
from creative_memory.engine.derivation.registry import known_versions
from creative_memory.engine.events import SignalEvent
from creative_memory.engine.timeutil import MS_PER_DAY, format_ts
from tests.conftest import FIXTURES, ManualClock

GOLDEN_DIR = FIXTURES / "golden"
GOLDEN_FORMAT = 1

# -- the history (frozen: see the module docstring) ------------------------------------------
SEED = 20261203
START = "2025-03-01T09:00:00.000Z"
ACTIONS = 1650  # host actions; about 3,000 stored events in all
PHASES = 4
CHECKPOINT_EVERY = 150  # actions between retrievals recorded along the way
RESTART_AT = (500, 1000)  # actions after which the store is closed and reopened
USERS = ("ana", "ben")
USER_SHARE = 0.55  # share of the actions that are ana's
PROJECTS: Mapping[str, Sequence[str | None]] = {
    "ana": (None, None, None, "proj_a", "proj_b"),
    "ben": (None, None, "proj_a", "proj_c"),
}
VOCABULARY: Mapping[str, Sequence[str]] = {
    "layout": ("airy_spacing", "dense_grid", "single_column", "wide_grid", "asymmetric"),
    "color": ("neon_palette", "muted_earth", "monochrome", "pastel", "high_contrast"),
    "typography": ("serif_headings", "geometric_sans", "mono_labels", "condensed"),
    "motion": ("subtle_fade", "bouncy_springs", "parallax"),
    "mood": ("playful", "calm", "brutalist", "luxurious_editorial_with_generous_whitespace"),
}
POSITIVE_TAGS = tuple(t for t, p in TAG_POLARITY.items() if p == "positive")
NEGATIVE_TAGS = tuple(t for t, p in TAG_POLARITY.items() if p == "negative")
CONTEXTS: Sequence[Mapping[str, Any] | None] = (
    None,
    {"project_id": "proj_a"},
    {"project_id": "proj_b"},
    {"project_id": "proj_c"},
    {"project_id": "proj_legacy"},
    {"project_id": "proj_a", "preference_types": ["layout", "color"]},
    {"preference_types": ["typo", "mood"]},
)

Feat = tuple[str, str]  # (preference_type, pattern)


def prototype_document(user: str, at_ms: int) -> dict[str, Any]:
    """A small prototype-era ``preferences.json`` (docs/storage.md, "Prototype import") whose
    records were last seen shortly before ``at_ms``: an archived original beside the record
    that replaced it, an under-review record with its live shadow, plain positives and
    negatives, a project bucket and one refinement-log entry."""

    def ts(days_before: float) -> str:
        return format_ts(at_ms - int(days_before * MS_PER_DAY))

    def rec(
        rid: str,
        ptype: str,
        pattern: str,
        polarity: str,
        strength: float,
        confidence: str,
        *,
        seen: float,
        scope: str = "global",
        status: str = "stable",
        shadow_of: str | None = None,
        reversals: int = 0,
        sources: Sequence[str] = ("explicit_tag",),
        tags: Sequence[str] = (),
    ) -> dict[str, Any]:
        positive = polarity == "positive"
        return {
            "id": rid,
            "preference_type": ptype,
            "pattern": pattern,
            "polarity": polarity,
            "signal_strength": strength,
            "confidence": confidence,
            "sources": list(sources),
            "accept_count": 4 if positive else 0,
            "reject_count": 0 if positive else 4,
            "explicit_tags": list(tags),
            "last_seen": ts(seen),
            "decay_at": ts(seen - 90),
            "scope": scope,
            "reversal_signals": reversals,
            "reversal_first_seen": ts(seen + 1) if reversals else None,
            "polarity_status": status,
            "shadow_of": shadow_of,
        }

    p = f"pref_{user[:2]}"
    # fmt: off
    return {
        "schema_version": "1.0",
        "user_id": user,
        "memory_enabled": True,
        "global_preferences": [
            rec(f"{p}0001", "layout", "airy_spacing", "positive", 0.0, "low", seen=9,
                status="archived", reversals=4, tags=["love this"]),
            rec(f"{p}0002", "layout", "airy_spacing", "negative", 0.45, "medium", seen=8,
                tags=["too minimal"]),
            rec(f"{p}0003", "color", "neon_palette", "negative", 0.75, "high", seen=5,
                tags=["too noisy"]),
            rec(f"{p}0004", "typography", "serif_headings", "positive", 0.6, "medium", seen=12,
                sources=["manual_refinement", "thumbs_up"]),
            rec(f"{p}0005", "motion", "parallax", "positive", 0.3, "low", seen=3,
                status="under_review", reversals=4, sources=["thumbs_up"]),
            rec(f"{p}0006", "motion", "parallax", "negative", 0.15, "low", seen=2,
                shadow_of=f"{p}0005", sources=["thumbs_down"]),
            rec(f"{p}0007", "mood", "calm", "positive", 1.0, "high", seen=20,
                tags=["keep this style", "love this"]),
        ],
        "project_overrides": {
            "proj_legacy": [
                rec(f"{p}0101", "color", "neon_palette", "positive", 0.5, "medium", seen=4,
                    scope="project:proj_legacy", tags=["save this direction"]),
                rec(f"{p}0102", "layout", "dense_grid", "negative", 0.4, "medium", seen=6,
                    scope="project:proj_legacy", sources=["single_rejection"]),
            ],
        },
        "refinement_log": [
            {
                "id": f"ref_{user[:2]}0001",
                "artifact_id": "legacy-art",
                "project_id": "proj_legacy",
                "timestamp": ts(7),
                "diff": {"spacing": ["12px", "24px"]},
            }
        ],
    }
    # fmt: on


class History:
    """Drives the seeded history through a store (one timeline for both users)."""

    def __init__(self, root: Path, version: str, tmp: Path) -> None:
        self.root = root
        self.version = version
        self.tmp = tmp
        self.rng = random.Random(SEED)
        self.clock = ManualClock(START)
        self.store = MemoryStore(root, derivation_version=version, clock=self.clock)
        self.artifacts = 0
        self.features: list[Feat] = [(t, p) for t, ps in VOCABULARY.items() for p in ps]
        # each user's hidden taste per feature: +1 liked, -1 disliked, 0 neutral
        self.taste: dict[str, dict[Feat, int]] = {
            u: {f: self.rng.choice((1, -1, 0, 0, 0)) for f in self.features} for u in USERS
        }
        self.active: dict[str, list[Feat]] = {u: list(self.features) for u in USERS}
        self.timeline: dict[str, list[dict[str, Any]]] = {u: [] for u in USERS}
        self.next_decay = self.clock.ms + 21 * MS_PER_DAY

    # -- small helpers -------------------------------------------------------------------
    def now(self) -> str:
        return format_ts(self.clock.ms)

    def tick(self) -> None:
        self.clock.ms += self.rng.randint(5, 600) * 60_000

    def event_time(self) -> str:
        """The host's timestamp: usually now, sometimes late or in another notation."""
        r = self.rng.random()
        if r < 0.05:  # an event reported three hours late (out of order)
            return format_ts(self.clock.ms - 3 * 3_600_000)
        if r < 0.08:  # the same instant, to the second, with a UTC offset
            return format_ts(self.clock.ms + 2 * 3_600_000)[:-5] + "+02:00"
        if r < 0.10:  # seconds precision, "Z"
            return format_ts(self.clock.ms // 1000 * 1000)[:-5] + "Z"
        return self.now()

    def artifact(self, user: str, k_max: int = 3) -> list[Feat]:
        types = self.rng.sample(list(VOCABULARY), self.rng.randint(1, k_max))
        out: list[Feat] = []
        for t in types:
            pool = [f for f in self.active[user] if f[0] == t]
            if pool:
                out.append(self.rng.choice(pool))
        return out or [self.rng.choice(self.active[user])]

    def utility(self, user: str, feats: Sequence[Feat]) -> float:
        return sum(self.taste[user][f] for f in feats) + (self.rng.random() - 0.5) * 1.6

    @staticmethod
    def meta(feats: Sequence[Feat]) -> dict[str, Any]:
        return {"signals": [{"preference_type": t, "pattern": p} for t, p in feats]}

    def base(self, user: str, project: str | None) -> dict[str, Any]:
        self.artifacts += 1
        return {
            "user_id": user,
            "artifact_id": f"{user}-a{self.artifacts}",
            "session_id": f"{user}-s{self.artifacts // 25}",
            "project_id": project,
            "timestamp": self.event_time(),
        }

    # -- actions -------------------------------------------------------------------------
    def unary(self, user: str, project: str | None) -> None:
        feats = self.artifact(user)
        liked = self.utility(user, feats) > 0
        ev = {**self.base(user, project), "artifact_meta": self.meta(feats)}
        r = self.rng.random()
        if liked:
            if r < 0.40:
                adapter.on_generation_accepted(self.store, ev, records=False)
            elif r < 0.65:
                ev["rating"] = "up"
                adapter.on_thumbs_rated(self.store, ev, records=False)
            elif r < 0.85:
                if self.rng.random() < 0.5:
                    ev["diff"] = {"field": feats[0][0], "to": feats[0][1]}
                adapter.on_artifact_edited_and_saved(self.store, ev, records=False)
            else:
                adapter.on_revert_after_edit(self.store, ev, records=False)
        elif r < 0.55:
            ev["rating"] = "down"
            adapter.on_thumbs_rated(self.store, ev, records=False)
        else:
            adapter.on_generation_abandoned(self.store, ev, records=False)

    def tag(
        self,
        user: str,
        project: str | None,
        feats: Sequence[Feat] | None = None,
        polarity: str | None = None,
    ) -> None:
        feats = list(feats) if feats is not None else self.artifact(user, 2)
        if polarity is None:
            polarity = "positive" if self.utility(user, feats) > 0 else "negative"
        text = self.rng.choice(POSITIVE_TAGS if polarity == "positive" else NEGATIVE_TAGS)
        if self.rng.random() < 0.2:  # hosts send tags in any case, with stray whitespace
            text = f"  {text.upper()} "
        ev = {**self.base(user, project), "artifact_meta": self.meta(feats), "tag_text": text}
        adapter.on_explicit_tag_applied(self.store, ev, records=False)

    def direct(self, user: str, project: str | None) -> None:
        """Classified signals straight into ``ingest_signals`` (every signal type, including
        ``single_rejection``, which no adapter handler emits)."""
        signals = []
        art = self.base(user, project)
        for feat in self.artifact(user, 2):
            signal_type = self.rng.choice(list(SIGNAL_WEIGHTS))
            polarity = "positive" if SIGNAL_WEIGHTS[signal_type] > 0 else "negative"
            if self.rng.random() < 0.05:  # a host that sends the opposite polarity
                polarity = "negative" if polarity == "positive" else "positive"
            signals.append(
                {
                    "signal_type": signal_type,
                    "preference_type": feat[0],
                    "pattern": feat[1],
                    "polarity": polarity,
                    "tag_text": self.rng.choice(
                        POSITIVE_TAGS if polarity == "positive" else NEGATIVE_TAGS
                    )
                    if signal_type == "explicit_tag" and self.rng.random() < 0.7
                    else None,
                    "scope": "project" if project else "global",
                    "project_id": project,
                    "artifact_id": art["artifact_id"],
                    "session_id": art["session_id"],
                    # a missing timestamp means "now" (the store's clock)
                    "timestamp": None if self.rng.random() < 0.1 else art["timestamp"],
                }
            )
        self.store.ingest_signals(user, signals, records=False)

    def pairwise(self, user: str, project: str | None) -> None:
        a, b = self.artifact(user), self.artifact(user)
        if self.utility(user, a) < self.utility(user, b):
            a, b = b, a
        ev: dict[str, Any] = {
            **self.base(user, project),
            "chose": {"artifact_id": f"{user}-c{self.artifacts}a", "artifact_meta": self.meta(a)},
            "over": {"artifact_id": f"{user}-c{self.artifacts}b", "artifact_meta": self.meta(b)},
        }
        if self.rng.random() < 0.15:
            ev["dimensions"] = [self.rng.choice(list(VOCABULARY))[:4]]
        adapter.on_pairwise_comparison(self.store, ev)

    def reversal(self, user: str, project: str | None) -> None:
        """The user changes their mind about one feature: a streak of opposite tags (version 1:
        the reversal ladder, a shadow record, its promotion)."""
        held = [f for f in self.active[user] if self.taste[user][f] != 0]
        if not held:
            return
        feat = self.rng.choice(held)
        self.taste[user][feat] = -self.taste[user][feat]
        polarity = "positive" if self.taste[user][feat] > 0 else "negative"
        for _ in range(self.rng.randint(5, 8)):
            self.tick()
            self.tag(user, project, [feat], polarity)

    def decay(self, user: str, explicit: bool) -> None:
        at = self.now()
        result = self.store.run_decay(user, at if explicit else None)
        self.timeline[user].append({"decay": at, "result": result.to_dict()})

    def decay_all(self, explicit: bool = False) -> None:
        for u in USERS:
            self.decay(u, explicit)

    def checkpoint(self) -> None:
        for u in USERS:
            result = self.store.retrieve_for_injection(u)
            self.timeline[u].append({"checkpoint": self.now(), "retrieval": result.to_dict()})

    def restart(self) -> None:
        self.store.close()
        self.store = MemoryStore(self.root, derivation_version=self.version, clock=self.clock)

    def import_legacy(self, user: str) -> None:
        path = self.tmp / f"{user}-preferences.json"
        path.write_text(json.dumps(prototype_document(user, self.clock.ms)))
        n = self.store.import_prototype(user, path)
        self.timeline[user].append({"import_prototype": self.now(), "imported": n})

    def new_phase(self, phase: int) -> None:
        """A break of 40–120 days (200 before the last phase; three decay passes in it), a
        few changes of taste, a new pool of active patterns (the others go quiet and
        eventually archive)."""
        breaks = 200 if phase == PHASES - 1 else self.rng.randint(40, 120)
        for _ in range(3):
            self.clock.ms += breaks * MS_PER_DAY // 3
            self.decay_all(explicit=True)
        for u in USERS:
            for f in self.rng.sample(self.features, 3):
                self.taste[u][f] = self.rng.choice((1, -1, 0))
            keep = self.rng.sample(self.features, len(self.features) * 2 // 3)
            self.active[u] = [f for f in self.features if f in keep]
        self.next_decay = self.clock.ms + 21 * MS_PER_DAY
        if phase == PHASES - 1:  # after the long break old favourites come back (reactivation)
            for u in USERS:
                for f in self.features[::4]:
                    self.tick()
                    self.tag(u, None, [f], "positive" if self.taste[u][f] >= 0 else "negative")

    def run(self) -> None:
        self.import_legacy("ana")
        for i in range(ACTIONS):
            if i and i * PHASES // ACTIONS != (i - 1) * PHASES // ACTIONS:
                self.new_phase(i * PHASES // ACTIONS)
            if i == ACTIONS * 2 // 5:
                self.import_legacy("ben")
            if i == ACTIONS * 3 // 4:
                self.store.set_project_disabled("ben", "proj_c", True)
            self.tick()
            if self.clock.ms >= self.next_decay:
                self.decay_all(explicit=False)
                self.next_decay += 21 * MS_PER_DAY
            user = USERS[0] if self.rng.random() < USER_SHARE else USERS[1]
            project = self.rng.choice(PROJECTS[user])
            r = self.rng.random()
            if r < 0.50:
                self.unary(user, project)
            elif r < 0.62:
                self.tag(user, project)
            elif r < 0.74:
                self.direct(user, project)
            elif r < 0.97:
                self.pairwise(user, project)
            else:
                self.reversal(user, project)
            if (i + 1) % CHECKPOINT_EVERY == 0:
                self.checkpoint()
            if i + 1 in RESTART_AT:
                self.restart()
        self.checkpoint()


# -- the derived output ----------------------------------------------------------------------
def final_output(store: MemoryStore) -> dict[str, Any]:
    """What the golden file pins at the end of the history, per user."""
    out: dict[str, Any] = {}
    for u in USERS:
        retrievals = []
        for ctx in CONTEXTS:
            result = store.retrieve_for_injection(u, ctx)
            project = None if ctx is None else ctx.get("project_id")
            retrievals.append(
                {
                    "context": ctx,
                    "result": result.to_dict(),
                    "prompt_block": build_prompt_block(result, project),
                }
            )
        out[u] = {
            "records": [r.to_dict() for r in store.list_preferences(u)],
            "refinement_log": [r.to_dict() for r in store.refinement_log(u)],
            "retrievals": retrievals,
        }
    return out


def history_summary(store: MemoryStore) -> dict[str, Any]:
    """Counts and a digest of the generated log: tells a changed history (the generator,
    the adapter, the event format) from a changed derivation when a comparison fails."""
    out: dict[str, Any] = {}
    for u in USERS:
        events = store.events(u)
        kinds = Counter(type(e).__name__ for e in events)
        signals = Counter(e.signal_type for e in events if isinstance(e, SignalEvent))
        body = [{k: v for k, v in msgspec.to_builtins(e).items() if k != "h"} for e in events]
        out[u] = {
            "events": len(events),
            "by_kind": dict(sorted(kinds.items())),
            "signals_by_type": dict(sorted(signals.items())),
            "sha256": hashlib.sha256(canonical(body)).hexdigest(),
        }
    return out


def canonical(doc: Any) -> bytes:
    """Canonical JSON: sorted keys, compact, ASCII, floats as ``repr`` (round-trip exact)."""
    return json.dumps(
        doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    ).encode()


class Derived(msgspec.Struct, kw_only=True):
    golden: dict[str, Any]  # the document pinned by the golden file
    cold: dict[str, Any]  # final output of a fresh store without cache on the same log
    reopened: dict[str, Any]  # final output of a fresh store on the root (warm disk cache)
    same_log: bool  # the cold store's log equals the original's


def derive_history(version: str) -> Derived:
    # Durability is not under test here (tests/test_storage_durability.py): without fsync
    # the run does not depend on how busy the disk is.
    with (
        mock.patch.object(os, "fsync", lambda fd: None),
        tempfile.TemporaryDirectory(prefix="cm-golden-") as d,
    ):
        tmp = Path(d)
        h = History(tmp / "mem", version, tmp)
        h.run()
        final = final_output(h.store)
        doc = {
            "golden_format": GOLDEN_FORMAT,
            "derivation_version": version,
            "seed": SEED,
            "history": history_summary(h.store),
            "timeline": h.timeline,
            "final": final,
        }
        logs = {u: h.store.events(u) for u in USERS}
        for u in USERS:
            h.store.export_memory(u, tmp / f"{u}.cmem.json")
        h.store.close()
        cold = MemoryStore(tmp / "cold", derivation_version=version, clock=h.clock)
        same_log = True
        for u in USERS:
            cold.import_memory(u, tmp / f"{u}.cmem.json", mode="replace")
            same_log = same_log and cold.events(u) == logs[u]
        reopened = MemoryStore(tmp / "mem", derivation_version=version, clock=h.clock)
        return Derived(
            golden=doc,
            cold=final_output(cold),
            reopened=final_output(reopened),
            same_log=same_log,
        )


def golden_path(version: str) -> Path:
    return GOLDEN_DIR / f"v{version}.json.gz"


def read_golden(version: str) -> bytes:
    return gzip.decompress(golden_path(version).read_bytes())


def machine_fingerprint() -> str:
    """What decides the last float digits of a numpy fit: numpy's version and build, the
    processor model and its vector extensions, and a forced OpenBLAS kernel."""
    import numpy as np

    cpu = ""
    with contextlib.suppress(OSError):
        info = Path("/proc/cpuinfo").read_text()
        model = next((ln for ln in info.splitlines() if ln.startswith("model name")), "")
        flags = next((ln for ln in info.splitlines() if ln.startswith("flags")), "").split()
        cpu = model + " " + " ".join(sorted(f for f in flags if f.startswith(("avx", "fma"))))
    parts = [np.__version__, platform.machine(), cpu, os.environ.get("OPENBLAS_CORETYPE", "")]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def machine_path(version: str) -> Path:
    return GOLDEN_DIR / f"v{version}.machine"


def written_here(version: str) -> bool:
    """Whether this machine is the kind that wrote the version's golden file (then its
    floats must match exactly, whatever the version)."""
    path = machine_path(version)
    return path.is_file() and path.read_text().strip() == machine_fingerprint()


def write_golden(version: str, data: bytes) -> None:
    GOLDEN_DIR.mkdir(parents=True, exist_ok=True)
    golden_path(version).write_bytes(gzip.compress(data, compresslevel=9, mtime=0))
    machine_path(version).write_text(machine_fingerprint() + "\n")


def differences(want: Any, got: Any, path: str = "$", limit: int = 12) -> list[str]:
    """The first ``limit`` JSON paths where ``got`` differs from ``want``."""
    out: list[str] = []

    def walk(a: Any, b: Any, p: str) -> None:
        if len(out) >= limit:
            return
        if isinstance(a, dict) and isinstance(b, dict):
            for k in sorted(set(a) | set(b)):
                if k not in a or k not in b:
                    out.append(f"{p}.{k}: {'missing' if k not in b else 'unexpected'}")
                else:
                    walk(a[k], b[k], f"{p}.{k}")
        elif isinstance(a, list) and isinstance(b, list):
            if len(a) != len(b):
                out.append(f"{p}: length {len(a)} expected, got {len(b)}")
            for i, (x, y) in enumerate(zip(a, b, strict=False)):
                walk(x, y, f"{p}[{i}]")
        elif type(a) is not type(b) or a != b:
            out.append(f"{p}: expected {json.dumps(a)[:120]}, got {json.dumps(b)[:120]}")

    walk(want, got, path)
    return out


#: Versions whose arithmetic is pure Python, identical on every machine.
PURE_PYTHON = frozenset({"1"})
#: How far (relative) a float of a numpy version may move on another kind of machine.
FLOAT_NOISE = 1e-9


def float_noise_only(want: Any, got: Any, tolerance: float = 1e-12) -> bool:
    """Whether ``got`` differs from ``want`` only in the last digits of some floats."""
    if isinstance(want, dict) and isinstance(got, dict):
        return want.keys() == got.keys() and all(
            float_noise_only(want[k], got[k], tolerance) for k in want
        )
    if isinstance(want, list) and isinstance(got, list):
        return len(want) == len(got) and all(
            float_noise_only(a, b, tolerance) for a, b in zip(want, got, strict=True)
        )
    if isinstance(want, float) and isinstance(got, float):
        return abs(want - got) <= tolerance * max(abs(want), abs(got), 1e-300)
    return type(want) is type(got) and want == got


def mismatch_report(version: str, want: bytes, got: bytes) -> str:
    w, g = json.loads(want), json.loads(got)
    if w.get("history") != g.get("history"):
        cause = (
            "the generated history itself changed (generator, adapter or event format), "
            "so the golden file cannot vouch for the derivation"
        )
    elif float_noise_only(w, g):
        cause = (
            "only the last digits of some floats differ: floating-point arithmetic that is "
            "not reproducible across machines or library builds (docs/architecture.md, "
            "'Determinism'), not a change of the version's rules"
        )
    else:
        cause = (
            "same history, different derived output: a changed output is a new derivation "
            "version (docs/architecture.md, 'Derivation versions')"
        )
    lines = "\n  ".join(differences(w, g))
    return f"version {version} differs from {golden_path(version).name}: {cause}\n  {lines}"


# -- tests -----------------------------------------------------------------------------------
VERSIONS = known_versions()
#: Every version but the pure-Python ones fits through numpy/BLAS: its last float digits
#: depend on the CPU's kernels (OpenBLAS picks them per processor; numpy's SIMD ``exp``
#: too), so on a machine other than the kind that wrote the file (``v<version>.machine``,
#: a fingerprint) they are compared up to :data:`FLOAT_NOISE` relative — every other value,
#: every float of a pure-Python version, and every float on the writing kind of machine
#: exactly (docs/architecture.md, "Determinism"). A new version counts as a numpy one unless
#: it is listed in :data:`PURE_PYTHON`, so it cannot fail only on a processor its author
#: did not have.
MACHINE_FLOATS = frozenset(VERSIONS) - PURE_PYTHON


def test_every_registered_version_has_a_golden_file() -> None:
    missing = [v for v in VERSIONS if not golden_path(v).is_file()]
    assert not missing, (
        f"no golden file for derivation version(s) {', '.join(missing)}: write it with "
        "`.venv/bin/python -m tests.test_golden_versions --write` and check it in"
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_version_output_matches_its_golden_file(version: str) -> None:
    assert golden_path(version).is_file(), f"no golden file for version {version}"
    derived = derive_history(version)
    problems = []
    if not derived.same_log:
        problems.append("the cold store's log differs from the original log")
    final = derived.golden["final"]
    if derived.cold != final:
        problems.append(
            "cold derivation (fresh store, no cache) differs from the incremental one:\n  "
            + "\n  ".join(differences(final, derived.cold))
        )
    if derived.reopened != final:
        problems.append(
            "a fresh store on the same root (warm disk cache) differs from the incremental "
            "one:\n  " + "\n  ".join(differences(final, derived.reopened))
        )
    want, got = read_golden(version), canonical(derived.golden)
    if got != want and not (
        version in MACHINE_FLOATS
        and not written_here(version)
        and json.loads(want).get("history") == json.loads(got).get("history")
        and float_noise_only(json.loads(want), json.loads(got), FLOAT_NOISE)
    ):
        problems.append(mismatch_report(version, want, got))
    assert not problems, "\n".join(problems)


# -- regeneration entry point ----------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.test_golden_versions",
        description="Write or check the golden files of the registered derivation versions.",
    )
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="write missing golden files")
    mode.add_argument("--check", action="store_true", help="compare and print timings")
    parser.add_argument("--version", action="append", help="only this version (repeatable)")
    parser.add_argument(
        "--force",
        action="store_true",
        help="overwrite existing files (only for a version that was never released)",
    )
    opts = parser.parse_args(argv)
    versions = opts.version or list(VERSIONS)
    unknown = [v for v in versions if v not in VERSIONS]
    if unknown:
        parser.error(f"unregistered version(s): {', '.join(unknown)}")
    status = 0
    for v in versions:
        t = time.perf_counter()
        derived = derive_history(v)
        data = canonical(derived.golden)
        took = time.perf_counter() - t
        consistent = derived.same_log and derived.cold == derived.golden["final"]
        consistent = consistent and derived.reopened == derived.golden["final"]
        if not consistent:
            print(f"version {v}: cold, reopened and incremental derivations disagree")
            status = 1
            continue
        if opts.write:
            if golden_path(v).exists() and not opts.force:
                print(f"version {v}: {golden_path(v)} exists, left alone ({took:.1f} s)")
                continue
            write_golden(v, data)
            print(f"version {v}: wrote {golden_path(v)} ({len(data):,} bytes JSON, {took:.1f} s)")
        elif not golden_path(v).is_file():
            print(f"version {v}: no golden file ({took:.1f} s)")
            status = 1
        elif read_golden(v) != data:
            print(mismatch_report(v, read_golden(v), data) + f"\n({took:.1f} s)")
            status = 1
        else:
            print(f"version {v}: matches {golden_path(v).name} ({took:.1f} s)")
    return status


if __name__ == "__main__":
    sys.exit(main())
