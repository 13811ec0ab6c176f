"""Version 2's bulk fold with its commonest signal inlined (docs/performance.md, "Cold
derivation (second pass)").

A cold derivation folds every event of a log through
:meth:`~.state.DerivedStateV2.fold`. Almost every signal there opens a new one-column row
of its bucket's model (the artifact verdict of one listed feature, or a statement); this
module folds such a signal without the calls of :meth:`~.state.DerivedStateV2.apply`,
doing exactly what ``apply`` → ``fold_signal`` → ``Model.add_row``, ``Feature.count``
and ``Feature.touch`` do, in the same order (so every dictionary of the statistics gets
its keys in the same order and every integer the same value). Every other event — a
signal that may continue the open row, one out of order, any other kind — goes through
``apply`` itself. The open row of an inlined signal is kept as the event that opened it
and written to the state's ``_row`` (the form ``fold_signal`` reads and ``dump`` stores)
before ``apply`` runs and when the fold ends.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import repeat
from typing import TYPE_CHECKING, Any

from creative_memory.engine.events import Event, SignalEvent
from creative_memory.engine.timeutil import MS_PER_DAY, ts_to_ms, ts_to_ms_normalised

if TYPE_CHECKING:
    from creative_memory.engine.derivation.v2.state import DerivedStateV2

#: At most this many look-ups kept between folds (a few MB for a rich vocabulary).
INLINE_MAX = 1 << 14
#: A fold of at least this many events reads their times in one block
#: (:func:`~creative_memory.engine.timeutil.ts_to_ms_normalised`).
BLOCK_TIMES_MIN = 512


def _row_key(ev: SignalEvent) -> tuple[Any, ...]:
    """The key ``fold_signal`` gives the row ``ev`` opens."""
    return (
        ev.artifact_id,
        ev.session_id,
        ev.at,
        ev.signal_type,
        ev.polarity,
        ev.scope,
        ev.tag_text,
    )


def _look_up(state: DerivedStateV2, pid: str | None, key: Any, kind: str, positive: bool) -> Any:
    """What ``fold_signal`` looks up (and creates, in its order) for the first signal of a
    (bucket, feature, kind, polarity) in a fold: the model (with its bucket), the feature
    (noted as touched by a model that notes them), the statistics ``Model.add_row``
    updates for a one-column row of ``kind``, and ``Feature.count``'s counter pair."""
    rule = state.table.kinds[kind]
    model = state.model(pid)
    f = model.features.get(key)
    touched = model.touched_keys()
    if f is None:
        f = model.feature(key)
    elif touched is not None:
        touched.add(key)
    w = rule.weight
    xx = model.xx.setdefault(rule.noise, {})  # Model.add_row's first look-ups, in its order
    xy = model.xy.setdefault(kind, {})
    col = f.col
    return (
        model,
        f,
        touched,
        key,
        w,
        w if positive else -w,  # w·y·x // denom, x = 1, denom = 1
        rule.noise,
        rule.reinforcing,
        xx,
        xy,
        col,
        (col, col),
        f.counts.setdefault(kind, [0, 0]),  # Feature.count
        0 if positive else 1,
    )


def fold_inline(state: DerivedStateV2, events: Iterable[Event]) -> None:
    """Fold ``events`` into ``state`` as one ``state.apply`` per event would (with
    ``state._quiet`` set by the caller), inlining a signal that opens a new row."""
    decay_ms = state.table.decay_days * MS_PER_DAY
    # per (bucket, type, pattern, kind, polarity) of an inlined signal: what _look_up
    # found. The objects stay the same from fold to fold: nothing replaces a model, a
    # feature, a statistics dictionary or a counter pair, and none loses a key — except
    # DerivedStateV2.load_extra, which empties this; materialising empties it too (it is
    # kept for the chunks of one derivation, and bounded by INLINE_MAX entries)
    found: dict[tuple[str | None, str, str, str, str], Any] = state._inline
    row_ev: SignalEvent | None = None  # opened the open row (state._row is stale then)
    row_bucket: str | None = None
    row_col = 0
    last_at, last_ms = "", 0  # the last time read by Feature.touch (verdicts share one)
    # each event's time as ts_to_ms reads it, where read in one block (else None)
    times: Iterable[int | None] = repeat(None)
    if isinstance(events, list) and len(events) >= BLOCK_TIMES_MIN:
        times = ts_to_ms_normalised([ev.at for ev in events])
    try:
        for ev, ms in zip(events, times, strict=False):  # (times may be endless)
            if type(ev) is SignalEvent and (ev.seq > state.last_seq or not state.event_count):
                pid = ev.project_id if ev.scope == "project" else None  # event_bucket
                art = ev.artifact_id
                kind = ev.signal_type
                if art is None:
                    inline = True
                elif row_ev is not None:  # fold_signal's test, field by field
                    inline = not (
                        row_ev.artifact_id == art
                        and row_ev.session_id == ev.session_id
                        and row_ev.at == ev.at
                        and row_ev.signal_type == kind
                        and row_ev.polarity == ev.polarity
                        and row_ev.scope == ev.scope
                        and row_ev.tag_text == ev.tag_text
                        and row_bucket == pid
                    )
                else:
                    open_row = state._row
                    inline = open_row is None or open_row[0] != _row_key(ev) or open_row[1] != pid
                if inline:
                    state.last_seq = ev.seq  # DerivedState.apply
                    state.event_count += 1
                    polarity = ev.polarity
                    at_key = (pid, ev.preference_type, ev.pattern, kind, polarity)
                    seen = found.get(at_key)
                    if seen is None:
                        if len(found) >= INLINE_MAX:
                            found.clear()
                        key = (at_key[1], at_key[2])
                        seen = found[at_key] = _look_up(
                            state, pid, key, kind, polarity == "positive"
                        )
                    elif seen[2] is not None:  # ModelV3.feature notes the key
                        seen[2].add(seen[3])
                    model, f, _, _, w, wy, noise, reinforcing, xx, xy, col, diag, counts, side = (
                        seen
                    )
                    # Model.add_row(kind, [(col, 1)], y)
                    yy, nrows = model.yy, model.nrows
                    yy[noise] = yy.get(noise, 0) + w
                    nrows[noise] = nrows.get(noise, 0) + 1
                    xy[col] = xy.get(col, 0) + wy
                    xx[diag] = xx.get(diag, 0) + w
                    model.fit = None
                    row_ev, row_bucket, row_col = ev, pid, col
                    counts[side] += 1  # Feature.count
                    if reinforcing:
                        f.support[side] += 1
                    tag = ev.tag_text
                    if tag:
                        f.tags.add(tag)
                    at = ev.at  # Feature.touch
                    if at != last_at:
                        last_ms = ts_to_ms(at) if ms is None else ms
                        last_at = at
                    f.events += 1
                    if last_ms >= f.last_ms or not f.last_seen:
                        f.last_ms = last_ms
                        f.last_seen = at
                    f.decay_at_ms = f.last_ms + decay_ms
                    f.decay_steps = 0
                    f.archived = False
                    state._stale = True
                    continue
            if row_ev is not None:
                state._row = (_row_key(row_ev), row_bucket, [(row_col, 1)])
                row_ev = None
            state.apply(ev)
    finally:
        if row_ev is not None:
            state._row = (_row_key(row_ev), row_bucket, [(row_col, 1)])
