"""Raw events: the canonical, append-only truth (docs/engine.md, "Events").

Pure module: event types, their wire/disk encoding, and the validation that turns a caller's
signal mapping into a :class:`SignalEvent` body. No I/O and no clock: the caller supplies
``now`` where a missing timestamp means "now".
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final, Literal, get_args

import msgspec

from creative_memory.engine.constants import SIGNAL_WEIGHTS, SignalType
from creative_memory.engine.errors import ValidationError
from creative_memory.engine.ids import show as _show
from creative_memory.engine.ids import validate_project_id as validate_project_id
from creative_memory.engine.ids import validate_user_id as validate_user_id
from creative_memory.engine.jsondepth import deeper_than
from creative_memory.engine.legacy import validate_record
from creative_memory.engine.text import (
    MAX_TEXT_LENGTH,
    check_name,
    check_tag,
    check_text,
    first_unsafe,
    is_blank,
)
from creative_memory.engine.timeutil import check_normalised_ts, format_ts, parse_ts

#: Version of the on-disk event format (the ``v`` field of every event).
EVENT_FORMAT_VERSION: Final = 1
#: The deepest a refinement's ``diff`` may nest (``{}`` is 1): so every event the store
#: holds fits in an archive (docs/api.md, ``log_refinement``).
MAX_DIFF_DEPTH: Final = 200
#: The highest ``seq`` an event may carry: clients read seqs as ECMAScript numbers, which
#: hold every integer up to 2^53 - 1 exactly (and PostgreSQL's ``bigint`` holds it too).
MAX_SEQ: Final = 2**53 - 1

Polarity = Literal["positive", "negative"]
Scope = Literal["global", "project"]


class _Event(msgspec.Struct, kw_only=True, tag_field="kind", gc=False):
    """Common fields. ``at`` is the event's own (normalised) time; ``recorded_at`` is when it
    was written. ``seq`` is assigned by storage: strictly increasing per user, never reused.
    ``h`` is the hash chain over the log up to and including this event (see
    :func:`chain_hash`), assigned by storage; it makes every prefix of the log addressable.

    Events are not tracked by the cyclic garbage collector (``gc=False``: they hold plain
    data, which never refers back to them), so decoding a log and dropping its events
    costs less."""

    v: int = EVENT_FORMAT_VERSION
    seq: int = 0
    at: str
    recorded_at: str
    h: str = ""


class SignalEvent(_Event, tag="signal"):
    """One piece of feedback about one (type, pattern) of an artifact.

    The fields with a fixed set of values are ``Literal`` types: besides rejecting any
    other value when a line is decoded, the decoder then hands out the one string object
    of each value instead of a new string per event — a cold derivation decodes a whole
    log (docs/performance.md, "Cold derivation (fifth pass)")."""

    signal_type: SignalType
    preference_type: str
    pattern: str
    polarity: Polarity
    scope: Scope
    project_id: str | None = None
    tag_text: str | None = None
    artifact_id: str | None = None
    session_id: str | None = None


class Feature(msgspec.Struct, frozen=True):
    """One (preference type, pattern) listed on a side of a comparison."""

    preference_type: str
    pattern: str


class ComparisonSide(msgspec.Struct, kw_only=True):
    """One side of a comparison: an artifact and the features it listed."""

    artifact_id: str | None = None
    features: list[Feature]


class ComparisonEvent(_Event, tag="comparison"):
    """The user chose one artifact over another (pairwise evidence)."""

    chose: ComparisonSide
    over: ComparisonSide
    dimensions: list[str] | None = None
    scope: Scope = "global"
    project_id: str | None = None
    session_id: str | None = None


class DecayPassEvent(_Event, tag="decay_pass"):
    """A decay run at ``at`` that changed at least one record."""


class RefinementEvent(_Event, tag="refinement"):
    """An entry of the refinement log (a free JSON diff of an artifact)."""

    ref_id: str | None = None  # kept from an imported prototype log; else derived from seq
    artifact_id: str | None = None
    project_id: str | None = None
    diff: Any = msgspec.field(default_factory=dict)


class LegacyRecordEvent(_Event, tag="legacy_record"):
    """One record imported from a prototype-era ``preferences.json`` (a "v0" event)."""

    bucket: str | None  # None = global, else the project id
    record: dict[str, Any]


class ProjectAnchorEvent(_Event, tag="project_anchor"):
    """Marks where a project's record list begins, with no content of its own.

    Erasure replaces the first event of a project bucket with an anchor, so the bucket keeps
    its place in iteration order (docs/engine.md, "Erasure") while the erased content is
    gone; resetting a project that has no records creates one, as the prototype creates an
    empty bucket.
    """

    project_id: str


Event = (
    SignalEvent
    | ComparisonEvent
    | DecayPassEvent
    | RefinementEvent
    | LegacyRecordEvent
    | ProjectAnchorEvent
)

EVENT_KINDS: Final = (
    "signal",
    "comparison",
    "decay_pass",
    "refinement",
    "legacy_record",
    "project_anchor",
)

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Event)


def encode_event(event: Event) -> bytes:
    """The canonical JSON encoding of ``event`` (one line of a log, without the newline)."""
    return _encoder.encode(event)


#: Chain value before the first event of a log.
CHAIN_GENESIS: Final = "0" * 32


def chain_hash(prev: str, event: Event) -> str:
    """``h`` of ``event`` following an event whose ``h`` is ``prev``: SHA-256 over the
    previous link and the event's canonical encoding without its own ``h`` (128 bits, hex)."""
    body = _encoder.encode(msgspec.structs.replace(event, h=""))
    return hashlib.sha256(prev.encode() + body).hexdigest()[:32]


def with_chain(prev: str, event: Event) -> Event:
    """``event`` carrying its chain link after ``prev``."""
    return msgspec.structs.replace(event, h=chain_hash(prev, event))


def rechain(events: Iterable[Event], prev: str = CHAIN_GENESIS) -> list[Event]:
    """``events`` (keeping their ``seq``) linked into a chain that continues after ``prev``
    (by default a new log): what a backend stores when it rewrites or replaces a log."""
    out: list[Event] = []
    for ev in events:
        linked = with_chain(prev, ev)
        prev = linked.h
        out.append(linked)
    return out


def sequenced(events: Sequence[Event], last_seq: int, prev: str) -> list[Event]:
    """``events`` numbered from ``last_seq + 1`` and chained after ``prev``: what a
    backend stores when it appends to a log whose last event has ``seq``/``h`` (or floor)
    ``last_seq``/``prev``."""
    return rechain(
        (msgspec.structs.replace(ev, seq=last_seq + i) for i, ev in enumerate(events, 1)), prev
    )


def numbered_above(events: Sequence[Event], used: int) -> list[Event]:
    """``events`` (strictly increasing ``seq``) as a replaced log keeps them: with their own
    ``seq`` when every one is above ``used`` — the highest number the log has handed out,
    erased events' included — else numbered on from ``used + 1`` in their order, so no
    number is used twice (docs/storage.md, "Imports")."""
    if not events or events[0].seq > used:
        return list(events)
    return [msgspec.structs.replace(ev, seq=used + i) for i, ev in enumerate(events, 1)]


def event_bucket(ev: SignalEvent | ComparisonEvent) -> str | None:
    """The record bucket a signal or a comparison is about: its project id when its scope
    is ``"project"``, else ``None`` (the global bucket)."""
    return ev.project_id if ev.scope == "project" else None


def bucket_of(ev: Event) -> tuple[bool, str | None]:
    """Whether ``ev`` carries evidence for a record bucket, and which (``None`` = global):
    signals, comparisons and legacy records do; decay passes, refinements and project
    anchors do not."""
    if isinstance(ev, SignalEvent | ComparisonEvent):
        return True, event_bucket(ev)
    if isinstance(ev, LegacyRecordEvent):
        return True, ev.bucket
    return False, None


def decode_event(line: bytes | str) -> Event:
    """Inverse of :func:`encode_event`; raises ``msgspec`` errors on a bad line."""
    return _decoder.decode(line)


def decode_event_lines(data: bytes | memoryview) -> list[Event]:
    """Every event of newline-delimited ``data`` (one call; raises on any bad line)."""
    return _decoder.decode_lines(data)


#: Each signal type's one string object (the decoder's too: events share it).
_SIGNAL_TYPES: Final[Mapping[str, SignalType]] = {t: t for t in get_args(SignalType)}


def build_signal_event(signal: Mapping[str, Any], now_ms: int, recorded_at: str) -> SignalEvent:
    """Validate a caller's signal (docs/engine.md, "Events") and build its event.

    Raises :class:`ValidationError` naming the field; pure (``now_ms`` supplies "now").
    """
    if not isinstance(signal, Mapping):
        raise ValidationError("signal", "signal must be a mapping")
    polarity = signal.get("polarity")
    if polarity not in ("positive", "negative"):
        raise ValidationError(
            "polarity", f'Invalid polarity: {_show(polarity)}. Use "positive" or "negative".'
        )
    pattern = check_name("pattern", signal.get("pattern"), max_length=MAX_TEXT_LENGTH)
    ptype = check_name("preference_type", signal.get("preference_type"), max_length=MAX_TEXT_LENGTH)
    given = signal.get("signal_type")
    signal_type = _SIGNAL_TYPES.get(given) if isinstance(given, str) else None
    if signal_type is None:
        raise ValidationError(
            "signal_type",
            f"Unknown signal_type: {_show(given)}. Known: {', '.join(SIGNAL_WEIGHTS)}.",
        )
    scope = signal.get("scope")
    project_id = signal.get("project_id")
    if scope == "global":
        stored_project: str | None = None
    elif scope == "project" and project_id:
        stored_project = validate_project_id(project_id)
    else:
        raise ValidationError(
            "scope",
            f'Invalid scope: {scope}. Use "global" or "project" with a projectId.',
        )
    ts = signal.get("timestamp")
    at = format_ts(now_ms) if ts is None or ts == "" else format_ts(parse_ts(ts, "timestamp"))
    tag_text = _optional_str(signal, "tag_text")
    if tag_text:
        check_tag("tag_text", tag_text, max_length=MAX_TEXT_LENGTH)
    return SignalEvent(
        at=at,
        recorded_at=recorded_at,
        signal_type=signal_type,
        preference_type=ptype,
        pattern=pattern,
        polarity=polarity,
        scope=scope,
        project_id=stored_project,
        tag_text=tag_text or None,
        artifact_id=_optional_str(signal, "artifact_id"),
        session_id=_optional_str(signal, "session_id"),
    )


def _optional_str(mapping: Mapping[str, Any], key: str) -> str | None:
    value = mapping.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValidationError(key, f"{key} must be a string or null, got {type(value).__name__}")
    if value and key != "tag_text":
        check_text(key, value, max_length=MAX_TEXT_LENGTH)
    return value


@contextlib.contextmanager
def _named(where: str | None, **renamed: str) -> Iterator[None]:
    """A :class:`ValidationError` raised inside, about a field of the event at ``where``:
    its field named ``<where>.<field>`` (``renamed`` maps a builder's argument name to the
    event's field, e.g. ``timestamp`` to ``at``). ``where=None``: left as it is."""
    try:
        yield
    except ValidationError as exc:
        if where is None:
            raise
        name = renamed.get(exc.field, exc.field)
        raise ValidationError(f"{where}.{name}", f"{where}: {exc}") from None


def check_comparison(ev: ComparisonEvent, where: str | None = None) -> ComparisonEvent:
    """``ev`` if it is a comparison as ingestion stores it (docs/engine.md, "Events"):
    every listed feature has a non-empty, plain-line ``preference_type`` and ``pattern``
    (a side may list none: the wire allows an empty ``signals`` list), and ``project_id``
    is a safe id with ``scope`` ``"project"``, absent with ``"global"``. Raises
    :class:`ValidationError` naming the field (``<where>.<field>`` when ``where`` is given)."""
    with _named(where):
        for side_name, side in (("chose", ev.chose), ("over", ev.over)):
            for i, f in enumerate(side.features):
                at = f"{side_name}.features[{i}]"
                check_name(f"{at}.preference_type", f.preference_type, max_length=MAX_TEXT_LENGTH)
                check_name(f"{at}.pattern", f.pattern, max_length=MAX_TEXT_LENGTH)
        _check_scope(ev.scope, ev.project_id)
    return ev


def _check_scope(scope: str, project_id: str | None) -> None:
    """``project_id`` a safe id for a project event, absent for a global one."""
    if scope == "project":
        validate_project_id(project_id)
    elif scope != "global":
        raise ValidationError("scope", f"scope {_show(scope)} is not known")
    elif project_id is not None:
        raise ValidationError(
            "project_id",
            f"project_id {_show(project_id)} is set on a global event "
            '(a project event has scope "project")',
        )


def _check_signal(ev: SignalEvent, where: str) -> None:
    """``ev`` must be what :func:`build_signal_event` makes of its own fields (the one
    validation of live ingestion): else the first field that differs is named."""
    fields = {name: getattr(ev, name) for name in _SIGNAL_INPUTS}
    with _named(where, timestamp="at"):
        _check_scope(ev.scope, ev.project_id)
        rebuilt = build_signal_event({**fields, "timestamp": ev.at}, 0, ev.recorded_at)
    for name in ("at", *_SIGNAL_INPUTS):
        stored, made = getattr(ev, name), getattr(rebuilt, name)
        if stored != made:
            raise ValidationError(
                f"{where}.{name}",
                f"{where}.{name} is {_show(stored)}, which ingestion stores as {_show(made)}",
            )


#: The fields of a signal event that ingestion builds from the caller's signal.
_SIGNAL_INPUTS: Final = (
    "signal_type",
    "preference_type",
    "pattern",
    "polarity",
    "scope",
    "project_id",
    "tag_text",
    "artifact_id",
    "session_id",
)


def validate_stored_event(ev: Event, where: str = "event") -> None:
    """Semantic checks for an event read from outside (an archive): the event must be one
    the store could have written — the format version it writes, a ``seq`` it can hold,
    times as it writes them, and the rules ingestion applies when it creates the event
    (signals rebuilt by :func:`build_signal_event`, comparisons by
    :func:`check_comparison`). Raises :class:`ValidationError` naming ``<where>.<field>``."""
    if ev.v != EVENT_FORMAT_VERSION:
        raise ValidationError(
            f"{where}.v",
            f"{where}.v is {_show(ev.v)}: this version reads event format "
            f"{EVENT_FORMAT_VERSION} only",
        )
    if not 0 < ev.seq <= MAX_SEQ:
        raise ValidationError(
            f"{where}.seq", f"{where}.seq {ev.seq} is outside 1..{MAX_SEQ} (2^53 - 1)"
        )
    check_normalised_ts(ev.at, f"{where}.at")
    check_normalised_ts(ev.recorded_at, f"{where}.recorded_at")
    if isinstance(ev, SignalEvent):
        _check_signal(ev, where)
    elif isinstance(ev, ComparisonEvent):
        check_comparison(ev, where)
    elif isinstance(ev, ProjectAnchorEvent):
        with _named(where):
            validate_project_id(ev.project_id)
    elif isinstance(ev, LegacyRecordEvent):
        if ev.bucket is not None:
            with _named(where, project_id="bucket"):
                validate_project_id(ev.bucket)
        validate_record(ev.record, f"{where}.record", ev.bucket)
    check_event_text(ev, where)


def _text(field: str, value: str | None, tag: bool = False, name: bool = False) -> None:
    if value:
        check = check_tag if tag else check_name if name else check_text
        check(field, value, max_length=MAX_TEXT_LENGTH)


def check_event_text(ev: Event, where: str = "event") -> None:
    """Every stored string of ``ev`` that is printed later (patterns, preference types,
    tags, artifact/session/project ids, dimensions) is one plain line (docs/engine.md,
    "Stored strings"); raises :class:`ValidationError` naming the field."""
    if isinstance(ev, SignalEvent):
        values = (ev.pattern, ev.preference_type, ev.tag_text, ev.artifact_id, ev.session_id)
        joined = "".join(v for v in values if v)
        if (
            first_unsafe(joined) is None
            and max(len(v or "") for v in values) <= MAX_TEXT_LENGTH
            and not is_blank(ev.pattern)
            and not is_blank(ev.preference_type)
        ):
            return  # the common case, in one search (project_id is a checked safe id)
        _text(f"{where}.pattern", ev.pattern, name=True)
        _text(f"{where}.preference_type", ev.preference_type, name=True)
        _text(f"{where}.tag_text", ev.tag_text, tag=True)
        _text(f"{where}.artifact_id", ev.artifact_id)
        _text(f"{where}.session_id", ev.session_id)
        _text(f"{where}.project_id", ev.project_id)
    elif isinstance(ev, ComparisonEvent):
        for side_name, side in (("chose", ev.chose), ("over", ev.over)):
            _text(f"{where}.{side_name}.artifact_id", side.artifact_id)
            for i, f in enumerate(side.features):
                _text(f"{where}.{side_name}.features[{i}].pattern", f.pattern, name=True)
                _text(
                    f"{where}.{side_name}.features[{i}].preference_type",
                    f.preference_type,
                    name=True,
                )
        for i, d in enumerate(ev.dimensions or ()):
            _text(f"{where}.dimensions[{i}]", d)
        _text(f"{where}.project_id", ev.project_id)
        _text(f"{where}.session_id", ev.session_id)
    elif isinstance(ev, RefinementEvent):
        _text(f"{where}.artifact_id", ev.artifact_id)
        _text(f"{where}.project_id", ev.project_id)
    elif isinstance(ev, LegacyRecordEvent):
        for key in ("pattern", "preference_type", "id"):
            value = ev.record.get(key)
            text = value if isinstance(value, str) else None
            _text(f"{where}.record.{key}", text, name=key != "id")
        for i, tag in enumerate(ev.record.get("explicit_tags") or ()):
            _text(f"{where}.record.explicit_tags[{i}]", tag if isinstance(tag, str) else None, True)
    elif isinstance(ev, ProjectAnchorEvent):
        _text(f"{where}.project_id", ev.project_id)


_REFINEMENT_KEYS: Final = frozenset({"artifact_id", "project_id", "diff"})


def build_refinement_event(refinement: Mapping[str, Any], recorded_at: str) -> RefinementEvent:
    """A validated ``refinement`` event from ``artifact_id``, ``project_id`` and ``diff``
    (any JSON value; ``None`` = ``{}``), stamped ``recorded_at``. Another key is refused
    (``refinement={"diff_": …}`` would log an empty diff)."""
    unknown = [k for k in refinement if k not in _REFINEMENT_KEYS]
    if unknown:
        raise ValidationError(
            "refinement",
            f"refinement has no key {unknown[0]!r}: it takes artifact_id, project_id and diff",
        )
    artifact_id = refinement.get("artifact_id")
    project_id = refinement.get("project_id")
    for name, value in (("artifact_id", artifact_id), ("project_id", project_id)):
        if value is not None and not isinstance(value, str):
            raise ValidationError(name, f"{name} must be a string or null")
        if value:
            check_text(name, value, max_length=MAX_TEXT_LENGTH)
    diff = refinement.get("diff")
    if diff is None:
        diff = {}
    too_deep = ValidationError("diff", f"diff is nested deeper than {MAX_DIFF_DEPTH} levels")
    try:
        encoded = msgspec.json.encode(diff)
    except (TypeError, msgspec.EncodeError) as exc:
        raise ValidationError("diff", f"diff must be JSON-serialisable ({exc})") from exc
    except RecursionError:  # msgspec's own guard, far deeper than the limit
        raise too_deep from None
    if deeper_than(encoded, MAX_DIFF_DEPTH):
        raise too_deep
    return RefinementEvent(
        at=recorded_at,
        recorded_at=recorded_at,
        artifact_id=artifact_id,
        project_id=project_id,
        diff=diff,
    )


def mentions(ev: Event, preference_type: str, pattern: str, bucket: str | None) -> bool:
    """Whether ``ev`` is evidence about (``preference_type``, ``pattern``) in ``bucket``
    (``None`` = global): a signal or legacy record for it, or a comparison naming it on
    either side within its ``dimensions`` (the type prefixes it keeps: a feature of
    another type is no evidence of it). Other events never are."""
    has, b = bucket_of(ev)
    if not has or b != bucket:
        return False
    if isinstance(ev, SignalEvent):
        return ev.preference_type == preference_type and ev.pattern == pattern
    if isinstance(ev, LegacyRecordEvent):
        r = ev.record
        return r.get("preference_type") == preference_type and r.get("pattern") == pattern
    if isinstance(ev, ComparisonEvent):
        dims = ev.dimensions
        if dims is not None and not any(preference_type.startswith(d) for d in dims):
            return False
        return any(
            f.preference_type == preference_type and f.pattern == pattern
            for f in (*ev.chose.features, *ev.over.features)
        )
    return False
