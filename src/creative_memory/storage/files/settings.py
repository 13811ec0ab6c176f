"""Reading a user's ``settings.json`` cheaply (docs/storage.md, "Settings
(`settings.json`)"): a read of unchanged settings is one ``stat`` (the file is only ever
replaced by rename, so inode, size and mtime name its content), and a user without
settings costs one ``access``."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from creative_memory.engine.errors import LogDamaged
from creative_memory.engine.logcheck import REPAIR_HINT
from creative_memory.engine.settings import UserSettings

_decoder = msgspec.json.Decoder(UserSettings)

Stamp = tuple[int, int, int]


class SettingsReader:
    """The settings files last read, by path, with the stamp they had then."""

    def __init__(self) -> None:
        self._seen: dict[Path, tuple[Stamp, UserSettings]] = {}

    def read(self, path: Path) -> UserSettings | None:
        """The settings at ``path`` (a copy the caller may change), or ``None``."""
        seen = self._seen.get(path)
        try:
            if seen is not None:  # one stat when unchanged
                st = os.stat(path)
                if seen[0] == (st.st_ino, st.st_size, st.st_mtime_ns):
                    return msgspec.structs.replace(seen[1])
            elif not os.access(path, os.F_OK):  # none (the usual case): no failed open
                return None
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
                data = f.read()
        except FileNotFoundError:
            return None
        try:
            settings = _decoder.decode(data)
        except msgspec.DecodeError as exc:
            raise LogDamaged(f"{path}: unreadable settings ({exc}); {REPAIR_HINT}") from exc
        self._seen[path] = (stamp, settings)
        return msgspec.structs.replace(settings)
