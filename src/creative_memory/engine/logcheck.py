"""Checking a stored log, and what a repair keeps of it (docs/storage.md, "Check and
repair").

Pure: a backend reads its log without decoding the events (:class:`RawLog`, one
:class:`RawLine` per stored event) and :func:`examine` says what is wrong with it and what a
repair writes instead. Three things can be wrong with a log that was changed outside
creative-memory (a hand edit, disk damage, a restore gone wrong):

* ``unreadable`` — a line (a row) that is not an event: a repair drops it;
* ``altered`` — an event whose hash does not follow the one before it: its content was
  edited. It is kept as it reads now, and the repaired log is chained again;
* ``out_of_order`` — an event whose ``seq`` is not above the one before it: it and every
  event after it are numbered on after the highest number the log shows, in their order.

and three more: ``header`` — the file's first line (a table's erasure notes) does not
decode (a repair writes a new one; the erasure notes it held are lost) — and, found by the
caller, ``settings`` that do not decode (a repair writes them anew, memory off) and
settings naming a derivation ``version`` this release does not know (left as they are).

Nothing a repair writes reuses a ``seq``: the new floor is the highest number the header,
any line (readable or not) or any event shows — a line that does not decode counting as
at least one above the line before it, since every stored line was numbered above it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Literal

import msgspec

from creative_memory.engine.erasure_notes import ErasureNote
from creative_memory.engine.events import CHAIN_GENESIS, Event, chain_hash, decode_event

ProblemKind = Literal["unreadable", "altered", "out_of_order", "header", "settings", "version"]


def repair_hint(options: str = "") -> str:
    """What an error about a damaged log (or settings) tells the person to do; ``options``:
    the global options that reach the same memory (a host adds the ones it was given)."""
    cmd = f"creative-memory {options} " if options else "creative-memory "
    return (
        f"the stored memory is damaged: `{cmd}check` lists what is wrong and "
        f"`{cmd}repair --confirm` mends it "
        '(docs/storage.md, "Check and repair")'
    )


#: :func:`repair_hint` as the library and the daemon give it.
REPAIR_HINT: Final = repair_hint()
#: How many problems an answer lists (a log that is all damage would otherwise list one per
#: line); the count of all of them is given beside.
MAX_LISTED_PROBLEMS: Final = 1000
#: How much of a decoder's message a problem keeps (its start names what was wrong).
DETAIL_CHARS: Final = 200


class RawLine(msgspec.Struct, frozen=True, kw_only=True):
    """One stored event, not decoded: ``where`` names it for a person (``"line 7"`` of a
    file, ``"seq 12"`` of a table), ``seq`` is the number its storage shows for it without
    decoding it (a table's column, the ``"seq"`` a line still holds; ``None``: none)."""

    where: str
    seq: int | None
    data: bytes


class RawLog(msgspec.Struct, kw_only=True):
    """A user's log as stored, not decoded: its generation, the highest ``seq`` its header
    (its row) says was handed out, its notes (``None``: they no longer decode), a problem
    with its header (``None``: none) and its events."""

    generation: str
    floor: int
    notes: list[ErasureNote] | None
    header_problem: str | None = None
    lines: list[RawLine] = msgspec.field(default_factory=list)


class LogProblem(msgspec.Struct, frozen=True, kw_only=True):
    """One thing wrong with a log: where (a line or a ``seq``), what, and the detail."""

    where: str
    kind: ProblemKind
    detail: str


class Examined(msgspec.Struct, kw_only=True):
    """:func:`examine`'s answer: the problems found, the events a repair writes (their
    ``seq`` final, their chain not yet computed), the floor it writes, and how many stored
    events it drops and renumbers."""

    problems: list[LogProblem]
    events: list[Event]
    floor: int
    dropped: int
    renumbered: int


def examine(raw: RawLog) -> Examined:
    """What is wrong with ``raw`` and what a repair of it writes (module docstring)."""
    problems: list[LogProblem] = []
    if raw.header_problem is not None:
        problems.append(LogProblem(where="header", kind="header", detail=raw.header_problem))
    decoded: list[tuple[RawLine, Event]] = []
    prev_h: str | None = CHAIN_GENESIS  # None: the line before did not decode
    top = highest_handed_out(raw)
    for line in raw.lines:
        try:
            event = decode_event(line.data)
        except msgspec.DecodeError as exc:
            detail = "an empty line" if not line.data.strip() else str(exc)[:DETAIL_CHARS]
            problems.append(LogProblem(where=line.where, kind="unreadable", detail=detail))
            prev_h = None
            continue
        top = max(top, event.seq)
        if prev_h is not None and event.h != chain_hash(prev_h, event):
            problems.append(
                LogProblem(
                    where=line.where,
                    kind="altered",
                    detail="its hash does not match its content: it was edited outside "
                    "creative-memory (a repair keeps it as it reads now)",
                )
            )
        prev_h = event.h
        decoded.append((line, event))
    events, renumbered = _in_order(decoded, top, problems)
    floor = max([top, *(event.seq for event in events)])
    at = {line.where: i for i, line in enumerate(raw.lines)}  # in the log's order (stable)
    problems.sort(key=lambda p: at.get(p.where, -1))
    return Examined(
        problems=problems,
        events=events,
        floor=floor,
        dropped=len(raw.lines) - len(decoded),
        renumbered=renumbered,
    )


def undecodable(exc: BaseException) -> str:
    """A problem's detail for a document that does not decode: the decoder's words only —
    not the storage's message, which names a path or a database (a check's answer goes to
    the person, over HTTP too, where nothing of the daemon's own layout is shown)."""
    return f"it does not decode ({exc.__cause__ or exc})"[:DETAIL_CHARS]


def listed(problems: Sequence[LogProblem]) -> list[LogProblem]:
    """The problems an answer lists: the first :data:`MAX_LISTED_PROBLEMS` in the log's
    order, those about the header and the settings always among them."""
    if len(problems) <= MAX_LISTED_PROBLEMS:
        return list(problems)
    head = [p for p in problems if p.where == "header"]
    tail = [p for p in problems if p.where == "settings"]
    lines = [p for p in problems if p.where not in ("header", "settings")]
    return head + lines[: MAX_LISTED_PROBLEMS - len(head) - len(tail)] + tail


def highest_handed_out(raw: RawLog) -> int:
    """The highest ``seq`` the log has handed out, as far as it shows without decoding it:
    its floor, any number a line shows, and every line at least one above the line before
    it (a line that shows none — a destroyed last line — still had its number)."""
    top = raw.floor
    last = 0
    for line in raw.lines:
        last = max(last + 1, line.seq or 0)
        top = max(top, last)
    return top


def _in_order(
    decoded: Sequence[tuple[RawLine, Event]], top: int, problems: list[LogProblem]
) -> tuple[list[Event], int]:
    """The events in their stored order with strictly increasing ``seq``: from the first
    one not above the one before it on, each numbered on after ``top``."""
    events: list[Event] = []
    last = 0
    renumbered = 0
    for line, event in decoded:
        if renumbered or event.seq <= last:
            if not renumbered:
                problems.append(
                    LogProblem(
                        where=line.where,
                        kind="out_of_order",
                        detail=f"its seq {event.seq} is not above the one before it ({last}): "
                        "a repair numbers it and every later event on after the highest "
                        f"number the log shows ({top})",
                    )
                )
            top += 1
            renumbered += 1
            event = msgspec.structs.replace(event, seq=top)
        last = event.seq
        events.append(event)
    return events, renumbered
