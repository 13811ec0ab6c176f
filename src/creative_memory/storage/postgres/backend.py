"""The PostgreSQL backend's storage class (the package docstring has the design)."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
import psycopg

from creative_memory.engine.erasure_notes import ErasureNote, remember
from creative_memory.engine.errors import LogDamaged, StorageError
from creative_memory.engine.events import (
    CHAIN_GENESIS,
    Event,
    decode_event,
    numbered_above,
    rechain,
    sequenced,
)
from creative_memory.engine.logcheck import REPAIR_HINT, RawLine, RawLog, undecodable
from creative_memory.engine.settings import UserSettings
from creative_memory.storage.base import (
    Appended,
    ImportDecision,
    ImportPlan,
    LogSnapshot,
    RepairDecision,
    SettingsSeen,
)
from creative_memory.storage.files.cache import DEFAULT_CACHE_CAPACITY
from creative_memory.storage.postgres import reading
from creative_memory.storage.postgres.appends import Seen
from creative_memory.storage.postgres.connections import DEFAULT_POOL_SIZE, Connections
from creative_memory.storage.postgres.writer import TAILS_KEPT, AppendWriter, insert_events

_settings_decoder = msgspec.json.Decoder(UserSettings)
_notes_decoder = msgspec.json.Decoder(list[ErasureNote])
_encoder = msgspec.json.Encoder()


class PostgresStorage:
    """Per-user event logs, settings and derived artefacts in one PostgreSQL database."""

    def __init__(
        self,
        url: str,
        *,
        cache_capacity: int = DEFAULT_CACHE_CAPACITY,
        min_size: int = 1,
        max_size: int = DEFAULT_POOL_SIZE,
        connect_timeout: float = 10.0,
    ) -> None:
        self.cache_capacity = cache_capacity
        self._seen: dict[str, SettingsSeen] = {}  # user -> the settings as last seen here
        self._db = Connections(
            url, min_size=min_size, max_size=max_size, connect_timeout=connect_timeout
        )
        self._writer = AppendWriter(self._db, self._remember_settings)

    def describe(self) -> str:
        """The database URL with any password redacted."""
        return self._db.described

    def close(self) -> None:
        """Close the connection pool (idempotent)."""
        self._db.close()

    def __enter__(self) -> PostgresStorage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _decode(self, user_id: str, seq: int, line: bytes) -> Event:
        try:
            return decode_event(line)
        except msgspec.DecodeError as exc:
            raise LogDamaged(
                f"{self._db.described}: user {user_id} event seq {seq} is not a valid event "
                f"({exc}); {REPAIR_HINT}"
            ) from exc

    @staticmethod
    def _purge_derived(conn: psycopg.Connection[tuple[Any, ...]], user_id: str) -> None:
        """Delete every derived row of the user (caller holds the user's lock)."""
        conn.execute("DELETE FROM cm_cache WHERE user_id = %s", (user_id,))
        conn.execute("DELETE FROM cm_snapshots WHERE user_id = %s", (user_id,))

    # -- queries -----------------------------------------------------------------------------
    def user_exists(self, user_id: str) -> bool:
        """Whether the user has a row (a log or settings)."""
        with self._db.conn() as conn:
            row = conn.execute(
                "SELECT generation IS NOT NULL OR settings IS NOT NULL "
                "FROM cm_users WHERE user_id = %s",
                (user_id,),
            ).fetchone()
        return bool(row and row[0])

    def event_count(self, user_id: str) -> int:
        """How many events the user's log holds."""
        with self._db.conn() as conn:
            row = conn.execute(
                "SELECT count(*) FROM cm_events WHERE user_id = %s", (user_id,)
            ).fetchone()
        return int(row[0]) if row else 0

    def user_files(self, user_id: str) -> list[str]:
        """What is stored for the user, named like the file backend's artefacts: ``events``
        (the log), ``settings``, ``snapshot`` and ``cache/<key>`` per cache entry."""
        with self._db.conn() as conn:
            row = conn.execute(
                "SELECT generation IS NOT NULL, settings IS NOT NULL, "
                "EXISTS (SELECT 1 FROM cm_snapshots s WHERE s.user_id = u.user_id) "
                "FROM cm_users u WHERE user_id = %s",
                (user_id,),
            ).fetchone()
            keys = conn.execute(
                "SELECT key FROM cm_cache WHERE user_id = %s", (user_id,)
            ).fetchall()
        names = [f"cache/{k}" for (k,) in keys]
        if row is not None:
            parts = ("events", "settings", "snapshot")
            names += [n for n, present in zip(parts, row, strict=True) if present]
        return sorted(names)

    def read_events(
        self,
        user_id: str,
        *,
        generation: str | None = None,
        start: int = 0,
        sink: Callable[[list[Event]], None] | None = None,
    ) -> LogSnapshot:
        """See :func:`~creative_memory.storage.postgres.reading.read_events`."""
        return reading.read_events(
            self._db, self._decode, user_id, generation=generation, start=start, sink=sink
        )

    def read_after_cached(self, user_id: str, is_cached: Callable[[str], bool]) -> LogSnapshot:
        """See :func:`~creative_memory.storage.postgres.reading.read_after_cached`."""
        return reading.read_after_cached(self._db, self._decode, user_id, is_cached)

    def generation(self, user_id: str) -> str:
        """The log's current generation ("" when there is no log)."""
        with self._db.conn() as conn:
            row = conn.execute(
                "SELECT generation FROM cm_users WHERE user_id = %s", (user_id,)
            ).fetchone()
        return str(row[0]) if row is not None and row[0] is not None else ""

    def rewrite_history(self, user_id: str) -> tuple[str, list[ErasureNote]]:
        """The log's generation and the erasure notes kept with it (one statement)."""
        with self._db.conn() as conn:
            row = conn.execute(
                "SELECT generation, erasures::text FROM cm_users WHERE user_id = %s", (user_id,)
            ).fetchone()
        if row is None or row[0] is None:
            return "", []
        return str(row[0]), self._notes(user_id, row[1])

    def user_ids(self) -> list[str]:
        """The users whose row holds a log or settings."""
        with self._db.conn() as conn:
            rows = conn.execute(
                "SELECT user_id FROM cm_users "
                "WHERE generation IS NOT NULL OR settings IS NOT NULL ORDER BY user_id"
            ).fetchall()
        return [str(r[0]) for r in rows]

    def read_raw(self, user_id: str) -> RawLog | None:
        """The log with its rows undecoded (one transaction: a consistent read)."""
        with self._db.conn() as conn, conn.transaction():
            return self._raw(conn, user_id)

    def _raw(self, conn: psycopg.Connection[tuple[Any, ...]], user_id: str) -> RawLog | None:
        """:meth:`read_raw` in ``conn``'s transaction: a row is named by its ``seq``."""
        row = conn.execute(
            "SELECT generation, seq_floor, erasures::text FROM cm_users WHERE user_id = %s",
            (user_id,),
        ).fetchone()
        if row is None or row[0] is None:
            return None
        problem = None
        try:
            notes: list[ErasureNote] | None = self._notes(user_id, row[2])
        except LogDamaged as exc:  # a repair writes them anew, as a file's new header
            notes, problem = None, f"the erasure notes: {undecodable(exc)}"
        lines = [
            RawLine(where=f"seq {seq}", seq=int(seq), data=bytes(line))
            for seq, line in self._rows(conn, user_id)
        ]
        return RawLog(
            generation=str(row[0]),
            floor=int(row[1]),
            notes=notes,
            header_problem=problem,
            lines=lines,
        )

    def repair(self, user_id: str, decide: RepairDecision) -> None:
        """In one transaction holding the user's lock: the log read undecoded, replaced by
        what ``decide`` keeps (every row deleted, the kept events inserted chained anew)."""
        with self._db.tx(user_id) as conn:
            raw = self._raw(conn, user_id)
            plan = None if raw is None else decide(raw)
            if raw is None or plan is None:
                return
            conn.execute("DELETE FROM cm_events WHERE user_id = %s", (user_id,))
            insert_events(conn, user_id, rechain(plan.events))
            notes = remember(raw.notes or [], ErasureNote(), raw.generation)
            self._renew(conn, user_id, plan.floor, notes)
        self._writer.forget(user_id)

    def _notes(self, user_id: str, text: str | None) -> list[ErasureNote]:
        try:
            return _notes_decoder.decode(text or "[]")
        except msgspec.DecodeError as exc:
            raise LogDamaged(
                f"{self._db.described}: unreadable erasure notes of user {user_id} ({exc}); "
                f"{REPAIR_HINT}"
            ) from exc

    # -- writes ------------------------------------------------------------------------------
    def append(self, user_id: str, events: Sequence[Event]) -> list[Event]:
        """Durably append ``events`` in one transaction; returns them as stored."""
        return self.append_positioned(user_id, events).events

    def append_positioned(
        self,
        user_id: str,
        events: Sequence[Event],
        *,
        if_settings: SettingsSeen | None = None,
        if_generation: str | None = None,
    ) -> Appended:
        """Positions are ``seq`` values, as in :meth:`read_events`: ``start`` is the seq of
        the last event before the new ones (0 when none), ``end`` the last new seq.
        Concurrent appends share one transaction (:class:`.writer.AppendWriter`);
        ``if_settings`` is checked in it. An append on ``if_generation`` is the locked
        transaction, which checks the generation."""
        seen = None if if_settings is None else if_settings.token
        if seen is not None and not isinstance(seen, Seen):
            raise ValueError("if_settings: a token of another storage")
        if not events:
            return Appended(events=[], generation=self.generation(user_id), start=0, end=0)
        return self._writer.append(user_id, events, seen, if_generation)

    def rewrite(
        self,
        user_id: str,
        keep: Callable[[Event], Event | None],
        *,
        note: ErasureNote | None = None,
        everything: bool = False,
    ) -> int:
        """Rewrite the log through ``keep`` in one transaction and purge derived rows; with
        a ``note`` (an erasure) also when nothing changes: a new generation, the note kept.
        With ``everything`` (a full reset) rows or notes that no longer decode do not stop
        it: what must be erased need not be read (:meth:`_erase_unread`)."""
        with self._db.tx(user_id) as conn:
            row = conn.execute(
                "SELECT generation, seq_floor, erasures::text FROM cm_users WHERE user_id = %s",
                (user_id,),
            ).fetchone()
            if row is None or row[0] is None:
                return 0
            changed: int | None
            try:
                notes = self._notes(user_id, row[2])
                events = self._whole_log(conn, user_id)
            except StorageError:  # a row no longer decodes: a full erasure goes on
                if not everything:
                    raise
                changed = self._erase_unread(conn, user_id, row, note)
            else:
                changed = self._rewrite_read(conn, user_id, row, notes, events, keep, note)
            if changed is None:
                return 0
        self._writer.forget(user_id)
        return changed

    def _rewrite_read(
        self,
        conn: psycopg.Connection[tuple[Any, ...]],
        user_id: str,
        row: tuple[Any, ...],
        notes: list[ErasureNote],
        events: list[Event],
        keep: Callable[[Event], Event | None],
        note: ErasureNote | None,
    ) -> int | None:
        """:meth:`rewrite` of a log read whole (``row``: the user's generation, seq floor
        and notes): the events changed, or ``None`` when nothing is written."""
        if note is not None:
            notes = remember(notes, note, row[0])
        max_seq = max([int(row[1]), *(e.seq for e in events)])
        changed = 0
        first_change: int | None = None  # index of the first dropped or changed event
        survivors: list[Event] = []
        for i, ev in enumerate(events):
            new = keep(ev)
            if new is not ev:
                changed += 1
                if first_change is None:
                    first_change = i
            if new is not None:
                survivors.append(new)
        if note is None and (not changed or first_change is None):
            return None
        if first_change is not None:
            kept = rechain(survivors)
            # Events before the first change keep their rows — unless the chain stored with
            # them no longer follows (an event edited outside creative-memory): the rewrite
            # chains the log again from there, as the file store does. Everything from that
            # point on is deleted and the survivors re-inserted.
            cut = next((i for i in range(first_change) if kept[i].h != events[i].h), first_change)
            cut_seq = events[cut].seq
            conn.execute(
                "DELETE FROM cm_events WHERE user_id = %s AND seq >= %s", (user_id, cut_seq)
            )
            insert_events(conn, user_id, [e for e in kept if e.seq >= cut_seq])
        self._renew(conn, user_id, max_seq, notes)
        return changed

    def _erase_unread(
        self,
        conn: psycopg.Connection[tuple[Any, ...]],
        user_id: str,
        row: tuple[Any, ...],
        note: ErasureNote | None,
    ) -> int:
        """A full erasure of a log whose rows (or notes) no longer all decode, without
        decoding them (docs/storage.md, "Erasure"): every row deleted, the seq floor raised
        to the highest seq any row holds, the notes kept when they still decode. Returns
        the rows deleted."""
        deleted = conn.execute(
            "DELETE FROM cm_events WHERE user_id = %s RETURNING seq", (user_id,)
        ).fetchall()
        try:
            kept = self._notes(user_id, row[2])
        except StorageError:
            kept = []
        notes = remember(kept, note or ErasureNote(), row[0])
        self._renew(conn, user_id, max([int(row[1]), *(int(r[0]) for r in deleted)]), notes)
        return len(deleted)

    def _renew(
        self,
        conn: psycopg.Connection[tuple[Any, ...]],
        user_id: str,
        floor: int,
        notes: list[ErasureNote],
    ) -> None:
        """A rewritten log's new generation, seq floor and notes, and no derived row: in the
        rewrite's transaction (derived rows may hold erased content)."""
        conn.execute(
            "UPDATE cm_users SET generation = %s, seq_floor = %s, erasures = %s::jsonb "
            "WHERE user_id = %s",
            (secrets.token_hex(8), floor, _encoder.encode(notes).decode(), user_id),
        )
        self._purge_derived(conn, user_id)

    def _whole_log(self, conn: psycopg.Connection[tuple[Any, ...]], user_id: str) -> list[Event]:
        """Every event of the log, in ``conn``'s transaction (holding the user's lock, for a
        write that depends on the whole log)."""
        return [self._decode(user_id, seq, line) for seq, line in self._rows(conn, user_id)]

    @staticmethod
    def _rows(conn: psycopg.Connection[tuple[Any, ...]], user_id: str) -> list[Any]:
        """Every ``(seq, line)`` row of the user's log, in ``seq`` order, undecoded."""
        return conn.execute(
            "SELECT seq, line FROM cm_events WHERE user_id = %s ORDER BY seq",
            (user_id,),
            binary=True,
        ).fetchall()

    def replace_all(self, user_id: str, events: Sequence[Event]) -> None:
        """Atomically replace the whole log with ``events`` (the chain recomputed; their
        ``seq`` kept unless a number was used here before: :func:`numbered_above`)."""
        with self._db.tx(user_id) as conn:
            row = conn.execute(
                "SELECT generation, seq_floor, erasures::text FROM cm_users WHERE user_id = %s",
                (user_id,),
            ).fetchone()
            self._replace(conn, user_id, events, row)
        self._writer.forget(user_id)

    def _replace(
        self,
        conn: psycopg.Connection[tuple[Any, ...]],
        user_id: str,
        events: Sequence[Event],
        row: tuple[Any, ...] | None,
    ) -> None:
        """:meth:`replace_all` in ``conn``'s transaction (holding the user's lock), the
        user's row holding ``(generation, seq_floor, erasures)`` (``None``: no row yet): a
        rewrite that erases nothing, noted all the same."""
        used = 0 if row is None else int(row[1])  # the highest seq ever assigned here
        linked = rechain(numbered_above(events, used))
        generation = secrets.token_hex(8)
        new_floor = max([used, *(e.seq for e in linked)])
        if row is None:
            conn.execute(
                "INSERT INTO cm_users (user_id, generation, seq_floor) VALUES (%s, %s, %s)",
                (user_id, generation, new_floor),
            )
        else:
            notes = self._notes(user_id, row[2])
            if row[0] is not None:  # the log replaced: its note says nothing was erased
                notes = remember(notes, ErasureNote(), row[0])
            conn.execute(
                "UPDATE cm_users SET generation = %s, seq_floor = %s, erasures = %s::jsonb "
                "WHERE user_id = %s",
                (generation, new_floor, _encoder.encode(notes).decode(), user_id),
            )
        conn.execute("DELETE FROM cm_events WHERE user_id = %s", (user_id,))
        insert_events(conn, user_id, linked)
        self._purge_derived(conn, user_id)

    def import_events(self, user_id: str, decide: ImportDecision) -> ImportPlan:
        """One transaction holding the user's lock: read the log and the settings,
        ``decide``, write (docs/storage.md, "Imports"); all or nothing."""
        text: str | None = None
        with self._db.tx(user_id) as conn:
            row = conn.execute(
                "SELECT generation, seq_floor, erasures::text, settings::text FROM cm_users "
                "WHERE user_id = %s",
                (user_id,),
            ).fetchone()
            events = self._whole_log(conn, user_id)
            stored = None if row is None or row[3] is None else row[3]
            plan = decide(
                events, None if stored is None else self._decode_settings(user_id, stored)
            )
            floor = None if row is None else int(row[1])
            if plan.replace:
                self._replace(conn, user_id, plan.events, None if row is None else row[:3])
            elif plan.events:
                generation = None if row is None else row[0]
                if generation is None:  # no log yet: it begins now
                    generation = secrets.token_hex(8)
                    conn.execute(
                        "INSERT INTO cm_users (user_id, generation) VALUES (%s, %s) "
                        "ON CONFLICT (user_id) DO UPDATE SET generation = EXCLUDED.generation",
                        (user_id, generation),
                    )
                prev = events[-1].h if events else CHAIN_GENESIS
                out = sequenced(plan.events, floor or 0, prev)
                insert_events(conn, user_id, out)
                conn.execute(
                    "UPDATE cm_users SET seq_floor = %s WHERE user_id = %s",
                    (out[-1].seq, user_id),
                )
            if plan.settings is not None:
                text = self._store_settings(conn, user_id, plan.settings)
        self._writer.forget(user_id)
        if text is not None:
            self._remember_settings(user_id, text)
        return plan

    # -- settings ----------------------------------------------------------------------------
    def _decode_settings(self, user_id: str, text: str) -> UserSettings:
        try:
            return _settings_decoder.decode(text)
        except msgspec.DecodeError as exc:
            raise LogDamaged(
                f"{self._db.described}: unreadable settings of user {user_id} ({exc}); "
                f"{REPAIR_HINT}"
            ) from exc

    def read_settings(self, user_id: str) -> UserSettings | None:
        """The user's settings, or ``None`` when there are none."""
        return self.recent_settings(user_id, fresh=True).settings

    def recent_settings(self, user_id: str, *, fresh: bool = False) -> SettingsSeen:
        """The settings as this process last read or wrote them (no round trip), else —
        and with ``fresh`` — read now; with a token either way (the append checks it)."""
        if not fresh and (seen := self._seen.get(user_id)) is not None:
            return seen
        with self._db.conn() as conn:
            row = conn.execute(
                "SELECT settings::text FROM cm_users WHERE user_id = %s", (user_id,)
            ).fetchone()
        return self._remember_settings(user_id, None if row is None else row[0])

    def _remember_settings(self, user_id: str, text: str | None) -> SettingsSeen:
        """The settings column's ``text`` just read or written, decoded and remembered for
        :meth:`recent_settings` (its readers share the object: they do not change it);
        returned as read now."""
        settings = None if text is None else self._decode_settings(user_id, text)
        seen = Seen(text, settings)
        if len(self._seen) >= TAILS_KEPT:
            self._seen.clear()
        self._seen[user_id] = SettingsSeen(settings, fresh=False, token=seen)
        return SettingsSeen(settings, fresh=True, token=seen)

    def _store_settings(
        self, conn: psycopg.Connection[tuple[Any, ...]], user_id: str, settings: UserSettings
    ) -> str:
        """Write the settings in ``conn``'s transaction; their text (remember it once the
        transaction committed)."""
        self._seen.pop(user_id, None)
        text = _encoder.encode(settings).decode()
        conn.execute(
            "INSERT INTO cm_users (user_id, settings) VALUES (%s, %s::jsonb) "
            "ON CONFLICT (user_id) DO UPDATE SET settings = EXCLUDED.settings",
            (user_id, text),
        )
        return text

    def write_settings(self, user_id: str, settings: UserSettings) -> None:
        """Replace the user's settings (one transaction under the user's lock)."""
        with self._db.tx(user_id) as conn:
            text = self._store_settings(conn, user_id, settings)
        self._remember_settings(user_id, text)

    def update_settings(
        self, user_id: str, change: Callable[[UserSettings], UserSettings]
    ) -> UserSettings:
        """Atomic read-modify-write of the settings under the user's lock."""
        with self._db.tx(user_id) as conn:
            row = conn.execute(
                "SELECT settings::text FROM cm_users WHERE user_id = %s", (user_id,)
            ).fetchone()
            current = (
                self._decode_settings(user_id, row[0])
                if row is not None and row[0] is not None
                else UserSettings()
            )
            new = change(current)
            text = self._store_settings(conn, user_id, new)
        self._remember_settings(user_id, text)
        return new

    # -- derived artefacts -------------------------------------------------------------------
    def cache_keys(self, user_id: str) -> set[str]:
        """The keys of the user's derivation-cache rows."""
        with self._db.conn() as conn:
            rows = conn.execute(
                "SELECT key FROM cm_cache WHERE user_id = %s", (user_id,)
            ).fetchall()
        return {k for (k,) in rows}

    def cache_get(self, user_id: str, key: str) -> bytes | None:
        """A cache entry (marked recently used), or ``None``."""
        with self._db.conn() as conn:
            row = conn.execute(
                "UPDATE cm_cache SET last_used = nextval('cm_cache_clock') "
                "WHERE user_id = %s AND key = %s RETURNING state",
                (user_id, key),
                binary=True,
            ).fetchone()
        return bytes(row[0]) if row is not None else None

    def write_back(
        self, user_id: str, generation: str, key: str, state: bytes, snapshot: bytes
    ) -> bool:
        """Store a derived state and the snapshot while the generation is unchanged."""
        with self._db.tx(user_id) as conn:
            row = conn.execute(
                "SELECT generation FROM cm_users WHERE user_id = %s", (user_id,)
            ).fetchone()
            current = row[0] if row is not None and row[0] is not None else ""
            if current != generation:
                return False
            if self.cache_capacity > 0:
                conn.execute(
                    "INSERT INTO cm_cache (user_id, key, state, last_used) "
                    "VALUES (%s, %s, %s, nextval('cm_cache_clock')) "
                    "ON CONFLICT (user_id, key) DO UPDATE "
                    "SET state = EXCLUDED.state, last_used = EXCLUDED.last_used",
                    (user_id, key, state),
                )
                conn.execute(  # LRU eviction beyond the capacity
                    "DELETE FROM cm_cache WHERE user_id = %s AND key IN ("
                    "SELECT key FROM cm_cache WHERE user_id = %s "
                    "ORDER BY last_used DESC OFFSET %s)",
                    (user_id, user_id, self.cache_capacity),
                )
            conn.execute(
                "INSERT INTO cm_snapshots (user_id, snapshot) VALUES (%s, %s) "
                "ON CONFLICT (user_id) DO UPDATE SET snapshot = EXCLUDED.snapshot",
                (user_id, snapshot),
            )
        return True
