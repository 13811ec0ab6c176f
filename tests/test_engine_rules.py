"""Pins the derivation rules of engine.md (§0–§6, §10, §11 examples A–C, §12 quirks).

Every expected value is taken from engine.md, not from the implementation. Retrieval
stages, diagnostics and prompt text are pinned in ``test_retrieval_stages.py``; malformed
input in ``test_validation.py``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any, get_args

import pytest

import creative_memory as cm
from creative_memory import MemoryStore, Preference
from creative_memory.engine.constants import SignalType
from creative_memory.engine.derivation.base import clamp, confidence_of, drop_rung
from creative_memory.engine.timeutil import (
    MAX_INSTANT_MS,
    MS_PER_DAY,
    fixed2,
    format_ts,
    parse_ts,
    try_parse_ts,
    u16len,
)
from tests.conftest import ManualClock, tag

U = "alice"
T0 = "2024-01-01T00:00:00.000Z"

ET, RAE, MR, RA, TU, TD, SR, AB = get_args(SignalType)  # in the weights' order


def at(days: float, base: str = T0) -> str:
    """``base`` plus ``days`` (may be fractional), normalised."""
    return format_ts(parse_ts(base) + round(days * MS_PER_DAY))


def put(
    store: MemoryStore,
    pattern: str,
    ptype: str = "layout",
    polarity: str = "positive",
    *,
    n: int = 1,
    user: str = U,
    **kw: Any,
) -> Preference:
    """Ingest ``n`` identical signals; return the last result."""
    kw.setdefault("ts", T0)
    out = None
    for _ in range(n):
        out = store.ingest_signal(user, tag(pattern, ptype, polarity, **kw))
    assert out is not None
    return out


def records(store: MemoryStore, user: str = U, **kw: Any) -> dict[str, Preference]:
    return {r.id: r for r in store.list_preferences(user, **kw)}


def get(store: MemoryStore, rid: str, user: str = U) -> Preference:
    return records(store, user)[rid]


def shadows_of(store: MemoryStore, rid: str) -> list[Preference]:
    return [r for r in store.list_preferences(U) if r.shadow_of == rid]


def log_path(store: MemoryStore, user: str = U) -> Path:
    return Path(store.root) / user / "events.jsonl"


def snapshot(store: MemoryStore, user: str = U) -> dict[str, bytes]:
    d = Path(store.root) / user
    if not d.exists():
        return {}
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------------------------------
# §1 constants and helpers


def test_exported_constants() -> None:
    assert (cm.NORMALIZER, cm.DECAY_DAYS, cm.ARCHIVE_DAYS) == (2.0, 90, 180)
    assert (cm.INJECTION_THRESHOLD, cm.TOKEN_BUDGET, cm.MAX_INJECTION_COUNT) == (0.40, 200, 20)
    assert cm.NEGATIVE_PRIORITY_MULTIPLIER == 1.2
    assert cm.NEGATIVE_BUDGET_RATIO == 0.50
    assert (cm.MIN_NEG_FLOOR, cm.MAX_PER_CATEGORY, cm.CHARS_PER_TOKEN) == (2, 3, 4)
    assert cm.SCHEMA_VERSION == "1.0"
    assert dict(cm.SIGNAL_WEIGHTS) == {
        ET: 0.30,
        RAE: 0.25,
        MR: 0.20,
        RA: 0.15,
        TU: 0.10,
        TD: -0.10,
        SR: -0.10,
        AB: -0.02,
    }
    assert dict(cm.TAG_POLARITY) == {
        "save this direction": "positive",
        "love this": "positive",
        "keep this style": "positive",
        "too noisy": "negative",
        "too crowded": "negative",
        "not this": "negative",
        "wrong direction": "negative",
        "too minimal": "negative",
        "too heavy": "negative",
    }
    with pytest.raises(TypeError):
        cm.TAG_POLARITY["meh"] = "positive"  # type: ignore[index]


@pytest.mark.parametrize(
    ("s", "label"),
    [
        (0.0, "low"),
        (0.15, "low"),
        (math.nextafter(0.35, 0.0), "low"),
        (0.35, "medium"),
        (0.35000000000000003, "medium"),
        (0.5, "medium"),
        (0.65, "medium"),
        (0.6500000000000001, "high"),
        (math.nextafter(0.65, 1.0), "high"),
        (1.0, "high"),
    ],
)
def test_confidence_of_direct(s: float, label: str) -> None:
    assert confidence_of(s) == label


def test_drop_rung_and_clamp() -> None:
    assert [drop_rung(c) for c in ("high", "medium", "low")] == ["medium", "low", "low"]
    assert clamp(1.05, 0, 1) == 1 and clamp(-0.1, 0, 1) == 0 and clamp(0.3, 0, 1) == 0.3


@pytest.mark.parametrize(
    ("steps", "strength", "label"),
    [
        ([ET], 0.15, "low"),
        ([ET, ET], 0.3, "low"),
        ([ET, ET, TU], 0.35, "medium"),  # exactly 0.35 is medium
        ([ET, RAE, RA], 0.35000000000000003, "medium"),
        ([ET, ET, ET], 0.44999999999999996, "medium"),
        ([ET, ET, ET, ET, TU], 0.65, "medium"),  # exactly 0.65 is medium
        ([ET, ET, RAE, RAE, TU, TU], 0.6500000000000001, "high"),  # one ulp above is high
        ([ET, ET, ET, ET, ET], 0.75, "high"),
    ],
)
def test_confidence_rungs_through_signals(
    store: MemoryStore, steps: list[str], strength: float, label: str
) -> None:
    r = None
    for st in steps:
        r = put(store, "p", signal_type=st)
    assert r is not None
    assert r.signal_strength == strength
    assert r.confidence == label
    assert get(store, r.id).confidence == label


def test_fixed2_half_up() -> None:
    assert fixed2(0.125) == "0.13"
    assert fixed2(0.625) == "0.63"
    assert fixed2(0.375) == "0.38"
    assert fixed2(0.44999999999999996) == "0.45"
    assert fixed2(0.115) == "0.12"  # 0.115 is above the tie in binary
    assert fixed2(0.145) == "0.14"  # 0.145 is below the tie in binary
    assert fixed2(0.0) == "0.00"
    assert fixed2(1.0) == "1.00"


def test_u16len() -> None:
    assert u16len("") == 0
    assert u16len("abc") == 3
    assert u16len("é") == 1
    assert u16len("·") == 1
    assert u16len("😀") == 2
    assert u16len("a😀b") == 4
    assert u16len("👍🏽") == 4


def test_format_ts() -> None:
    assert format_ts(0) == "1970-01-01T00:00:00.000Z"
    assert format_ts(1704067200123) == "2024-01-01T00:00:00.123Z"
    # JS toISOString around year 0 and past 9999 (expanded years, a sign and six digits)
    year0 = -62_167_219_200_000  # new Date("0000-01-01T00:00:00Z").getTime()
    assert format_ts(year0) == "0000-01-01T00:00:00.000Z"
    assert format_ts(year0 + 59 * MS_PER_DAY) == "0000-02-29T00:00:00.000Z"  # 0 is a leap year
    assert format_ts(year0 - 1) == "-000001-12-31T23:59:59.999Z"
    assert format_ts(year0 - 366 * MS_PER_DAY) == "-000002-12-31T00:00:00.000Z"
    assert format_ts(year0 - 146_097 * MS_PER_DAY) == "-000400-01-01T00:00:00.000Z"  # 400 years
    assert format_ts(253_402_300_800_000) == "+010000-01-01T00:00:00.000Z"
    assert format_ts(MAX_INSTANT_MS) == "+275760-09-13T00:00:00.000Z"
    assert format_ts(-MAX_INSTANT_MS) == "-271821-04-20T00:00:00.000Z"


def test_every_instant_format_ts_writes_reads_back() -> None:
    """What the store writes (normalised timestamps) it can read: every instant an
    ECMAScript Date holds, through year 0 and the expanded years; datetime agrees on the
    dates it knows (years 1–9999)."""
    import random

    rng = random.Random(19)
    instants = [rng.randrange(-MAX_INSTANT_MS, MAX_INSTANT_MS + 1) for _ in range(3000)]
    instants += [rng.randrange(-62_300_000_000_000, -62_000_000_000_000) for _ in range(3000)]
    instants += [MAX_INSTANT_MS, -MAX_INSTANT_MS, 0, -1]
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    for ms in instants:
        text = format_ts(ms)
        assert try_parse_ts(text) == ms, text
        if -62_135_596_800_000 <= ms < 253_402_300_800_000:  # 0001-01-01 … 9999-12-31
            as_dt = epoch + timedelta(milliseconds=ms)
            assert text == f"{as_dt.year:04d}" + as_dt.strftime("-%m-%dT%H:%M:%S.") + (
                f"{ms % 1000:03d}Z"
            )
    assert try_parse_ts("+275760-09-13T00:00:00.001Z") is None  # beyond a Date
    assert try_parse_ts("-000000-01-01") is None  # ECMAScript: no minus zero year
    assert try_parse_ts("+002024-01-01") == try_parse_ts("2024-01-01")


@pytest.mark.parametrize(
    "raw",
    ["２０２４-01-01T00:00:00Z", "٢٠٢٤-٠١-٠١", "2024-01-01T1０:00:00Z", "2024-01-01T10:00:00.٣Z"],
)
def test_timestamps_are_written_in_ascii_digits(store: MemoryStore, raw: str) -> None:
    """Digits of another script (which ``\\d`` and ``int()`` take) are not a timestamp's."""
    assert try_parse_ts(raw) is None
    with pytest.raises(cm.ValidationError) as err:
        put(store, "p", ts=raw)
    assert err.value.field == "timestamp"
    assert store.events(U) == []


def test_a_timestamp_past_9999_in_utc_is_stored_and_read_back(tmp_path: Path) -> None:
    """An offset that moves a valid timestamp past 9999 (or before year 0) in UTC gives an
    expanded year, which every later read of the log takes (it used to make the log
    unreadable)."""
    first = MemoryStore(tmp_path)
    late = put(first, "late", ts="9999-12-31T23:59:59-01:00")
    early = put(first, "early", ts="0000-01-01T00:00:00+01:00")
    assert late.last_seen == "+010000-01-01T00:59:59.000Z"
    assert late.decay_at == "+010000-03-31T00:59:59.000Z"
    assert early.last_seen == "-000001-12-31T23:00:00.000Z"
    assert put(first, "zero", ts="0000-01-01").last_seen == "0000-01-01T00:00:00.000Z"
    first.close()
    again = MemoryStore(tmp_path)
    seen = {r.pattern: r.last_seen for r in again.list_preferences(U)}
    assert seen == {
        "late": "+010000-01-01T00:59:59.000Z",
        "early": "-000001-12-31T23:00:00.000Z",
        "zero": "0000-01-01T00:00:00.000Z",
    }
    again.retrieve_for_injection(U)
    again.close()


# ---------------------------------------------------------------------------------------
# §1.2 signal weights, §3.1 new records, §4.3 accumulation

INCREMENTS = [
    (ET, 0.15),
    (RAE, 0.125),
    (MR, 0.1),
    (RA, 0.075),
    (TU, 0.05),
    (TD, 0.05),
    (SR, 0.05),
    (AB, 0.01),
]


@pytest.mark.parametrize(("signal_type", "inc"), INCREMENTS)
@pytest.mark.parametrize("polarity", ["positive", "negative"])
def test_new_record_increment(
    store: MemoryStore, signal_type: str, inc: float, polarity: str
) -> None:
    r = put(store, "p", polarity=polarity, signal_type=signal_type)
    assert r.signal_strength == inc
    assert r.signal_strength == abs(cm.SIGNAL_WEIGHTS[signal_type]) / 2.0
    assert r.polarity == polarity  # weight sign is never used (Q1)
    assert r.confidence == "low"
    assert r.sources == [signal_type]
    assert (r.accept_count, r.reject_count) == ((1, 0) if polarity == "positive" else (0, 1))


def test_revert_after_edit_is_exactly_0_125(store: MemoryStore) -> None:
    r = put(store, "p", signal_type=RAE)
    assert r.signal_strength == 0.125
    r = put(store, "p", signal_type=RAE)
    assert r.signal_strength == 0.25


@pytest.mark.parametrize(("signal_type", "inc"), INCREMENTS)
def test_accumulation_increment(store: MemoryStore, signal_type: str, inc: float) -> None:
    put(store, "p", signal_type=ET)
    r = put(store, "p", signal_type=signal_type)
    assert r.signal_strength == 0.15 + inc


def test_thumbs_down_positive_strengthens_positive(store: MemoryStore) -> None:
    r = put(store, "p", polarity="positive", signal_type=TD)
    assert (r.polarity, r.accept_count, r.reject_count) == ("positive", 1, 0)
    r = put(store, "p", polarity="positive", signal_type=TD)
    assert r.signal_strength == 0.1
    assert len(store.list_preferences(U)) == 1


def test_new_record_fields(store: MemoryStore) -> None:
    r = put(store, "airy", "layout_density", ts="2024-03-05T06:07:08.009Z", tag_text="love this")
    d = r.to_dict()
    rid = d.pop("id")
    assert re.fullmatch(r"pref_[a-z0-9]{6}", rid)
    assert isinstance(d.pop("last_derived_event_seq"), int)
    assert ["id", *list(d)][:17] == [
        "id", "preference_type", "pattern", "polarity", "signal_strength", "confidence",
        "sources", "accept_count", "reject_count", "explicit_tags", "last_seen", "decay_at",
        "scope", "reversal_signals", "reversal_first_seen", "polarity_status", "shadow_of",
    ]  # fmt: skip
    assert list(r.to_dict())[17:] == [
        "derivation_version",
        "source_event_count",
        "last_derived_event_seq",
    ]
    assert d == {
        "preference_type": "layout_density",
        "pattern": "airy",
        "polarity": "positive",
        "signal_strength": 0.15,
        "confidence": "low",
        "sources": [ET],
        "accept_count": 1,
        "reject_count": 0,
        "explicit_tags": ["love this"],
        "last_seen": "2024-03-05T06:07:08.009Z",
        "decay_at": "2024-06-03T06:07:08.009Z",
        "scope": "global",
        "reversal_signals": 0,
        "reversal_first_seen": None,
        "polarity_status": "stable",
        "shadow_of": None,
        "derivation_version": "1",
        "source_event_count": 1,
    }


def test_falsy_tag_text_not_recorded(store: MemoryStore) -> None:
    r = put(store, "p", tag_text="")
    assert r.explicit_tags == []
    r = put(store, "p", tag_text=None)
    assert r.explicit_tags == []


def test_accumulation_updates(store: MemoryStore) -> None:
    put(store, "p", signal_type=ET, tag_text="love this", ts="2024-01-01")
    put(store, "p", signal_type=TU, tag_text="keep this style", ts="2024-01-02")
    put(store, "p", signal_type=ET, tag_text="love this", ts="2024-01-03")
    r = put(store, "p", signal_type=TU, tag_text="", ts="2024-01-04T12:00:00+02:00")
    assert r.signal_strength == 0.15 + 0.05 + 0.15 + 0.05
    assert r.confidence == confidence_of(r.signal_strength)
    assert r.sources == [ET, TU]
    assert r.explicit_tags == ["love this", "keep this style"]
    assert (r.accept_count, r.reject_count) == (4, 0)
    assert r.last_seen == "2024-01-04T10:00:00.000Z"
    assert r.decay_at == "2024-04-03T10:00:00.000Z"
    assert r.source_event_count == 4
    n = put(store, "q", polarity="negative", n=3)
    assert (n.accept_count, n.reject_count) == (0, 3)


def test_tag_text_exact_string_dedupe(store: MemoryStore) -> None:
    put(store, "p", tag_text="love this")
    r = put(store, "p", tag_text="Love This")
    assert r.explicit_tags == ["love this", "Love This"]


def test_clamp_at_one(store: MemoryStore) -> None:
    r = put(store, "p", n=6)
    assert r.signal_strength == pytest.approx(0.9)
    assert r.signal_strength < 1.0
    r = put(store, "p")
    assert r.signal_strength == 1.0
    assert r.confidence == "high"
    r = put(store, "p", n=3)
    assert r.signal_strength == 1.0
    assert r.accept_count == 10


def test_timestamps_normalised_utc(store: MemoryStore, clock: ManualClock) -> None:
    cases = {
        "2024-01-01T01:00:00+01:00": "2024-01-01T00:00:00.000Z",
        "2024-01-01": "2024-01-01T00:00:00.000Z",
        "2024-01": "2024-01-01T00:00:00.000Z",
        "2024": "2024-01-01T00:00:00.000Z",
        "2024-01-01T10:20": "2024-01-01T10:20:00.000Z",  # no zone = UTC
        "2024-01-01T10:20:30": "2024-01-01T10:20:30.000Z",
        "2024-01-01T10:20:30.1239Z": "2024-01-01T10:20:30.123Z",  # truncated, not rounded
        "2024-01-01T10:20:30.5Z": "2024-01-01T10:20:30.500Z",
        "2024-01-01T24:00:00Z": "2024-01-02T00:00:00.000Z",
        "2024-02-29T00:00:00-05:30": "2024-02-29T05:30:00.000Z",
    }
    for i, (raw, norm) in enumerate(cases.items()):
        r = put(store, f"p{i}", ts=raw)
        assert r.last_seen == norm, raw
        assert r.decay_at == format_ts(parse_ts(norm) + 90 * MS_PER_DAY)
    clock.set("2025-06-07T08:09:10.011Z")
    for i, missing in enumerate([None, ""]):
        got = store.ingest_signal(U, tag(f"now{i}", ts=missing))  # type: ignore[arg-type]
        assert got is not None
        assert got.last_seen == "2025-06-07T08:09:10.011Z"
    sig = tag("now2")
    del sig["timestamp"]
    got = store.ingest_signal(U, sig)
    assert got is not None and got.last_seen == "2025-06-07T08:09:10.011Z"


def test_add_days_is_exact_utc(store: MemoryStore) -> None:
    # §0.2: add_days is exactly +k*86400000 ms; no DST shift (New York example of §1.4).
    r = put(store, "p", ts="2024-01-15T12:00:00.000Z")
    assert r.decay_at == "2024-04-14T12:00:00.000Z"


def test_scope_and_target_lists(store: MemoryStore) -> None:
    g = put(store, "p", scope="global", project_id="not/a/safe/id")  # project_id ignored
    assert g.scope == "global"
    a = put(store, "p", scope="project", project_id="proj_a")
    assert a.scope == "project:proj_a"
    assert a.id != g.id and a.signal_strength == 0.15  # only the target list is searched
    b = put(store, "p", scope="project", project_id="proj_b", n=2)
    assert b.scope == "project:proj_b" and b.signal_strength == 0.3
    assert [r.id for r in store.list_preferences(U, scope="global")] == [g.id]
    assert [r.id for r in store.list_preferences(U, scope="project:proj_a")] == [a.id]
    assert get(store, g.id).signal_strength == 0.15
    assert get(store, a.id).signal_strength == 0.15


def test_contradiction_matches_only_target_list(store: MemoryStore) -> None:
    g = put(store, "p", n=4)
    r = put(store, "p", polarity="negative", scope="project", project_id="x")
    assert r.polarity == "negative" and r.scope == "project:x"
    assert get(store, g.id).reversal_signals == 0


# ---------------------------------------------------------------------------------------
# §5 reversal ladder


def _four_tags(store: MemoryStore) -> Preference:
    return put(store, "airy_spacing", "layout_density", n=4)


def test_reversal_step_1_noise_guard(store: MemoryStore) -> None:
    orig = _four_tags(store)
    t1 = at(1)
    r = put(store, "airy_spacing", "layout_density", "negative", ts=t1, tag_text="not this")
    assert r.id == orig.id  # the contradicted record is returned
    assert r.polarity == "positive"
    assert (r.signal_strength, r.confidence, r.polarity_status) == (0.6, "medium", "stable")
    assert (r.reversal_signals, r.reversal_first_seen, r.last_seen) == (1, t1, t1)
    assert r.decay_at == orig.decay_at
    assert (r.sources, r.explicit_tags) == (orig.sources, orig.explicit_tags)
    assert (r.accept_count, r.reject_count) == (4, 0)
    assert len(store.list_preferences(U)) == 1  # no negative record is created


def test_reversal_step_2_keeps_label(store: MemoryStore) -> None:
    # Example B: 0.75 high, two contradictions -> 0.6000000000000001 still "high".
    orig = put(store, "p", n=5)
    assert (orig.signal_strength, orig.confidence) == (0.75, "high")
    put(store, "p", polarity="negative", ts=at(1))
    r = put(store, "p", polarity="negative", ts=at(2), signal_type=AB)
    assert r.signal_strength == 0.6000000000000001
    assert r.confidence == "high"
    assert r.reversal_signals == 2
    assert r.reversal_first_seen == at(1)  # first contradiction only
    assert r.last_seen == at(2)
    assert r.decay_at == orig.decay_at
    # step 3 drops one rung from the *label*: high -> medium (strength 0.36...)
    r = put(store, "p", polarity="negative", ts=at(3))
    assert r.signal_strength == 0.6000000000000001 * 0.60
    assert r.confidence == "medium"
    assert r.polarity_status == "stable"


def test_reversal_step_3_drops_rung(store: MemoryStore) -> None:
    orig = _four_tags(store)
    for d in (1, 2):
        put(store, "airy_spacing", "layout_density", "negative", ts=at(d))
    r = put(store, "airy_spacing", "layout_density", "negative", ts=at(3))
    assert (r.signal_strength, r.confidence, r.polarity_status) == (0.288, "low", "stable")
    assert r.reversal_signals == 3
    assert r.decay_at == orig.decay_at
    assert len(store.list_preferences(U)) == 1


def test_reversal_step_4_penalty_is_abs_w_and_shadow(store: MemoryStore) -> None:
    orig = put(store, "p", "color", n=7, tag_text="love this")
    assert orig.signal_strength == 1.0
    for d in (1, 2, 3):
        put(store, "p", "color", "negative", ts=at(d))
    before = get(store, orig.id).signal_strength
    assert before == clamp(clamp(1.0 * 0.80, 0, 1) * 0.60, 0, 1)
    t4 = at(4)
    r = put(store, "p", "color", "negative", ts=t4, signal_type=TD, tag_text="too heavy")
    assert r.id == orig.id
    assert r.signal_strength == before - 0.1  # (abs(w) * 2.0) / 2.0, never the 1.5 factor
    assert r.signal_strength != before - 0.075
    assert (r.confidence, r.polarity_status, r.reversal_signals) == ("low", "under_review", 4)
    assert (r.last_seen, r.decay_at, r.reversal_first_seen) == (t4, orig.decay_at, at(1))
    assert (r.sources, r.explicit_tags, r.accept_count, r.reject_count) == (
        [ET],
        ["love this"],
        7,
        0,
    )
    (sh,) = shadows_of(store, orig.id)
    assert sh.to_dict() | {"id": None, "source_event_count": 0, "last_derived_event_seq": 0} == {
        "id": None,
        "preference_type": "color",
        "pattern": "p",
        "polarity": "negative",
        "signal_strength": 0.05,
        "confidence": "low",
        "sources": [TD],
        "accept_count": 0,
        "reject_count": 1,
        "explicit_tags": ["too heavy"],
        "last_seen": t4,
        "decay_at": at(94),
        "scope": "global",
        "reversal_signals": 0,
        "reversal_first_seen": None,
        "polarity_status": "stable",
        "shadow_of": orig.id,
        "derivation_version": "1",
        "source_event_count": 0,
        "last_derived_event_seq": 0,
    }


def test_reversal_clamps_at_zero_and_shadow_scope(store: MemoryStore) -> None:
    orig = put(store, "p", scope="project", project_id="pr", n=4)
    for d in (1, 2, 3, 4):
        r = put(store, "p", polarity="negative", scope="project", project_id="pr", ts=at(d))
    assert r.signal_strength == 0  # 0.288 - 0.3 clamped
    (sh,) = shadows_of(store, orig.id)
    assert sh.scope == "project:pr"
    assert [x.id for x in store.list_preferences(U, scope="project:pr")] == [sh.id, orig.id]
    assert store.list_preferences(U, scope="global") == []


def test_example_a_ladder(store: MemoryStore) -> None:
    """engine.md §11 example A, verbatim."""
    p, t = "airy_spacing", "layout_density"
    got = [put(store, p, t, ts=at(0)) for _ in range(4)]
    assert [r.signal_strength for r in got] == [0.15, 0.3, 0.44999999999999996, 0.6]
    assert [r.confidence for r in got] == ["low", "low", "medium", "medium"]
    orig = got[-1]
    assert orig.accept_count == 4
    T = [at(d) for d in (1, 2, 3, 4)]
    r1 = put(store, p, t, "negative", ts=T[0])
    assert (r1.signal_strength, r1.confidence, r1.polarity_status) == (0.6, "medium", "stable")
    r2 = put(store, p, t, "negative", ts=T[1])
    assert (r2.signal_strength, r2.confidence) == (0.48, "medium")
    r3 = put(store, p, t, "negative", ts=T[2])
    assert (r3.signal_strength, r3.confidence) == (0.288, "low")
    r4 = put(store, p, t, "negative", ts=T[3])
    assert (r4.signal_strength, r4.confidence, r4.polarity_status) == (0, "low", "under_review")
    assert (r4.last_seen, r4.decay_at, r4.reversal_first_seen) == (T[3], orig.decay_at, T[0])
    assert all(r.id == orig.id for r in (r1, r2, r3, r4))
    (sh,) = shadows_of(store, orig.id)
    assert (sh.polarity, sh.signal_strength, sh.confidence) == ("negative", 0.15, "low")
    assert (sh.reject_count, sh.shadow_of) == (1, orig.id)
    # two further negatives accumulate on the shadow (normal path)
    s5 = put(store, p, t, "negative", ts=at(5), tag_text="not this")
    assert s5.id == sh.id
    assert (s5.signal_strength, s5.confidence, s5.reject_count) == (0.3, "low", 2)
    assert s5.shadow_of == orig.id
    assert s5.explicit_tags == ["not this"]  # normal path updates tags
    s6 = put(store, p, t, "negative", ts=at(6))
    assert s6.id == sh.id
    assert (s6.signal_strength, s6.confidence) == (0.44999999999999996, "medium")
    assert (s6.shadow_of, s6.reject_count) == (None, 3)  # promoted
    assert get(store, orig.id).polarity_status == "archived"
    # one more positive: reactivates the original AND is reversal step 1 on the negative
    r = put(store, p, t, "positive", ts=at(7))
    assert r.id == sh.id  # what ingest_signal returns
    assert (r.polarity, r.reversal_signals, r.reversal_first_seen) == ("negative", 1, at(7))
    assert (r.signal_strength, r.polarity_status) == (0.44999999999999996, "stable")
    o = get(store, orig.id)
    assert (o.polarity_status, o.reversal_signals, o.reversal_first_seen) == ("stable", 0, None)
    assert (o.signal_strength, o.confidence, o.accept_count) == (0, "low", 4)


def test_normal_path_promotion_updates_sources_and_counts(store: MemoryStore) -> None:
    orig = put(store, "p", n=4)
    for d in (1, 2, 3, 4):
        put(store, "p", polarity="negative", ts=at(d))
    (sh,) = shadows_of(store, orig.id)
    put(store, "p", polarity="negative", ts=at(5), signal_type=RAE, tag_text="too noisy")
    s = put(store, "p", polarity="negative", ts=at(6), signal_type=TU)
    assert s.id == sh.id
    assert s.signal_strength == 0.15 + 0.125 + 0.05 and s.confidence == "low"
    assert s.shadow_of == orig.id  # still low: not promoted
    s = put(store, "p", polarity="negative", ts=at(7), signal_type=TU)
    assert s.confidence == "medium" and s.shadow_of is None
    assert (s.sources, s.explicit_tags, s.reject_count) == ([ET, RAE, TU], ["too noisy"], 4)
    assert (s.last_seen, s.decay_at) == (at(7), at(97))
    assert get(store, orig.id).polarity_status == "archived"


def test_promoted_shadow_gets_fresh_shadow(store: MemoryStore) -> None:
    """Q9: a promoted shadow no longer counts as existing shadow; a new contest creates one."""
    p = "x"
    orig = put(store, p, n=4)
    for d in range(1, 7):
        put(store, p, polarity="negative", ts=at(d))
    assert shadows_of(store, orig.id) == []  # promoted: shadow_of cleared
    (neg,) = store.list_preferences(U, polarity="negative")
    assert get(store, orig.id).polarity_status == "archived"
    for d in range(7, 11):
        r = put(store, p, ts=at(d))
        assert r.id == neg.id
    assert r.polarity_status == "under_review" and r.reversal_signals == 4
    (fresh,) = shadows_of(store, neg.id)
    assert fresh.polarity == "positive" and fresh.id != orig.id
    assert fresh.signal_strength == 0.15
    assert len(store.list_preferences(U)) == 3


def test_contradiction_wins_over_same_accumulation(store: MemoryStore) -> None:
    """Q2/Q4: with the original under_review, the original's polarity contradicts the shadow."""
    orig = put(store, "p", n=4)
    for d in (1, 2, 3, 4):
        put(store, "p", polarity="negative", ts=at(d))
    (sh,) = shadows_of(store, orig.id)
    r = put(store, "p", ts=at(5))
    assert r.id == sh.id and r.reversal_signals == 1
    o = get(store, orig.id)
    assert o.signal_strength == 0 and o.accept_count == 4  # `same` not accumulated
    assert o.polarity_status == "under_review"


def _q3_setup(store: MemoryStore) -> tuple[Preference, Preference, Preference]:
    """Original P+, promoted N1-, reactivated P+, then N1 contested into a fresh shadow P2+."""
    p_orig = put(store, "p", n=4, ts=at(0))
    for d in (1, 2, 3, 4, 5, 6):
        put(store, "p", polarity="negative", ts=at(d))
    (n1,) = store.list_preferences(U, polarity="negative")
    assert n1.shadow_of is None and get(store, p_orig.id).polarity_status == "archived"
    for d in (7, 8, 9, 10):
        put(store, "p", ts=at(d))
    assert get(store, p_orig.id).polarity_status == "stable"
    (p2,) = shadows_of(store, n1.id)
    return get(store, p_orig.id), get(store, n1.id), p2


def test_first_same_match_accumulates_duplicates_never_merged(store: MemoryStore) -> None:
    """Q3/Q4: signals of the shadow's polarity accumulate on the FIRST record of that
    polarity (the reactivated original), not on the shadow."""
    p_orig, n1, p2 = _q3_setup(store)
    assert p_orig.last_seen == at(4)  # reactivation does not touch last_seen
    assert n1.polarity_status == "under_review"
    r = put(store, "p", ts=at(11))
    assert r.id == p_orig.id
    assert r.signal_strength == 0 + 0.15 and r.accept_count == 5
    assert get(store, p2.id).signal_strength == 0.15
    assert get(store, p2.id).shadow_of == n1.id


def test_only_first_opposite_match_is_examined(store: MemoryStore) -> None:
    """Q3: the first opposite match is archived, a later one is stable: no reversal."""
    p_orig, n1, p2 = _q3_setup(store)
    # p_orig.last_seen = day 4, n1 and p2 last seen day 10: archive only p_orig.
    res = store.run_decay(U, at(4 + 180))
    assert res.archived == 1
    assert get(store, p_orig.id).polarity_status == "archived"
    assert get(store, p2.id).polarity_status == "stable"
    n_before = get(store, n1.id)
    r = put(store, "p", polarity="negative", ts=at(185))
    assert r.id == n1.id  # normal path on the under_review N1
    assert r.polarity_status == "under_review"
    assert r.signal_strength == clamp(n_before.signal_strength + 0.15, 0, 1)
    assert r.reject_count == n_before.reject_count + 1
    assert get(store, p2.id).reversal_signals == 0  # the later stable opposite is ignored


def test_no_reversal_on_under_review(store: MemoryStore) -> None:
    orig = put(store, "p", n=4)
    for d in (1, 2, 3, 4):
        put(store, "p", polarity="negative", ts=at(d))
    r = put(store, "p", polarity="negative", ts=at(5))
    assert r.polarity == "negative"
    o = get(store, orig.id)
    assert o.reversal_signals == 4 and o.last_seen == at(4)


def _contest_to_existing_shadow(
    store: MemoryStore, shadow_signal: str, grow: str
) -> tuple[Preference, Preference]:
    """Original P+ (rs4, under_review) with a shadow N1 that is then grown on the normal
    path by ``grow``; P+ archived by decay (N1 kept alive), reactivated, and contested
    again so that rs4 meets the existing, unpromoted shadow."""
    orig = put(store, "p", n=4, ts=at(0))
    for d in (1, 2, 3):
        put(store, "p", polarity="negative", ts=at(d))
    put(store, "p", polarity="negative", ts=at(4), signal_type=shadow_signal)
    (n1,) = shadows_of(store, orig.id)
    put(store, "p", polarity="negative", ts=at(5), signal_type=grow, tag_text="too heavy")
    n1 = get(store, n1.id)
    assert n1.shadow_of == orig.id and n1.confidence == "low"
    assert store.run_decay(U, at(184)).to_dict() == {"decayed": 1, "archived": 1}
    n1 = get(store, n1.id)
    assert get(store, orig.id).polarity_status == "archived"
    r = put(store, "p", ts=at(185))  # reactivate original; rs1 on N1 (stable)
    assert r.id == n1.id and r.reversal_signals == 1
    o = get(store, orig.id)
    assert (o.polarity_status, o.reversal_signals) == ("stable", 0)
    for d in (186, 187, 188):
        put(store, "p", polarity="negative", ts=at(d))
    assert get(store, orig.id).reversal_signals == 3
    return orig, get(store, n1.id)


def test_existing_shadow_accumulates_inside_reversal(store: MemoryStore) -> None:
    orig, n1 = _contest_to_existing_shadow(store, TD, AB)
    assert n1.signal_strength == (0.05 + 0.01) * 0.70
    t = at(189)
    r = put(store, "p", polarity="negative", ts=t, signal_type=TD, tag_text="not this")
    assert r.id == orig.id
    assert (r.polarity_status, r.reversal_signals, r.confidence) == ("under_review", 4, "low")
    assert len(store.list_preferences(U)) == 2  # no second shadow
    s = get(store, n1.id)
    assert s.signal_strength == n1.signal_strength + 0.05
    assert s.confidence == "low"
    assert (s.last_seen, s.decay_at) == (t, at(189 + 90))
    # inside the reversal path sources, tags and counts are NOT updated (Q8)
    assert (s.sources, s.explicit_tags, s.reject_count) == (
        n1.sources,
        n1.explicit_tags,
        n1.reject_count,
    )
    assert s.shadow_of == orig.id


def test_existing_shadow_promoted_inside_reversal(store: MemoryStore) -> None:
    orig, n1 = _contest_to_existing_shadow(store, ET, ET)
    assert n1.signal_strength == (0.15 + 0.15) * 0.70
    assert (n1.sources, n1.reject_count) == ([ET], 2)
    t = at(189)
    r = put(store, "p", polarity="negative", ts=t, signal_type=ET)
    assert r.id == orig.id
    assert r.polarity_status == "archived"  # overrides the under_review just set
    assert (r.confidence, r.reversal_signals, r.last_seen) == ("low", 4, t)
    s = get(store, n1.id)
    assert s.signal_strength == n1.signal_strength + 0.15
    assert s.confidence == "medium"
    assert s.shadow_of is None
    assert (s.sources, s.explicit_tags, s.reject_count) == (
        [ET],
        ["too heavy"],
        2,
    )


# ---------------------------------------------------------------------------------------
# §4.3 reactivation (Q10)


def test_reactivation_carries_strength_and_resets_reversal(store: MemoryStore) -> None:
    orig = put(store, "p", n=4, ts=at(0))
    put(store, "p", polarity="negative", ts=at(1))  # rs1, first_seen day 1
    assert store.run_decay(U, at(181)).to_dict() == {"decayed": 0, "archived": 1}
    a = get(store, orig.id)
    assert (a.polarity_status, a.signal_strength, a.confidence) == ("archived", 0.6, "medium")
    assert (a.reversal_signals, a.reversal_first_seen) == (1, at(1))
    r = put(store, "p", ts=at(200), signal_type=TU)
    assert r.id == orig.id
    assert (r.polarity_status, r.reversal_signals, r.reversal_first_seen) == ("stable", 0, None)
    assert r.signal_strength == 0.6 + 0.05 and r.confidence == "medium"
    assert r.accept_count == 5 and r.last_seen == at(200)


def test_reactivation_keeps_mismatched_label(store: MemoryStore) -> None:
    """A decayed label survives archive + reactivation when the signal is a contradiction."""
    orig = put(store, "p", n=4, ts=at(0))
    store.run_decay(U, at(90))  # 0.42 low
    assert store.run_decay(U, at(180)).archived == 1
    # a negative record in the same list that is stable, so the reactivating positive
    # signal is a contradiction and the original is not accumulated
    put(store, "p", polarity="negative", ts=at(181))  # opp archived -> new negative record
    r = put(store, "p", ts=at(182))
    assert r.polarity == "negative" and r.reversal_signals == 1
    o = get(store, orig.id)
    assert (o.polarity_status, o.signal_strength, o.confidence) == ("stable", 0.42, "low")


# ---------------------------------------------------------------------------------------
# §6 decay


def test_example_c_decay(store: MemoryStore) -> None:
    r = put(store, "p", n=4, ts="2024-01-01T00:00:00.000Z")
    assert (r.signal_strength, r.decay_at) == (0.6, "2024-03-31T00:00:00.000Z")
    res = store.run_decay(U, "2024-03-31T00:00:00.000Z")
    assert (res.decayed, res.archived) == (1, 0)
    r = get(store, r.id)
    assert (r.signal_strength, r.confidence) == (0.42, "low")
    assert r.decay_at == "2024-06-29T00:00:00.000Z"
    res = store.run_decay(U, "2024-06-29T00:00:00.000Z")
    assert (res.decayed, res.archived) == (0, 1)
    r = get(store, r.id)
    assert (r.signal_strength, r.polarity_status, r.confidence) == (0.42, "archived", "low")
    assert r.last_seen == "2024-01-01T00:00:00.000Z"


@pytest.mark.parametrize(
    ("n", "before", "after", "label"),
    [(5, 0.75, 0.75 * 0.70, "medium"), (7, 1.0, 0.7, "medium"), (4, 0.6, 0.42, "low")],
)
def test_decay_factor_and_one_rung(
    store: MemoryStore, n: int, before: float, after: float, label: str
) -> None:
    r = put(store, "p", n=n, ts=at(0))
    assert r.signal_strength == before
    store.run_decay(U, at(90))
    r = get(store, r.id)
    assert r.signal_strength == after and r.confidence == label


def test_decay_boundaries_inclusive(store: MemoryStore) -> None:
    r = put(store, "p", n=4, ts=at(0))
    just_before = format_ts(parse_ts(at(90)) - 1)
    snap = snapshot(store)
    assert store.run_decay(U, just_before).to_dict() == {"decayed": 0, "archived": 0}
    assert snapshot(store) == snap
    assert store.run_decay(U, at(90)).to_dict() == {"decayed": 1, "archived": 0}
    assert get(store, r.id).decay_at == at(180)
    # archive: exactly 180 days since last_seen (decay never changes last_seen)
    almost = format_ts(parse_ts(at(180)) - 1)
    assert store.run_decay(U, almost).to_dict() == {"decayed": 0, "archived": 0}
    assert get(store, r.id).polarity_status == "stable"
    assert store.run_decay(U, at(180)).to_dict() == {"decayed": 0, "archived": 1}
    assert get(store, r.id).polarity_status == "archived"
    assert get(store, r.id).signal_strength == 0.42


def test_archive_checked_first_and_decay_at_anchored_on_now(store: MemoryStore) -> None:
    a = put(store, "a", n=4, ts=at(0))
    b = put(store, "b", n=4, ts=at(100))
    # a: decay_at day 90, last_seen day 0. b: decay_at day 190.
    res = store.run_decay(U, at(179.5))
    assert res.to_dict() == {"decayed": 1, "archived": 0}  # one step however overdue
    ra = get(store, a.id)
    assert ra.signal_strength == 0.42 and ra.decay_at == at(179.5 + 90)  # anchored on now
    assert get(store, b.id).signal_strength == 0.6
    # day 180: a is 180 days old (its decay_at is day 269.5): archived, strength untouched
    res = store.run_decay(U, at(180))
    assert res.to_dict() == {"decayed": 0, "archived": 1}
    assert get(store, a.id).signal_strength == 0.42
    # archived records are skipped entirely from now on
    res = store.run_decay(U, at(400))
    assert res.to_dict() == {"decayed": 0, "archived": 1}  # only b
    assert get(store, a.id).signal_strength == 0.42


def test_archive_wins_over_overdue_decay(store: MemoryStore) -> None:
    r = put(store, "p", n=4, ts=at(0))
    assert store.run_decay(U, at(500)).to_dict() == {"decayed": 0, "archived": 1}
    r = get(store, r.id)
    assert (r.signal_strength, r.confidence, r.decay_at) == (0.6, "medium", at(90))


def test_decay_includes_under_review_and_projects(store: MemoryStore) -> None:
    orig = put(store, "p", n=4, ts=at(0))
    for d in (1, 2, 3, 4):
        put(store, "p", polarity="negative", ts=at(d))
    pr = put(store, "q", n=5, scope="project", project_id="pj", ts=at(0))
    assert get(store, orig.id).polarity_status == "under_review"
    res = store.run_decay(U, at(94))
    # orig (under_review, decay_at day 90), shadow (decay_at day 94), project record
    assert res.to_dict() == {"decayed": 3, "archived": 0}
    o = get(store, orig.id)
    assert (o.polarity_status, o.signal_strength, o.confidence) == ("under_review", 0, "low")
    assert get(store, pr.id).signal_strength == 0.75 * 0.70
    res = store.run_decay(U, at(184))
    assert res.archived == 3
    assert get(store, orig.id).polarity_status == "archived"


def test_decay_pass_recorded_only_when_it_changes_something(store: MemoryStore) -> None:
    put(store, "p", n=4, ts=at(0))
    path = log_path(store)
    store.retrieve_for_injection(U)
    store.list_preferences(U)
    before = path.read_bytes()
    snap = snapshot(store)
    assert store.run_decay(U, at(10)).to_dict() == {"decayed": 0, "archived": 0}
    assert path.read_bytes() == before
    assert snapshot(store) == snap
    n_events = len(store.events(U))
    assert store.run_decay(U, at(90)).decayed == 1
    assert path.read_bytes() != before
    evs = store.events(U)
    assert len(evs) == n_events + 1
    assert type(evs[-1]).__name__ == "DecayPassEvent" and evs[-1].at == at(90)


def test_decay_without_data_creates_nothing(store: MemoryStore) -> None:
    assert store.run_decay("nobody", at(0)).to_dict() == {"decayed": 0, "archived": 0}
    assert not (Path(store.root) / "nobody").exists()


def test_decay_default_now_is_clock(store: MemoryStore, clock: ManualClock) -> None:
    r = put(store, "p", n=4, ts=at(0))
    clock.set(at(90))
    assert store.run_decay(U).decayed == 1
    assert get(store, r.id).decay_at == at(180)


def test_decay_now_as_aware_datetime_floored_to_ms(store: MemoryStore) -> None:
    r = put(store, "p", n=4, ts="2024-02-20T00:00:00Z")
    assert r.decay_at == "2024-05-20T00:00:00.000Z"
    plus2 = timezone(timedelta(hours=2))
    # 23:59:59.999999Z floors to .999: not due yet
    assert store.run_decay(U, datetime(2024, 5, 20, 1, 59, 59, 999999, tzinfo=plus2)).decayed == 0
    assert store.run_decay(U, datetime(2024, 5, 20, 2, 0, 0, 999, tzinfo=plus2)).decayed == 1
    assert get(store, r.id).decay_at == "2024-08-18T00:00:00.000Z"  # anchored on floored now


def test_decay_ignores_memory_flag(store: MemoryStore) -> None:
    r = put(store, "p", n=4, ts=at(0))
    store.set_memory_enabled(U, False)
    assert store.run_decay(U, at(90)).decayed == 1
    assert get(store, r.id).signal_strength == 0.42


# ---------------------------------------------------------------------------------------
# §10 disabled memory, list, reset


def test_disabled_memory(store: MemoryStore) -> None:
    put(store, "p", n=4)
    put(store, "q", polarity="negative", n=4)
    store.set_memory_enabled(U, False)
    log = log_path(store).read_bytes()
    # ingest returns None without validating the signal
    assert store.ingest_signal(U, tag("p")) is None
    assert store.ingest_signal(U, {"polarity": "bogus", "signal_type": "nope"}) is None
    assert store.ingest_signal(U, tag("z", scope="project", project_id="__proto__")) is None
    assert log_path(store).read_bytes() == log
    # user_id is still validated
    with pytest.raises(ValueError, match="user_id"):
        store.ingest_signal("a/b", tag("p"))
    # retrieval is empty, and does not validate the project id
    for ctx in (None, {"project_id": "x"}, {"project_id": "a/b"}):
        r = store.retrieve_for_injection(U, ctx)
        assert (r.positives, r.negatives, r.project_overrides, r.diagnostics) == ([], [], [], [])
    # list still works
    assert len(store.list_preferences(U)) == 2
    # decay still works (see test_decay_ignores_memory_flag); reset global still works
    store.reset_memory(U, "global")
    assert store.list_preferences(U) == []
    assert store.ingest_signal(U, tag("p")) is None
    # only a full reset re-enables
    store.reset_memory(U, "all")
    rec = store.ingest_signal(U, tag("p"))
    assert rec is not None and rec.signal_strength == 0.15
    assert store.retrieve_for_injection(U).positives == []  # 0.15 is not injectable
    put(store, "p", n=2)
    assert [x.pattern for x in store.retrieve_for_injection(U).positives] == ["p"]


def test_disabled_then_enabled_again(store: MemoryStore) -> None:
    put(store, "p", n=4)
    store.set_memory_enabled(U, False)
    assert store.retrieve_for_injection(U).positives == []
    store.set_memory_enabled(U, True)
    assert [x.pattern for x in store.retrieve_for_injection(U).positives] == ["p"]


def test_list_preferences_filters_and_order(store: MemoryStore) -> None:
    a = put(store, "a", n=2)  # 0.3
    b = put(store, "b", polarity="negative", n=4)  # 0.6
    c = put(store, "c", n=2, scope="project", project_id="pa")  # 0.3, project
    d = put(store, "d", n=4, scope="project", project_id="pb")  # 0.6

    def ids(rs: Iterable[Preference]) -> list[str]:
        return [r.id for r in rs]

    # stable sort descending by strength; ties keep global-then-projects order
    assert ids(store.list_preferences(U)) == [b.id, d.id, a.id, c.id]
    assert ids(store.list_preferences(U, scope="global")) == [b.id, a.id]
    assert ids(store.list_preferences(U, scope="project:pa")) == [c.id]
    assert ids(store.list_preferences(U, scope="project:unknown")) == []
    for bad in ("project:pa:zzz", "whatever", "projects"):  # engine rules §0 item 9
        with pytest.raises(ValueError, match="scope"):
            store.list_preferences(U, scope=bad)
    assert ids(store.list_preferences(U, polarity="negative")) == [b.id]
    assert ids(store.list_preferences(U, polarity="positive")) == [d.id, a.id, c.id]
    assert ids(store.list_preferences(U, min_strength=0.6)) == [b.id, d.id]  # inclusive
    assert ids(store.list_preferences(U, min_strength=0.61)) == []
    assert ids(store.list_preferences(U, status="archived")) == []
    assert ids(store.list_preferences(U, status="stable")) == [b.id, d.id, a.id, c.id]
    assert store.list_preferences("nobody") == []
    assert not (Path(store.root) / "nobody").exists()
    with pytest.raises(ValueError, match="project_id"):
        store.list_preferences(U, scope="project:")


def test_reset_scopes(store: MemoryStore) -> None:
    a = put(store, "a", n=2)
    c = put(store, "c", scope="project", project_id="pa")
    d = put(store, "d", scope="project", project_id="pb")
    store.reset_memory(U, "project:pa")
    assert set(records(store)) == {a.id, d.id}
    assert c.id not in records(store)
    with pytest.raises(ValueError, match="scope"):  # unknown scope: an error, no change
        store.reset_memory(U, "something-else")
    assert len(store.list_preferences(U)) == 2
    store.reset_memory(U, "global")
    assert [r.id for r in store.list_preferences(U)] == [d.id]
    with pytest.raises(ValueError, match="scope"):
        store.reset_memory(U, "project:pb:extra")
    assert [r.id for r in store.list_preferences(U)] == [d.id]
    store.reset_memory(U, "project:pb")
    assert store.list_preferences(U) == []
    put(store, "a")
    store.reset_memory(U)
    assert store.list_preferences(U) == []


def test_project_buckets_iterate_in_first_seen_order(store: MemoryStore) -> None:
    """§0.4: insertion order, not JS integer-key order ("7", "12" first)."""
    ids = []
    for pid in ("b", "12", "7", "a"):
        ids.append(put(store, "x", scope="project", project_id=pid, n=2).id)
    g = put(store, "x", n=2)
    assert [r.id for r in store.list_preferences(U)] == [g.id, *ids]
    # decay walks the same order; all four are due at once and all decay
    assert store.run_decay(U, at(90)).decayed == 5


def test_cross_project_isolation(store: MemoryStore) -> None:
    put(store, "shared", n=4, scope="project", project_id="pa")
    put(store, "only_a", polarity="negative", n=4, scope="project", project_id="pa")
    put(store, "shared", polarity="negative", n=4, scope="project", project_id="pb")
    ra = store.retrieve_for_injection(U, {"project_id": "pa"})
    rb = store.retrieve_for_injection(U, {"project_id": "pb"})
    assert [r.pattern for r in ra.positives] == ["shared"]
    assert [r.pattern for r in ra.negatives] == ["only_a"]
    assert [r.pattern for r in rb.positives] == []
    assert [r.pattern for r in rb.negatives] == ["shared"]
    assert {r.scope for r in ra.project_overrides} == {"project:pa"}
    assert {r.scope for r in rb.project_overrides} == {"project:pb"}
    # no project: project records are not used at all
    r0 = store.retrieve_for_injection(U)
    assert (r0.positives, r0.negatives, r0.project_overrides) == ([], [], [])
    # a contradiction in pb never touches pa
    (a_rec,) = store.list_preferences(U, scope="project:pa", polarity="positive")
    assert a_rec.reversal_signals == 0


def test_same_events_same_ids(tmp_path: Path) -> None:
    """Derivation is deterministic: the same events give the same records, ids included."""
    out = []
    for name in ("one", "two"):
        s = MemoryStore(tmp_path / name, derivation_version="1", clock=ManualClock())
        for i in range(3):
            s.ingest_signal(U, tag(f"p{i}", ts=at(i)))
        out.append([r.to_dict() for r in s.list_preferences(U)])
    assert out[0] == out[1]
