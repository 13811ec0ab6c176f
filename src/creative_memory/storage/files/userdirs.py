"""Where each user's directory is under a file store's root, checked to be that user's
(docs/storage.md, "On-disk layout"): on a file system that does not tell upper from lower
case (macOS and Windows by default), ``ALICE`` would open ``alice``'s directory — the same
log, read and written as one's own. The first use of a user's existing directory checks
that the root lists it under exactly the user's id."""

from __future__ import annotations

import os
from pathlib import Path

from creative_memory.engine.errors import ValidationError


class UserDirs:
    """The users' directories under ``root``, each checked once it exists."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._exact: set[str] = set()  # users whose directory the root lists as named

    def of(self, user_id: str) -> Path:
        """``user_id``'s directory (not created); a ``ValidationError`` naming
        ``user_id`` when an existing one is listed under another spelling."""
        d = self.root / user_id
        if user_id not in self._exact and os.path.isdir(d):
            self._check(user_id)
        return d

    def _check(self, user_id: str) -> None:
        try:
            names = os.listdir(self.root)
        except OSError:  # the directory's own use reports what is wrong
            return
        if user_id in names:
            self._exact.add(user_id)
            return
        folded = user_id.casefold()
        other = next((n for n in names if n.casefold() == folded), None)
        if other is None:  # not listed at all (removed meanwhile): nothing to tell apart
            return
        raise ValidationError(
            "user_id",
            f"user id {user_id!r} names the directory of user {other!r} under {self.root}: "
            "this file system does not tell upper from lower case, so the two would share "
            "one memory; use the id as it is spelled there, or another",
        )
