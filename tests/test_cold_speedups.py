"""The cold-derivation fast paths give exactly what the plain ones give (docs/performance.md,
"Cold derivation (second pass)"): version 2's inlined bulk fold (versions 3 and 4 fold
through it) is one ``apply`` per event, whole or in chunks, with the records materialised
between chunks or not; version 1's bulk fold, keeping the records it found eligible, on
shadows that name records of other keys (tests/test_engine_speedups.py compares it on
mixed histories); ``ts_to_ms`` with its minute-of-day memo is the plain formula."""

from __future__ import annotations

import itertools
import random
from typing import Any, get_args

import msgspec
import pytest

from creative_memory.engine.constants import SIGNAL_WEIGHTS, SignalType
from creative_memory.engine.derivation.registry import new_state
from creative_memory.engine.derivation.v1 import DerivedStateV1
from creative_memory.engine.derivation.v2 import bulk
from creative_memory.engine.derivation.v2.state import DerivedStateV2
from creative_memory.engine.events import (
    DecayPassEvent,
    Event,
    LegacyRecordEvent,
    SignalEvent,
    build_signal_event,
    decode_event_lines,
    encode_event,
)
from creative_memory.engine.timeutil import (
    _NORMALISED_RE,
    MS_PER_DAY,
    _days_from_civil,
    add_days_ts,
    format_ts,
    try_parse_ts,
    ts_to_ms,
    ts_to_ms_normalised,
)
from tests.test_engine_speedups import T0, TYPES, fold_in_chunks, history, one_by_one

KINDS = ("thumbs_up", "thumbs_down", "explicit_tag", "repeated_acceptance", "manual_refinement")

NEAR_MISSES: list[tuple[str, tuple[Any, ...]]] = [
    ("signal_type", KINDS),
    ("polarity", ("positive", "negative")),
    ("tag_text", ("love this", "not this", None)),
    ("scope", ("global", "project")),
    ("project_id", ("proj0", "proj1")),
    ("session_id", ("s1", "s2", None)),
    ("artifact_id", ("artX", None)),
    ("timestamp", (format_ts(T0), format_ts(T0 + 1))),
]


def verdicts(n: int, n_patterns: int, seed: int) -> list[Event]:
    """Artifact verdicts listing one to four features each (signals of one verdict share
    artifact, session, time, kind, polarity, scope and tag: one row of several columns),
    some without an artifact id, some listing a feature twice, mixed with
    :func:`~tests.test_engine_speedups.history`'s events; ``seq`` 1…"""
    rng = random.Random(seed)
    mixed = iter(history(n, n_patterns, seed + 100))
    out: list[Event] = []
    i = 0
    while len(out) < n:
        i += 1
        if rng.random() < 0.3:
            out.append(next(mixed))
            continue
        t = T0 + i * 60_000
        ts = format_ts(t)
        project = rng.random() < 0.3
        base = {
            "signal_type": rng.choice(KINDS),
            "polarity": rng.choice(("positive", "negative")),
            "tag_text": rng.choice(("love this", None, None)),
            "scope": "project" if project else "global",
            "project_id": f"proj{rng.randrange(2)}" if project else None,
            "artifact_id": None if rng.random() < 0.1 else f"art{i}",
            "session_id": rng.choice(("s1", "s2", None)),
            "timestamp": ts,
        }
        for _ in range(rng.choice((1, 1, 2, 3, 4))):
            if rng.random() < 0.15:  # a near miss: the next signal differs in one field
                field, values = rng.choice(NEAR_MISSES)
                base = {**base, field: rng.choice(values)}
                if field == "scope":
                    base["project_id"] = "proj0" if base["scope"] == "project" else None
            ptype = rng.choice(TYPES)
            signal = {**base, "preference_type": ptype, "pattern": f"p{rng.randrange(n_patterns)}"}
            out.append(build_signal_event(signal, t, ts))
    return [msgspec.structs.replace(ev, seq=k) for k, ev in enumerate(out[:n], 1)]


@pytest.mark.parametrize("version", ["2", "3", "4", "5"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_version_2_bulk_fold_is_the_event_by_event_fold(version: str, seed: int) -> None:
    events = verdicts(2_500, 15, seed)
    reference = one_by_one(version, events)
    assert isinstance(reference, DerivedStateV2)
    expected_row = reference.dump_extra()["row"]
    expected = reference.dump()
    whole = new_state(version)
    whole.fold(events)
    assert isinstance(whole, DerivedStateV2)
    assert whole.dump_extra()["row"] == expected_row
    assert whole.dump() == expected
    rng = random.Random(seed)
    for materialize in (False, True):
        assert fold_in_chunks(version, events, rng, 300, materialize).dump() == expected


@pytest.mark.parametrize("version", ["2", "3"])
def test_version_2_bulk_fold_continues_a_state_folded_one_event_at_a_time(version: str) -> None:
    events = verdicts(1_200, 10, 7)
    expected = one_by_one(version, events).dump()
    for cut in (1, 2, 3, 5, 8, 13, 400, 401, 402):
        state = one_by_one(version, events[:cut])  # its open row is the state's own
        state.materialize()
        state.fold(events[cut:])
        assert state.dump() == expected, cut
        loaded = new_state(version)  # ... or one restored from a cache entry
        loaded = type(loaded).load(one_by_one(version, events[:cut]).dump())
        loaded.fold(events[cut:])
        assert loaded.dump() == expected, cut


def test_version_2_bulk_fold_keeps_the_order_check() -> None:
    events = verdicts(300, 5, 4)
    state = new_state("3")
    state.fold(events[:200])
    with pytest.raises(ValueError, match="out of order"):
        state.fold([events[250], events[10]])
    reference = one_by_one("3", [*events[:200], events[250]])
    assert isinstance(state, DerivedStateV2) and isinstance(reference, DerivedStateV2)
    assert state.dump_extra() == reference.dump_extra()


def plain_ts_to_ms(text: str) -> int:
    """``ts_to_ms`` as it was before its minute-of-day memo (the reference)."""
    if _NORMALISED_RE.fullmatch(text):
        days = _days_from_civil(int(text[0:4]), int(text[5:7]), int(text[8:10]))
        return (
            ((days * 24 + int(text[11:13])) * 60 + int(text[14:16])) * 60 + int(text[17:19])
        ) * 1000 + int(text[20:23])
    ms = try_parse_ts(text)
    assert ms is not None
    return ms


def test_ts_to_ms_is_the_plain_formula() -> None:
    rng = random.Random(5)
    texts = [
        format_ts(rng.randrange(-62_000_000_000_000, 253_000_000_000_000)) for _ in range(20_000)
    ]
    texts += [format_ts(T0 + i * 60_000) for i in range(3_000)]  # the memos wrap around
    texts += ["2025-01-01T00:00:00Z", "2025-01-01", "2025-01-01T23:59:59.9999+05:30"]
    for text in texts:
        assert ts_to_ms(text) == plain_ts_to_ms(text), text
    # digits of another script are not digits of a timestamp, memoised date or not
    wide = str.maketrans("0123456789", "０１２３４５６７８９")
    arabic = str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")
    for text in texts[-60:-3]:
        for other in (text.translate(wide), text.translate(arabic), text[:-3] + "٣Z"):
            assert try_parse_ts(other) is None, other
            assert outcome(ts_to_ms, other) is ValueError, other


def shadowed_history(n: int, seed: int) -> list[Event]:
    """Version 1 signals over a few keys in two buckets, with imported records that shadow
    each other across keys and buckets (a promotion archives a record of another key) and
    decay passes; ``seq`` 1…n."""
    rng = random.Random(seed)
    keys = [(TYPES[i % 3], f"p{i}") for i in range(4)]
    buckets = (None, "proj0")
    out: list[Event] = []
    for i in range(n):
        t = T0 + i * 3_600_000
        ts = format_ts(t)
        roll = rng.random()
        if roll < 0.03:
            out.append(DecayPassEvent(at=format_ts(t + 20 * MS_PER_DAY), recorded_at=ts))
            continue
        if roll < 0.1:
            key, bucket = rng.choice(keys), rng.choice(buckets)
            record = {
                "id": f"pref_L{i}",
                "preference_type": key[0],
                "pattern": key[1],
                "polarity": rng.choice(("positive", "negative")),
                "signal_strength": rng.random() / 2,
                "confidence": "low",
                "sources": ["thumbs_up"],
                "last_seen": ts,
                "decay_at": format_ts(t + 14 * MS_PER_DAY),
                "scope": "project" if bucket else "global",
                "polarity_status": rng.choice(("stable", "stable", "under_review", "archived")),
                "shadow_of": f"pref_L{rng.randrange(i)}" if i and rng.random() < 0.6 else None,
            }
            out.append(LegacyRecordEvent(at=ts, recorded_at=ts, bucket=bucket, record=record))
            continue
        key, bucket = rng.choice(keys), rng.choice(buckets)
        signal = {
            "signal_type": rng.choice(KINDS),
            "preference_type": key[0],
            "pattern": key[1],
            "polarity": "positive" if rng.random() < 0.7 else "negative",
            "tag_text": rng.choice(("love this", None)),
            "scope": "project" if bucket else "global",
            "project_id": bucket,
            "artifact_id": f"a{i}",
            "timestamp": ts,
        }
        out.append(build_signal_event(signal, t, ts))
    return [msgspec.structs.replace(ev, seq=k) for k, ev in enumerate(out, 1)]


@pytest.mark.parametrize("seed", range(12))
def test_version_1_bulk_fold_with_shadows_across_keys_is_the_event_by_event_fold(
    seed: int,
) -> None:
    events = shadowed_history(600, seed)
    expected = one_by_one("1", events).dump()
    whole = new_state("1")
    whole.fold(events)
    assert whole.dump() == expected
    assert fold_in_chunks("1", events, random.Random(seed), 80).dump() == expected


def test_version_2_bulk_fold_with_few_look_ups_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    events = verdicts(1_500, 12, 9)
    expected = one_by_one("3", events).dump()
    monkeypatch.setattr(bulk, "INLINE_MAX", 3)  # emptied again and again
    state = new_state("3")
    for at in range(0, len(events), 100):
        state.fold(events[at : at + 100])
    assert state.dump() == expected


def plain_ts_to_ms_or_raise(text: str) -> int:
    """:func:`plain_ts_to_ms`, raising ``ValueError`` on an invalid timestamp."""
    if _NORMALISED_RE.fullmatch(text) or try_parse_ts(text) is not None:
        return plain_ts_to_ms(text)
    raise ValueError(text)


def plain_add_days_ts(text: str, k: int) -> str:
    """``add_days_ts`` without its memo of date shifts (the reference)."""
    if len(text) == 24 and _NORMALISED_RE.fullmatch(text):
        days = _days_from_civil(int(text[0:4]), int(text[5:7]), int(text[8:10])) + k
        return format_ts(days * MS_PER_DAY)[:-14] + text[10:]
    return format_ts(plain_ts_to_ms_or_raise(text) + k * MS_PER_DAY)


def outcome(fn: Any, *args: Any) -> Any:
    """What ``fn(*args)`` returns, or ``ValueError`` when it raises one (the engine's
    ``ValidationError`` is one)."""
    try:
        return fn(*args)
    except ValueError:
        return ValueError


def test_memoised_timestamps_check_the_whole_form() -> None:
    """``ts_to_ms`` skips the pattern only when the date and the hour and minute are
    memoised from a timestamp that matched it: a text that shares them but not the rest of
    the form takes the plain way, digits of another script are not digits
    (``add_days_ts``, which reads the same memos' texts, is compared too)."""
    base = [format_ts(T0 + i * 61_001) for i in range(200)]
    for text in base:  # fill the memos
        ts_to_ms(text)
        add_days_ts(text, 7)
    arabic = str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")
    variants = list(base)
    for text in base[:40]:
        for i in (10, 13, 16, 19, 23):  # each separator replaced
            variants.append(text[:i] + "x" + text[i + 1 :])
        for i in (12, 15, 18, 22):  # a digit of the time replaced
            variants.append(text[:i] + "a" + text[i + 1 :])
            variants.append(text[:i] + text[i].translate(arabic) + text[i + 1 :])
            variants.append(text[:i] + "²" + text[i + 1 :])  # a digit, not a decimal
        variants.append(text[:23] + "z")
        variants.append(text[:19] + ".+12Z")
        variants.append(text[:19] + ". 12Z")
        variants.append(text[:19] + ".1_2Z")
        variants.append(text[:-1])
        variants.append(text + "Z")
        variants.append(text[:20] + "1234Z")
    for text in variants:
        for _ in range(2):  # the second call finds the memos filled by the first
            assert outcome(ts_to_ms, text) == outcome(plain_ts_to_ms_or_raise, text), text
            for k in (7, 30, -3):
                assert outcome(add_days_ts, text, k) == outcome(plain_add_days_ts, text, k), text


def test_the_last_call_memos_give_the_plain_answers() -> None:
    """``format_ts``, ``ts_to_ms`` and ``add_days_ts`` remember their last call with its
    result: arguments repeated (a batch of events made at one instant) or alternating give
    the plain answers, for the same objects and for equal ones."""
    from datetime import UTC, datetime

    def plain_format_ts(ms: int) -> str:
        return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + (
            f"{ms % 1000:03d}Z"
        )

    rng = random.Random(3)
    instants = [T0 + rng.randrange(-(10**12), 10**12) for _ in range(60)]
    calls = [ms for ms in instants for _ in range(3)] + instants[::-1] + instants[:2] * 5
    for ms in calls:
        text = format_ts(ms)
        assert text == plain_format_ts(ms), ms
        equal = "".join(text)  # an equal string, another object
        for t in (text, equal, text):
            assert ts_to_ms(t) == plain_ts_to_ms(t) == ms
            for k in (7, 7, -3):
                assert add_days_ts(t, k) == plain_add_days_ts(t, k)


def test_times_read_in_one_block_are_ts_to_ms() -> None:
    rng = random.Random(11)
    texts = [
        format_ts(rng.randrange(-62_135_596_800_000, 253_402_300_800_000)) for _ in range(5000)
    ]
    texts += ["0000-01-01T00:00:00.000Z", "0000-02-29T23:59:59.999Z", "9999-12-31T23:59:59.999Z"]
    # the pattern's form without a valid date or time: ts_to_ms reads them by its formula
    texts += ["2025-13-01T00:00:00.000Z", "2025-00-00T99:99:99.999Z", "0000-01-99T00:60:00.000Z"]
    ascii_misses = []
    for text in texts[:300]:
        i = rng.choice((*range(24),))
        ascii_misses.append(text[:i] + rng.choice("x:-. TZ/") + text[i + 1 :])
    mixed = texts + ascii_misses
    rng.shuffle(mixed)
    block = ts_to_ms_normalised(mixed)
    assert len(block) == len(mixed)
    for text, ms in zip(mixed, block, strict=True):
        if ms is None:
            assert not _NORMALISED_RE.fullmatch(text), text
        else:
            assert ms == ts_to_ms(text), text
    assert sum(ms is not None for ms in block) >= len(texts)
    # a text of another length or with other than ASCII characters: none read
    arabic = str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")
    for odd in ("2025-01-01T00:00:00Z", texts[0].translate(arabic), texts[0] + " "):
        assert ts_to_ms_normalised([*texts[:10], odd]) == [None] * 11
    # lengths that add up to 24 a text do not line the texts up
    assert ts_to_ms_normalised([texts[0][:-1], "Z" + texts[1], *texts[2:5]]) == [None] * 5
    assert ts_to_ms_normalised([]) == []


@pytest.mark.parametrize("version", ["2", "3"])
def test_version_2_bulk_fold_with_times_not_in_the_normalised_form(version: str) -> None:
    """A fold long enough to read its times in one block, with some event times that the
    block does not read (not normalised: no fraction, or an offset): ``ts_to_ms`` reads those."""
    rng = random.Random(version)
    events = verdicts(1_500, 12, 9)
    for i, ev in enumerate(events):
        roll = rng.random()
        if roll < 0.05:
            events[i] = msgspec.structs.replace(ev, at=ev.at[:19] + "Z")
        elif roll < 0.1:
            events[i] = msgspec.structs.replace(ev, at=ev.at[:23] + "+00:00")
    assert len(events) >= bulk.BLOCK_TIMES_MIN
    expected = one_by_one(version, events).dump()
    whole = new_state(version)
    whole.fold(events)
    assert whole.dump() == expected
    normalised = verdicts(1_500, 12, 9)
    whole = new_state(version)
    whole.fold(normalised)
    assert whole.dump() == one_by_one(version, normalised).dump()


def fold_streamed(version: str, events: list[Event], rng: random.Random, most: int) -> Any:
    """``events`` folded as a derivation from scratch folds a log's chunks: one
    ``folding()`` block, chunks of 1 … ``most`` - 1 events."""
    state = new_state(version)
    with state.folding() as fold_chunk:
        at = 0
        while at < len(events):
            step = rng.randrange(1, most)
            fold_chunk(events[at : at + step])
            at += step
    return state


@pytest.mark.parametrize("version", ["1", "2", "3", "4", "5"])
@pytest.mark.parametrize("seed", [1, 2])
def test_a_fold_streamed_in_chunks_is_the_event_by_event_fold(version: str, seed: int) -> None:
    events = history(1_500, 4, seed) if version == "1" else verdicts(1_500, 12, seed)
    expected = one_by_one(version, events).dump()
    rng = random.Random(seed)
    for most in (2, 40, 700):
        assert fold_streamed(version, events, rng, most).dump() == expected, most


@pytest.mark.parametrize("seed", range(6))
def test_version_1_fold_streamed_with_shadows_across_keys(seed: int) -> None:
    events = shadowed_history(600, seed)
    expected = one_by_one("1", events).dump()
    assert fold_streamed("1", events, random.Random(seed), 60).dump() == expected


def fold_without_settling(events: list[Event]) -> bytes:
    """The state of version 1's inlined fold of ``events`` (failing) before it settles."""
    state = new_state("1")
    assert isinstance(state, DerivedStateV1)
    with pytest.raises((ValueError, KeyError)):
        state._fold(events, {}, {})
    dumped: bytes = state.dump()
    return dumped


def test_version_1_fold_streamed_that_fails_settles_like_one_fold() -> None:
    """A chunk that fails leaves the state as one ``fold`` of every event up to the failure
    leaves it, the records' ``decay_at`` set: an event out of order, or a signal of an
    unknown kind on a record the inlined case holds (the ``decay_at`` of others pending)."""
    events = history(900, 4, 3)
    signals = [ev for ev in events[:700] if isinstance(ev, SignalEvent)]
    unknown = msgspec.structs.replace(signals[-1], seq=events[699].seq + 1, signal_type="?")
    for last in (events[10], unknown):
        bad = [*events[:700], last]
        reference = new_state("1")
        with pytest.raises((ValueError, KeyError)):
            reference.fold(bad)
        state = new_state("1")
        with pytest.raises((ValueError, KeyError)), state.folding() as fold_chunk:
            for at in range(0, len(bad), 250):
                fold_chunk(bad[at : at + 250])
        assert state.dump() == reference.dump()
        if last is unknown:  # some record held its event time in decay_at when it failed
            assert state.dump() != fold_without_settling(bad)


def test_the_signal_types_of_the_event_type_are_the_weighted_ones() -> None:
    assert get_args(SignalType) == tuple(SIGNAL_WEIGHTS)


def test_decoded_events_share_one_string_per_value_of_a_fixed_set() -> None:
    """The decoder hands out the one object of each signal type, polarity and scope (the
    ``Literal`` fields of :class:`SignalEvent`), and so does a signal built from a caller's
    mapping: a cold derivation allocates, hashes and frees none per event."""
    built = [
        build_signal_event(
            {
                "signal_type": "".join(kind),  # a string object of the caller's own
                "pattern": f"p{i}",
                "preference_type": "layout",
                "polarity": "".join(pol),
                "scope": "".join(scope),
                "project_id": "proj" if scope == "project" else None,
            },
            T0,
            format_ts(T0),
        )
        for i, (kind, pol, scope) in enumerate(
            [("thumbs_up", "positive", "global"), ("thumbs_up", "positive", "project")] * 2
        )
    ]
    decoded = decode_event_lines(b"\n".join(encode_event(ev) for ev in built))
    assert decoded == built
    for a, b in itertools.combinations([*built, *decoded], 2):
        assert isinstance(a, SignalEvent) and isinstance(b, SignalEvent)
        assert a.signal_type is b.signal_type
    for a, b in itertools.combinations(decoded, 2):
        assert isinstance(a, SignalEvent) and isinstance(b, SignalEvent)
        assert a.polarity is b.polarity
        assert (a.scope is b.scope) == (a.scope == b.scope)
