"""The content-addressed derivation cache (docs/storage.md).

An entry maps ``key(h, version)`` — the hash chain value ``h`` of the last event of a log
prefix and the derivation version — to that prefix's serialised derived state. Content
addressing means an entry can never be stale: new events, erased events or another version
all lead to other keys. Entries are written back lazily on reads, survive restarts, and are
evicted by capacity (least recently used first; recency is the file's mtime, touched on use),
never by age.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from creative_memory.storage.files.fsutil import atomic_write, fsync_dir, make_private_dir

DEFAULT_CACHE_CAPACITY = 1000
_SUFFIX = ".state.json"


def cache_key(h: str, version: str) -> str:
    """File-name-safe key of (event-chain hash, derivation version)."""
    return f"v{version}-{h}"


class FileDerivationCache:
    """Cache entries of one user: ``<user_dir>/cache/<key>.state.json`` (0600)."""

    def __init__(self, user_dir: Path, capacity: int = DEFAULT_CACHE_CAPACITY) -> None:
        self.dir = user_dir / "cache"
        self.capacity = capacity
        self._known: set[str] | None = None

    def _path(self, key: str) -> Path:
        return self.dir / (key + _SUFFIX)

    def keys(self) -> set[str]:
        """Keys present (listed once, then kept up to date by this object)."""
        if self._known is None:
            try:
                names = os.listdir(self.dir)
            except FileNotFoundError:
                names = []
            self._known = {n[: -len(_SUFFIX)] for n in names if n.endswith(_SUFFIX)}
        return self._known

    def get(self, key: str) -> bytes | None:
        """The entry's bytes (its mtime touched for LRU), or ``None``."""
        path = self._path(key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            self.keys().discard(key)
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # LRU recency
        return data

    def put(self, key: str, data: bytes) -> None:
        """Write an entry atomically and evict beyond the capacity."""
        if self.capacity <= 0:
            return
        make_private_dir(self.dir)
        atomic_write(self._path(key), data)
        known = self.keys()
        known.add(key)
        if len(known) > self.capacity:
            self.evict()

    def evict(self) -> int:
        """Remove least recently used entries beyond capacity; returns how many."""
        entries: list[tuple[int, str]] = []
        with os.scandir(self.dir) as it:
            for e in it:
                if e.name.endswith(_SUFFIX):
                    with contextlib.suppress(FileNotFoundError):
                        entries.append((e.stat().st_mtime_ns, e.name[: -len(_SUFFIX)]))
        entries.sort()
        excess = len(entries) - self.capacity
        removed = 0
        for _, key in entries[: max(0, excess)]:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._path(key))
                removed += 1
        self._known = {k for _, k in entries[max(0, excess) :]}
        return removed

    def clear(self) -> None:
        """Delete every entry (used after erasure: entries may hold erased content)."""
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            names = []
        for n in names:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.dir / n)
        self._known = set()


def purge_derived(cache: FileDerivationCache, user_dir: Path, snapshot: str) -> None:
    """Delete a user's derived files — the cache entries, the snapshot (``snapshot``: its
    name in ``user_dir``) and any temp file a crashed writer left behind — durably: the
    directories are fsynced, so a crash cannot bring a deleted entry back. The caller
    holds the user's lock, so no write is in progress."""
    cache.clear()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(user_dir / snapshot)
    for stray in [*user_dir.glob(".*.tmp"), *(user_dir / "cache").glob(".*.tmp")]:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(stray)
    for where in (user_dir / "cache", user_dir):
        with contextlib.suppress(FileNotFoundError):
            fsync_dir(where)
