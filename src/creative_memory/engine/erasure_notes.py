"""What the log remembers of its recent rewrites: that they happened, nothing of what they
erased (docs/storage.md, "Erasure notes").

An event captured before an erasure may reach the log after it: an edit-save held for its
coalescing window, a generation a later start abandons. Every rewrite leaves an
:class:`ErasureNote` with the log (the file's header, a column in PostgreSQL): which
generation it replaced, whether it erased anything, and a random ``id`` naming the
erasure. A held event is checked on delivery against the notes written since the
generation it was captured in (:func:`notes_since`): it is delivered only when every one
of them erased nothing or is an erasure already applied to it — by a capture layer in the
erasing process, which purged it with the erased content in memory (:func:`judged`).
Anything else (an erasure made by another process) leaves it unjudgeable: it is dropped.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Final

import msgspec

from creative_memory.engine.erasure import Erasure

#: How many notes a log keeps (the newest). A held event captured before the oldest one
#: kept cannot be checked, and is dropped (docs/storage.md, "Erasure notes").
NOTES_KEPT: Final = 8


class ErasureNote(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One rewrite of a user's log. ``after``: the generation it replaced (the storage
    fills it in). ``kind``: ``"none"`` (a rewrite that erased nothing: an import in replace
    mode) or ``"erased"`` (a forget or a reset; any other kind, from a note written by an
    earlier build, counts as ``"erased"``, and fields it had are ignored). ``id``: a
    random token naming the erasure (:attr:`Erasure.note_id`)."""

    after: str = ""
    kind: str = "none"
    id: str = ""


def note_for(erasure: Erasure | None) -> ErasureNote:
    """The note of ``erasure`` (``None``: a rewrite that erases nothing, an import in
    replace mode): its id, nothing of what it erases."""
    if erasure is None:
        return ErasureNote()
    return ErasureNote(kind="erased", id=erasure.note_id)


def remember(notes: Sequence[ErasureNote], note: ErasureNote, after: str) -> list[ErasureNote]:
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


def judged(notes: Sequence[ErasureNote], applied: Collection[str]) -> bool:
    """Whether a held event, with the erasures ``applied`` (their ids) already applied to
    it, may be delivered after the rewrites of ``notes``: each erased nothing or is one of
    those erasures."""
    return all(n.kind == "none" or (n.id and n.id in applied) for n in notes)
