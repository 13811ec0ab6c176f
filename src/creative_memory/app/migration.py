"""``migrate``: a prototype-era ``preferences.json`` into one user's memory (docs/cli.md,
"Command reference"; the import itself: docs/storage.md, "Prototype import").

A prototype file names its owner (``user_id``). Importing another user's file is refused
unless the caller names that owner (``from_user``), and the result says what the import
did to the settings: the file carries its master switch, so a paused prototype user's
file turns memory off.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import msgspec

from creative_memory.app.paths import prototype_file, read_file
from creative_memory.app.results import SettingsView
from creative_memory.app.store import MemoryStore
from creative_memory.engine.errors import ValidationError
from creative_memory.engine.events import validate_user_id
from creative_memory.engine.portability.prototype import prototype_owner


class MigrateResult(msgspec.Struct, kw_only=True):
    """What ``migrate`` imported, from whose file, and the settings before and after."""

    user_id: str
    path: str  # the preferences.json read
    file_user_id: str | None  # the file's owner, as it says
    records_imported: int
    settings_before: SettingsView
    settings: SettingsView

    @property
    def settings_changed(self) -> bool:
        """Whether the import changed the settings (the file's master switch)."""
        return self.settings != self.settings_before


def migrate_prototype(
    store: MemoryStore,
    settings: Callable[[str], SettingsView],
    user_id: str,
    source: Path,
    from_user: str | None = None,
) -> MigrateResult:
    """Import the prototype file ``source`` names (the file, a prototype user directory,
    or a root holding ``<from_user or user_id>/preferences.json``) into ``user_id``.

    A file that names another owner is refused unless ``from_user`` names that owner; a
    ``from_user`` that is not the file's owner is refused too. Nothing is written when it
    is refused."""
    validate_user_id(user_id)
    if from_user is not None:
        validate_user_id(from_user)
    path = prototype_file(source, from_user or user_id)
    owner = prototype_owner(read_file("path", path))
    if owner is not None and from_user is not None and owner != from_user:
        raise ValidationError(
            "from_user", f"{path} holds the preferences of {owner!r}, not of {from_user!r}"
        )
    if owner is not None and owner != user_id and from_user is None:
        raise ValidationError(
            "path",
            f"{path} holds the preferences of {owner!r}, not of {user_id!r}; name its owner "
            f"to import them into {user_id!r} (--from-user {owner})",
        )
    before = settings(user_id)
    imported = store.import_prototype(user_id, path)
    return MigrateResult(
        user_id=user_id,
        path=str(path),
        file_user_id=owner,
        records_imported=imported,
        settings_before=before,
        settings=settings(user_id),
    )
