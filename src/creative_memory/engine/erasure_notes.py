"""What the log remembers of its recent rewrites, free of what they erased
(docs/storage.md, "Erasure notes").

An event captured before an erasure may reach the log after it: an edit-save held for its
coalescing window, a generation a later start abandons — held by a capture layer in
another process (the daemon), which the erasure cannot purge. So every rewrite leaves an
:class:`ErasureNote` with the log (the file's header, a column in PostgreSQL): which
generation it replaced and what it erased — as salted digests, never the pattern or the
bucket itself. A held event is checked on delivery against the notes written since the
generation it was captured in (:func:`notes_since`, :func:`apply_notes`); it loses what
they erase, exactly as the log did (:func:`~creative_memory.engine.erasure.erase_feature`).

Pure: the salt comes from the caller.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, Final, Literal

import msgspec

from creative_memory.engine.erasure import (
    Erasure,
    bounded_at,
    erase_feature,
    event_scope,
    strings_of,
)
from creative_memory.engine.events import Event

#: How many notes a log keeps (the newest). A held event captured before the oldest one
#: kept cannot be checked, and is dropped (docs/storage.md, "Erasure notes").
NOTES_KEPT: Final = 8

NoteKind = Literal["none", "all", "bucket", "feature"]

_encode = msgspec.json.Encoder().encode


class ErasureNote(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One rewrite of a user's log. ``after``: the generation it replaced (the storage
    fills it in). ``kind``: ``"none"`` (a replace: nothing erased), ``"all"`` (a full
    reset), ``"bucket"`` (a bucket's reset: ``digest`` of the bucket) or ``"feature"`` (a
    forget: ``digest`` of bucket, type and pattern; ``word`` of bucket and pattern, for
    refinement diffs that name it, and the pattern's ``length``). Digests are salted
    with ``salt``."""

    after: str = ""
    kind: NoteKind = "none"
    salt: str = ""
    digest: str = ""
    word: str = ""
    length: int = 0


def _digest(salt: str, *parts: Any) -> str:
    return hashlib.sha256(_encode([salt, *parts])).hexdigest()[:16]


def note_for(erasure: Erasure | None, salt: str) -> ErasureNote:
    """The note of ``erasure`` (``None``: a rewrite that erases nothing, an import in
    replace mode), its digests salted with ``salt``."""
    if erasure is None:
        return ErasureNote()
    if erasure.everything:
        return ErasureNote(kind="all")
    bucket = erasure.bucket
    if erasure.pattern is None or erasure.preference_type is None:
        return ErasureNote(kind="bucket", salt=salt, digest=_digest(salt, "bucket", bucket))
    pattern = erasure.pattern
    return ErasureNote(
        kind="feature",
        salt=salt,
        digest=_digest(salt, "feature", bucket, erasure.preference_type, pattern),
        word=_digest(salt, "word", bucket, pattern),
        length=len(pattern),
    )


def remember(
    notes: Sequence[ErasureNote], note: ErasureNote, after: str
) -> list[ErasureNote]:
    """The notes a log keeps once ``note`` is added for a rewrite of generation ``after``."""
    return [*notes, msgspec.structs.replace(note, after=after)][-NOTES_KEPT:]


def notes_since(
    notes: Sequence[ErasureNote], current: str, generation: str
) -> list[ErasureNote] | None:
    """The notes of every rewrite since the log was at ``generation`` (``""``: there was
    no log), now at ``current`` with ``notes`` kept; ``None`` when that cannot be told
    (notes of those rewrites are no longer kept, or the log was replaced from outside)."""
    if generation == current:
        return []
    if generation == "":  # every rewrite came after: told only if none was dropped
        return list(notes) if len(notes) < NOTES_KEPT else None
    for i, note in enumerate(notes):
        if note.after == generation:
            return list(notes[i:])
    return None


def _names_word(text: str, note: ErasureNote, bucket: str | None) -> bool:
    """Whether ``text`` names the pattern of ``note`` in ``bucket``: a whole-word
    occurrence of its length whose digest is the note's ``word``."""
    n = note.length
    for i in range(len(text) - n + 1):
        if n and bounded_at(text, i, i + n) and (
            _digest(note.salt, "word", bucket, text[i : i + n]) == note.word
        ):
            return True
    return False


def _keep(ev: Event, note: ErasureNote) -> Event | None:
    if note.kind == "all":
        return None
    if note.kind == "bucket":
        has, bucket = event_scope(ev)
        return None if has and _digest(note.salt, "bucket", bucket) == note.digest else ev
    if note.kind != "feature":
        return ev
    return erase_feature(
        ev,
        lambda b, t, p: _digest(note.salt, "feature", b, t, p) == note.digest,
        lambda b, diff: any(_names_word(s, note, b) for s in strings_of(diff)),
    )


def apply_notes(events: Sequence[Event], notes: Sequence[ErasureNote]) -> list[Event]:
    """``events`` without what the rewrites of ``notes`` erased, in order."""
    out: list[Event] = []
    for ev in events:
        kept: Event | None = ev
        for note in notes:
            if kept is None:
                break
            kept = _keep(kept, note)
        if kept is not None:
            out.append(kept)
    return out
