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
from typing import TYPE_CHECKING, Any

from creative_memory.engine.events import Event, SignalEvent
from creative_memory.engine.timeutil import MS_PER_DAY, ts_to_ms

if TYPE_CHECKING:
    from creative_memory.engine.derivation.v2.state import DerivedStateV2


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


def fold_inline(state: DerivedStateV2, events: Iterable[Event]) -> None:
    """Fold ``events`` into ``state`` as one ``state.apply`` per event would (with
    ``state._quiet`` set by the caller), inlining a signal that opens a new row."""
    kinds = state.table.kinds
    decay_ms = state.table.decay_days * MS_PER_DAY
    # per bucket: its model, the model's features, the set it notes touched keys in,
    # and per kind (weight, noise class, reinforcing, the class's Σ w·xᵢ·xⱼ, the kind's
    # Σ w·y·x) once a row of that kind went into the model in this fold
    buckets: dict[str | None, tuple[Any, Any, Any, dict[str, tuple[Any, ...]]]] = {}
    row_ev: SignalEvent | None = None  # opened the open row (state._row is stale then)
    row_bucket: str | None = None
    row_col = 0
    try:
        for ev in events:
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
                    rule = kinds[kind]  # fold_signal
                    entry = buckets.get(pid)
                    if entry is None:
                        model = state.model(pid)
                        entry = buckets[pid] = (model, model.features, model.touched_keys(), {})
                    model, features, touched, per_kind = entry
                    key = (ev.preference_type, ev.pattern)
                    f = features.get(key)
                    if f is None:
                        f = model.feature(key)
                    elif touched is not None:
                        touched.add(key)
                    positive = ev.polarity == "positive"
                    stats = per_kind.get(kind)
                    if stats is None:  # Model.add_row's first look-ups, in its order
                        stats = per_kind[kind] = (
                            rule.weight,
                            rule.noise,
                            rule.reinforcing,
                            model.xx.setdefault(rule.noise, {}),
                            model.xy.setdefault(kind, {}),
                        )
                    w, noise, reinforcing, xx, xy = stats
                    # Model.add_row(kind, [(col, 1)], y): one column, x = 1, denom = 1
                    yy, nrows = model.yy, model.nrows
                    yy[noise] = yy.get(noise, 0) + w
                    nrows[noise] = nrows.get(noise, 0) + 1
                    col = f.col
                    xy[col] = xy.get(col, 0) + (w if positive else -w)
                    diag = (col, col)
                    xx[diag] = xx.get(diag, 0) + w
                    model.fit = None
                    row_ev, row_bucket, row_col = ev, pid, col
                    side = 0 if positive else 1  # Feature.count
                    counts = f.counts.get(kind)
                    if counts is None:
                        counts = f.counts[kind] = [0, 0]
                    counts[side] += 1
                    if reinforcing:
                        f.support[side] += 1
                    tag = ev.tag_text
                    if tag:
                        f.tags.add(tag)
                    at = ev.at  # Feature.touch
                    ms = ts_to_ms(at)
                    f.events += 1
                    if ms >= f.last_ms or not f.last_seen:
                        f.last_ms = ms
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
