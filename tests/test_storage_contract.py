"""The storage contract (``storage/base.py``), checked the same way on every backend.

Each test runs against the file backend and PostgreSQL (``tests/backends.py``); one test
checks that both backends store byte-identical events.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import pytest

from creative_memory.engine.errors import StorageError
from creative_memory.engine.events import (
    CHAIN_GENESIS,
    Event,
    RefinementEvent,
    SignalEvent,
    chain_hash,
    encode_event,
)
from creative_memory.storage import FileStorage, UserSettings
from creative_memory.storage.base import EventLogStorage, ImportPlan, LogSnapshot
from creative_memory.storage.postgres import redact_url

if TYPE_CHECKING:
    from tests.backends import Backend

pytest_plugins = ["tests.pg_fixtures", "tests.backends"]

U = "contract_user"
AT = "2025-01-01T00:00:00.000Z"


def sig(pattern: str, **kw: Any) -> SignalEvent:
    return SignalEvent(
        at=kw.pop("at", AT),
        recorded_at=AT,
        signal_type="explicit_tag",
        preference_type=kw.pop("preference_type", "layout"),
        pattern=pattern,
        polarity=kw.pop("polarity", "positive"),
        scope="global",
        **kw,
    )


def assert_chain(events: list[Event]) -> None:
    prev_h, prev_seq = CHAIN_GENESIS, 0
    for ev in events:
        assert ev.seq > prev_seq
        assert ev.h == chain_hash(prev_h, ev)
        prev_h, prev_seq = ev.h, ev.seq


def patterns(events: list[Event]) -> list[str]:
    return [e.pattern for e in events if isinstance(e, SignalEvent)]


# -- unknown users -------------------------------------------------------------------------
def test_unknown_user_has_nothing(backend: Backend) -> None:
    s = backend.storage()
    assert not s.user_exists(U)
    assert s.user_files(U) == []
    snap = s.read_events(U)
    assert (snap.events, snap.generation, snap.end, snap.resumed) == ([], "", 0, False)
    assert s.read_after_cached(U, lambda h: True).events == []
    assert s.generation(U) == ""
    assert s.read_settings(U) is None
    assert s.cache_keys(U) == set()
    assert s.cache_get(U, "v1-x") is None
    assert s.rewrite(U, lambda e: None) == 0
    assert s.append(U, []) == []
    assert not s.user_exists(U)


def test_settings_alone_make_a_user(backend: Backend) -> None:
    s = backend.storage()
    s.write_settings(U, UserSettings(paused=True))
    assert s.user_exists(U)
    assert s.generation(U) == ""  # no log yet
    assert s.read_settings(U) == UserSettings(paused=True)
    out = s.append(U, [sig("a")])
    assert out[0].seq == 1 and s.generation(U) != ""


# -- append and read -----------------------------------------------------------------------
def test_append_assigns_seq_and_chain(backend: Backend) -> None:
    s = backend.storage()
    first = s.append(U, [sig("a"), sig("b")])
    second = s.append(U, [sig("c")])
    assert [e.seq for e in first + second] == [1, 2, 3]
    assert_chain(first + second)
    snap = s.read_events(U)
    assert snap.events == first + second
    assert snap.generation == s.generation(U) != ""
    assert not snap.resumed and snap.base is None
    assert s.user_exists(U)
    # a second storage object (another process) sees the same
    assert backend.storage().read_events(U).events == first + second


def test_event_count_is_the_number_of_events(backend: Backend) -> None:
    s = backend.storage()
    assert s.event_count(U) == 0
    s.append(U, [sig("a"), sig("b")])
    s.append(U, [sig("c")])
    assert s.event_count(U) == len(s.read_events(U).events) == 3
    s.rewrite(U, lambda ev: None if getattr(ev, "pattern", None) == "b" else ev)
    assert s.event_count(U) == len(s.read_events(U).events) == 2
    assert backend.storage().event_count(U) == 2


def test_append_ignores_given_seq_and_h(backend: Backend) -> None:
    s = backend.storage()
    out = s.append(U, [sig("a", seq=41, h="f" * 32)])
    assert out[0].seq == 1 and out[0].h == chain_hash(CHAIN_GENESIS, out[0])


def test_read_resumes_from_end_within_a_generation(backend: Backend) -> None:
    s = backend.storage()
    s.append(U, [sig("a"), sig("b")])
    snap = s.read_events(U)
    again = s.read_events(U, generation=snap.generation, start=snap.end)
    assert again.resumed and again.events == [] and again.end == snap.end
    s.append(U, [sig("c")])
    s.append(U, [sig("d")])
    more = s.read_events(U, generation=snap.generation, start=snap.end)
    assert more.resumed and patterns(more.events) == ["c", "d"]
    assert more.generation == snap.generation
    tail = s.read_events(U, generation=more.generation, start=more.end)
    assert tail.resumed and tail.events == []
    stale = s.read_events(U, generation="not-the-generation", start=more.end)
    assert not stale.resumed and patterns(stale.events) == ["a", "b", "c", "d"]


def test_read_after_rewrite_is_not_resumed(backend: Backend) -> None:
    s = backend.storage()
    s.append(U, [sig("a"), sig("b"), sig("c")])
    snap = s.read_events(U)
    assert s.rewrite(U, lambda e: None if patterns([e]) == ["b"] else e) == 1
    after = s.read_events(U, generation=snap.generation, start=snap.end)
    assert not after.resumed and patterns(after.events) == ["a", "c"]
    assert after.generation != snap.generation


@pytest.mark.parametrize("n", [1, 5, 200])
def test_read_after_cached(backend: Backend, n: int) -> None:
    s = backend.storage()
    events = s.append(U, [sig(f"p{i}") for i in range(n)])
    gen = s.generation(U)
    # nothing cached: the whole log
    snap = s.read_after_cached(U, lambda h: False)
    assert snap.events == events and snap.base is None and snap.generation == gen
    # each prefix: the events after it, base = its hash
    for cut in {0, n // 2, n - 1}:
        h = events[cut].h
        snap = s.read_after_cached(U, lambda x, h=h: x == h)  # type: ignore[misc]
        assert snap.base == h and snap.events == events[cut + 1 :]
        cont = s.read_events(U, generation=snap.generation, start=snap.end)
        assert cont.resumed and cont.events == []
    # the newest cached event wins
    cached = {events[0].h, events[n // 2].h}
    assert s.read_after_cached(U, cached.__contains__).base == events[n // 2].h


def test_read_after_cached_decodes_only_the_tail(backend: Backend) -> None:
    s = backend.storage()
    events = s.append(U, [sig(f"p{i}") for i in range(300)])
    asked: list[str] = []

    def is_cached(h: str) -> bool:
        asked.append(h)
        return h == events[290].h

    snap = s.read_after_cached(U, is_cached)
    assert patterns(snap.events) == [f"p{i}" for i in range(291, 300)]
    assert asked == [e.h for e in reversed(events[290:])]  # walked back, stopped at the hit


def test_append_is_all_or_nothing(backend: Backend) -> None:
    s = backend.storage()
    s.append(U, [sig("a")])
    bad = RefinementEvent(at=AT, recorded_at=AT, diff={"x": object()})
    with pytest.raises((TypeError, msgspec.EncodeError)):
        s.append(U, [sig("b"), bad])
    assert patterns(s.read_events(U).events) == ["a"]
    assert [e.seq for e in s.append(U, [sig("c")])] == [2]


def test_threads_appending_at_once_lose_nothing(backend: Backend) -> None:
    s = backend.storage()
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            for i in range(25):
                s.append(U, [sig(f"t{k}_{i}"), sig(f"t{k}_{i}b")])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    events = s.read_events(U).events
    assert [e.seq for e in events] == list(range(1, 301))
    assert_chain(events)
    assert len(set(patterns(events))) == 300


# -- rewrite, replace_all, seq floor -------------------------------------------------------
def test_rewrite_drops_changes_and_purges_derived(backend: Backend) -> None:
    s = backend.storage()
    events = s.append(U, [sig("a"), sig("b"), sig("c"), sig("d")])
    gen = s.generation(U)
    assert s.write_back(U, gen, "v1-k1", b"state", b'{"snapshot": true}\n')
    assert s.cache_keys(U) == {"v1-k1"}

    def keep(e: Event) -> Event | None:
        if patterns([e]) == ["b"]:
            return None
        if patterns([e]) == ["c"]:
            return msgspec.structs.replace(e, polarity="negative")
        return e

    assert s.rewrite(U, keep) == 2
    after = s.read_events(U).events
    assert [e.seq for e in after] == [1, 3, 4]
    assert [getattr(e, "polarity", None) for e in after] == ["positive", "negative", "positive"]
    assert after[0] == events[0]  # untouched prefix, same link
    assert_chain(after)
    assert s.generation(U) != gen
    assert s.cache_keys(U) == set()
    assert not any("snapshot" in n or n.startswith("cache/") for n in s.user_files(U))


def test_rewrite_without_change_keeps_everything(backend: Backend) -> None:
    s = backend.storage()
    s.append(U, [sig("a"), sig("b")])
    gen = s.generation(U)
    assert s.write_back(U, gen, "v1-k", b"state", b"{}\n")
    assert s.rewrite(U, lambda e: e) == 0
    assert s.generation(U) == gen and s.cache_keys(U) == {"v1-k"}


def test_erasing_everything_leaves_an_empty_log(backend: Backend) -> None:
    s = backend.storage()
    s.append(U, [sig("a"), sig("b")])
    assert s.rewrite(U, lambda e: None) == 2
    snap = s.read_events(U)
    assert snap.events == [] and snap.generation != ""
    assert s.user_exists(U)
    assert [e.seq for e in s.append(U, [sig("c")])] == [3]


def test_seq_never_reused_after_erasing_the_tail(backend: Backend) -> None:
    s = backend.storage()
    s.append(U, [sig("a"), sig("b"), sig("x"), sig("x")])
    assert s.rewrite(U, lambda e: None if patterns([e]) == ["x"] else e) == 2
    other = backend.storage()  # a fresh object, as another process would be
    assert [e.seq for e in other.append(U, [sig("c")])] == [5]
    assert [e.seq for e in s.read_events(U).events] == [1, 2, 5]


def test_replace_all_keeps_seq_above_every_number_used_and_raises_the_floor(
    backend: Backend,
) -> None:
    s = backend.storage()
    s.replace_all(U, [msgspec.structs.replace(sig("first"), seq=4)])  # a new user: kept
    assert [e.seq for e in s.read_events(U).events] == [4]
    s.append(U, [sig(f"p{i}") for i in range(2)])  # 5, 6
    s.write_back(U, s.generation(U), "v1-k", b"state", b"{}\n")
    gen = s.generation(U)
    s.replace_all(U, [msgspec.structs.replace(sig("big"), seq=50)])  # above 6: kept
    assert [e.seq for e in s.read_events(U).events] == [50]
    assert s.generation(U) != gen and s.cache_keys(U) == set()
    assert [e.seq for e in s.append(U, [sig("n")])] == [51]
    s.replace_all(U, [])
    assert [e.seq for e in s.append(U, [sig("n2")])] == [52]


def test_replace_all_never_reuses_a_number_handed_out_before(backend: Backend) -> None:
    s = backend.storage()
    s.append(U, [sig(f"p{i}") for i in range(6)])
    s.rewrite(U, lambda e: None if patterns([e]) == ["p5"] else e)  # 6 erased
    imported = [
        msgspec.structs.replace(sig("i1"), seq=2),
        msgspec.structs.replace(sig("i2"), seq=9),
    ]
    s.replace_all(U, imported)
    events = backend.storage().read_events(U).events
    # 2 was p1's and 1..6 were all handed out: numbered on after 6, in their order
    assert [e.seq for e in events] == [7, 8] and patterns(events) == ["i1", "i2"]
    assert_chain(events)
    assert [e.seq for e in s.append(U, [sig("n")])] == [9]


def test_replace_all_creates_a_user(backend: Backend) -> None:
    s = backend.storage()
    s.replace_all(U, [])
    assert s.user_exists(U) and s.generation(U) != "" and s.read_events(U).events == []
    assert [e.seq for e in s.append(U, [sig("a")])] == [1]


# -- imports ---------------------------------------------------------------------------------
def test_import_events_decides_on_the_log_and_settings_and_appends_after_the_floor(
    backend: Backend,
) -> None:
    s = backend.storage()
    s.append(U, [sig("a"), sig("b"), sig("x")])
    s.write_settings(U, UserSettings(diagnostics_feed=True))
    assert s.rewrite(U, lambda e: None if patterns([e]) == ["x"] else e) == 1
    s.write_back(U, s.generation(U), "v1-k", b"state", b"{}\n")
    gen = s.generation(U)
    seen: list[tuple[list[str], UserSettings | None]] = []

    def decide(events: list[Event], settings: UserSettings | None) -> ImportPlan:
        seen.append((patterns(events), settings))
        return ImportPlan([sig("c"), sig("d")], settings=UserSettings(paused=True))

    plan = s.import_events(U, decide)
    assert seen == [(["a", "b"], UserSettings(diagnostics_feed=True))]
    assert patterns(list(plan.events)) == ["c", "d"]
    events = backend.storage().read_events(U).events
    assert [e.seq for e in events] == [1, 2, 4, 5]  # 3 was erased: never reused
    assert_chain(events)
    assert s.generation(U) == gen and s.cache_keys(U) == {"v1-k"}  # an append: same log
    assert backend.storage().read_settings(U) == UserSettings(paused=True)
    assert [e.seq for e in s.append(U, [sig("e")])] == [6]


def test_import_events_replaces_like_replace_all(backend: Backend) -> None:
    s = backend.storage()
    s.append(U, [sig(f"p{i}") for i in range(4)])
    gen = s.generation(U)
    imported = [msgspec.structs.replace(sig("i1"), seq=2)]
    s.import_events(U, lambda events, settings: ImportPlan(imported, replace=True))
    events = s.read_events(U).events
    assert [e.seq for e in events] == [5] and patterns(events) == ["i1"]  # 2 was p1's
    assert s.generation(U) != gen and s.read_settings(U) is None
    assert [e.seq for e in s.append(U, [sig("n")])] == [6]


def test_import_events_into_a_new_user_and_a_decision_that_raises(backend: Backend) -> None:
    s = backend.storage()

    def refuse(events: list[Event], settings: UserSettings | None) -> ImportPlan:
        raise ValueError("no")

    s.append(U, [sig("a")])
    with pytest.raises(ValueError, match="no"):
        s.import_events(U, refuse)
    assert patterns(s.read_events(U).events) == ["a"]
    s.import_events("new", lambda events, settings: ImportPlan([sig("b"), sig("c")]))
    events = s.read_events("new").events
    assert [e.seq for e in events] == [1, 2] and s.generation("new") != ""
    assert_chain(events)
    assert [e.seq for e in s.append("new", [sig("d")])] == [3]


# -- settings ------------------------------------------------------------------------------
def test_settings_round_trip(backend: Backend) -> None:
    s = backend.storage()
    st = UserSettings(
        memory_enabled=False,
        paused=True,
        paused_until="2026-01-01T00:00:00.000Z",
        disabled_projects=["p1", "p2"],
        diagnostics_feed=True,
    )
    s.write_settings(U, st)
    assert s.read_settings(U) == st
    assert backend.storage().read_settings(U) == st


def test_update_settings_is_an_atomic_read_modify_write(backend: Backend) -> None:
    s = backend.storage()
    assert s.update_settings(U, lambda x: x) == UserSettings()

    def add(k: int) -> None:
        for i in range(10):
            s.update_settings(
                U,
                lambda x, p=f"p{k}_{i}": msgspec.structs.replace(  # type: ignore[misc]
                    x, disabled_projects=[*x.disabled_projects, p]
                ),
            )

    threads = [threading.Thread(target=add, args=(k,)) for k in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = s.read_settings(U)
    assert got is not None and len(got.disabled_projects) == len(set(got.disabled_projects)) == 50


def test_update_settings_that_raises_changes_nothing(backend: Backend) -> None:
    s = backend.storage()
    s.write_settings(U, UserSettings(paused=True))

    def boom(x: UserSettings) -> UserSettings:
        raise RuntimeError("no")

    with pytest.raises(RuntimeError):
        s.update_settings(U, boom)
    assert s.read_settings(U) == UserSettings(paused=True)


# -- derived artefacts ---------------------------------------------------------------------
def test_write_back_checks_the_generation(backend: Backend) -> None:
    s = backend.storage()
    s.append(U, [sig("a")])
    gen = s.generation(U)
    assert not s.write_back(U, "stale", "v1-k", b"state", b"{}\n")
    assert s.cache_keys(U) == set()
    assert not any("snapshot" in n for n in s.user_files(U))
    assert s.write_back(U, gen, "v1-k", b"state-bytes", b'{"s": 1}\n')
    assert s.cache_keys(U) == {"v1-k"}
    assert s.cache_get(U, "v1-k") == b"state-bytes"
    assert any("snapshot" in n for n in s.user_files(U))
    assert sum(n.startswith("cache/") for n in s.user_files(U)) == 1
    # overwriting an entry keeps one entry
    assert s.write_back(U, gen, "v1-k", b"state-2", b"{}\n")
    assert s.cache_get(U, "v1-k") == b"state-2" and s.cache_keys(U) == {"v1-k"}


def test_lru_eviction_by_capacity(backend: Backend) -> None:
    s = backend.storage(cache_capacity=3)
    s.append(U, [sig("a")])
    gen = s.generation(U)

    def tick() -> None:  # file recency is the mtime: keep successive uses apart
        if backend.kind == "files":
            time.sleep(0.02)

    for key in ("k1", "k2", "k3"):
        assert s.write_back(U, gen, key, key.encode(), b"{}\n")
        tick()
    assert s.cache_get(U, "k1") == b"k1"  # now the most recently used
    tick()
    s.write_back(U, gen, "k4", b"k4", b"{}\n")
    assert s.cache_keys(U) == {"k1", "k3", "k4"}
    tick()
    s.write_back(U, gen, "k5", b"k5", b"{}\n")
    assert s.cache_keys(U) == {"k1", "k4", "k5"}
    assert backend.storage(cache_capacity=3).cache_keys(U) == {"k1", "k4", "k5"}


def test_capacity_zero_keeps_no_cache_but_the_snapshot(backend: Backend) -> None:
    s = backend.storage(cache_capacity=0)
    s.append(U, [sig("a")])
    assert s.write_back(U, s.generation(U), "v1-k", b"state", b"{}\n")
    assert s.cache_keys(U) == set()
    assert any("snapshot" in n for n in s.user_files(U))


def test_users_are_independent(backend: Backend) -> None:
    s = backend.storage()
    s.append("u1", [sig("a"), sig("b")])
    s.append("u2", [sig("c")])
    s.write_back("u1", s.generation("u1"), "v1-k", b"s", b"{}\n")
    assert s.rewrite("u2", lambda e: None) == 1
    assert s.cache_keys("u1") == {"v1-k"}
    assert patterns(s.read_events("u1").events) == ["a", "b"]
    assert [e.seq for e in s.append("u2", [sig("d")])] == [2]


def test_describe(backend: Backend) -> None:
    s = backend.storage()
    text = s.describe()
    if backend.kind == "files":
        assert text == backend.root
    else:
        assert text.startswith(("postgresql://", "postgres://"))
        password = _password(backend.root)
        if password:
            assert f":{password}@" not in text and ":***@" in text


def _password(url: str) -> str | None:
    from urllib.parse import urlsplit

    return urlsplit(url).password


# -- across backends -----------------------------------------------------------------------
def test_files_and_postgres_store_identical_event_bytes(tmp_path: Path, pg_url: str) -> None:
    from creative_memory.storage.postgres import PostgresStorage

    batch: list[Event] = [
        sig("a"),
        sig('ünïcode ✓ "quoted"', tag_text="tag\nline"),
        RefinementEvent(at=AT, recorded_at=AT, diff={"k": [1, 2.5, None]}),
    ]
    files = FileStorage(tmp_path / "mem")
    with PostgresStorage(pg_url) as pg:
        stores: list[EventLogStorage] = [files, pg]
        outs = [s.append(U, batch) for s in stores]
        assert outs[0] == outs[1]
        lines = (tmp_path / "mem" / U / "events.jsonl").read_bytes().split(b"\n")[1:-1]
        assert lines == [encode_event(e) for e in pg.read_events(U).events]
        import psycopg

        with psycopg.connect(pg_url) as conn:
            rows = conn.execute("SELECT line FROM cm_events ORDER BY seq").fetchall()
        assert [bytes(r[0]) for r in rows] == lines


def test_redact_url() -> None:
    assert redact_url("postgresql://u:secret@h:5432/db") == "postgresql://u:***@h:5432/db"
    assert redact_url("postgres://u@h/db") == "postgres://u@h/db"
    assert redact_url("postgresql:///db?host=/tmp&password=s3&user=u") == (
        "postgresql:///db?host=/tmp&password=***&user=u"
    )
    assert redact_url("postgresql://u:p%40ss@h1:1,h2:2/db?sslmode=require") == (
        "postgresql://u:***@h1:1,h2:2/db?sslmode=require"
    )


def test_postgres_unreachable_database_is_a_storage_error(pg_url: str) -> None:
    from creative_memory.storage.postgres import PostgresStorage

    bad = pg_url.replace("://", "://nobody:wrong-password@", 1) if "@" not in pg_url else None
    if bad is None:
        from urllib.parse import urlsplit, urlunsplit

        p = urlsplit(pg_url)
        host = p.netloc.rsplit("@", 1)[1]
        bad = urlunsplit((p.scheme, f"nobody:wrong-password@{host}", p.path, p.query, ""))
    with pytest.raises(StorageError) as info:
        PostgresStorage(bad, connect_timeout=5)
    assert "wrong-password" not in str(info.value)


@pytest.mark.parametrize(
    ("url", "piece"),
    [
        # a raw #, ? or / ends urlsplit's netloc before the @: its password showed whole
        ("postgresql://mem:Hx#9?kSECRET@h:5432/db", "kSECRET"),
        ("postgresql://mem:ab/cdSECRET@h:5432/db", "cdSECRET"),
        ("postgresql://mem:ab@cdSECRET@h:5432/db", "cdSECRET"),
    ],
)
def test_a_password_with_raw_delimiters_is_hidden_whole(url: str, piece: str) -> None:
    """One rule (storage/dburl.py) for whoami and every error: a password written without
    percent-encoding is hidden whole, and so is any piece of it a libpq message quotes."""
    from creative_memory.app.paths import redact_url as shown_by_whoami
    from creative_memory.storage.postgres.schema import scrub

    assert redact_url(url) == shown_by_whoami(url) == "postgresql://mem:***@h:5432/db"
    for message in (
        f"{url}: permission denied for table cm_schema_migrations",
        f'could not translate host name "{piece}@h" to address',  # libpq's own reading
    ):
        cleaned = scrub(message, url)
        assert "SECRET" not in cleaned and "cdSE" not in cleaned, cleaned


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:s3cretPW@[::1:55439/db",  # libpq quotes the whole URL
        "postgresql://u:s3cretPW%zz@127.0.0.1:55439/db",  # ... or the password token
        "postgresql://u:pw@127.0.0.1:55439/db?password=s3cretPW%zz",
        "postgresql://u:s3cret%50W@[::1:55439/db",  # percent-encoded: neither form shows
    ],
)
def test_an_unparsable_url_is_a_storage_error_without_its_password(url: str) -> None:
    from creative_memory.storage.postgres import PostgresStorage

    with pytest.raises(StorageError) as info:
        PostgresStorage(url, connect_timeout=1)
    text = str(info.value)
    assert "s3cret" not in text and "***" in text and "\n" not in text


def test_a_connect_timeout_the_url_gets_wrong_fails_at_once(pg_url: str) -> None:
    """The pool connects as the first, direct connection does: a URL whose
    ``connect_timeout`` libpq refuses fails there, in one line, not after the pool's 30 s."""
    from creative_memory.storage.postgres import PostgresStorage

    with pytest.raises(StorageError, match=r"connect_timeout=abc: .*connect_timeout"):
        PostgresStorage(f"{pg_url}&connect_timeout=abc", connect_timeout=1)
    # a URL that names a good one is used as given, by the pool too
    storage = PostgresStorage(f"{pg_url}&connect_timeout=3", connect_timeout=1)
    try:
        assert storage.append(U, [sig("a")])[0].seq == 1
    finally:
        storage.close()


def test_a_call_waits_for_a_connection_as_long_as_the_connect_timeout_and_says_why(
    pg_url: str,
) -> None:
    """A call waits for a pooled connection at most ``connect_timeout`` (docs/deploy.md;
    it was 30 s whatever the URL said), and then says why when the pool could not connect
    — the error psycopg_pool logged, which no longer reaches a CLI's stderr on its own."""
    import logging

    from creative_memory.storage.postgres import PostgresStorage

    storage = PostgresStorage(pg_url, min_size=1, max_size=1, connect_timeout=1)
    db = storage._db
    try:
        assert db.wait == 1.0
        with db.unchecked():  # the only connection, held: the next call has to wait
            started = time.monotonic()
            with pytest.raises(StorageError, match=r"no connection within 1 s$"):
                storage.read_settings("u")
            assert time.monotonic() - started < 5
            name = db._pool.name
            logging.getLogger("psycopg.pool").warning(
                "error connecting in %r: %s", name, "connection refused"
            )
            with pytest.raises(StorageError, match=r"within 1 s: connection refused"):
                storage.read_settings("u")
    finally:
        storage.close()


def test_read_events_into_a_sink_hands_on_bounded_chunks_in_order(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``read_events(sink=…)``: the same events as a plain read, in order, never more than
    a chunk at once, and an empty snapshot (docs/storage.md: memory bounded by a chunk)."""
    from creative_memory.storage.files import backend as files_backend
    from creative_memory.storage.postgres import reading as pg_reading

    monkeypatch.setattr(pg_reading, "SINK_CHUNK", 7)  # events at a time
    monkeypatch.setattr(files_backend, "READ_CHUNK", 1500)  # bytes at a time (~7 events)
    s = backend.storage()
    nobody = LogSnapshot(events=[], generation="", end=0)
    assert s.read_events(U, sink=lambda chunk: None) == nobody  # no user yet
    s.append(U, [sig(f"p{i}") for i in range(25)])
    at_25 = s.read_events(U, sink=lambda chunk: None)
    s.append(U, [sig(f"q{i}") for i in range(5)])
    whole = s.read_events(U)
    chunks: list[list[Event]] = []
    snap = s.read_events(U, sink=chunks.append)
    assert [e for c in chunks for e in c] == whole.events
    assert len(chunks) > 2 and max(len(c) for c in chunks) <= 10
    assert (snap.events, snap.generation, snap.end) == ([], whole.generation, whole.end)
    # resumed from a position of the same generation: only the events after it
    chunks.clear()
    again = s.read_events(U, generation=at_25.generation, start=at_25.end, sink=chunks.append)
    assert [e.seq for c in chunks for e in c] == [26, 27, 28, 29, 30]
    assert again.resumed and again.end == whole.end
    chunks.clear()
    done = s.read_events(U, generation=whole.generation, start=whole.end, sink=chunks.append)
    assert chunks == [] and done.end == whole.end


def test_postgres_reads_into_a_sink_a_chunk_at_a_time(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No more than a chunk of rows is decoded before it is handed on: the log is not
    fetched whole first (a server-side cursor)."""
    from creative_memory.storage.postgres import PostgresStorage
    from creative_memory.storage.postgres import reading as pg_reading

    monkeypatch.setattr(pg_reading, "SINK_CHUNK", 7)
    s = PostgresStorage(pg_url)
    try:
        s.append(U, [sig(f"p{i}") for i in range(30)])
        decoded: list[int] = []
        real = PostgresStorage._decode

        def counting(self: PostgresStorage, user_id: str, seq: int, line: bytes) -> Event:
            decoded.append(seq)
            return real(self, user_id, seq, line)

        monkeypatch.setattr(PostgresStorage, "_decode", counting)
        seen_at: list[int] = []
        s.read_events(U, sink=lambda chunk: seen_at.append(len(decoded)))
        assert seen_at == [7, 14, 21, 28, 30]
    finally:
        s.close()
