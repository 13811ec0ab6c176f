"""Check and repair a user's log through a ``MemoryStore`` (docs/storage.md, "Check and
repair").

A check reads the log without decoding it into state (``storage.read_raw``), says what is
wrong with it (:func:`~creative_memory.engine.logcheck.examine`) and whether the settings
load; it writes nothing. A repair does the same under the user's locks and, when anything
is wrong with the log, replaces it with what the check says a repair keeps: the lines that
are not events dropped (first written, on request, to a file the caller names, so nothing
is lost that the person wants back), edited events kept as they read now and chained
again, events out of order numbered on. Like an erasure, it starts a new generation,
deletes every derived artefact and derives again; unlike one, it erases nothing that was
an event, and its note says so. Settings that no longer decode are written anew with
memory off. A healthy memory is left as it is. An export verifies the chain of what it
read here too (:func:`verified_checksum`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from creative_memory.app.paths import output_file
from creative_memory.app.results import CheckResult, RepairResult
from creative_memory.engine.errors import CreativeMemoryError, LogDamaged, ValidationError
from creative_memory.engine.events import validate_user_id
from creative_memory.engine.logcheck import (
    REPAIR_HINT,
    Examined,
    LogProblem,
    RawLog,
    examine,
    listed,
    undecodable,
)
from creative_memory.engine.portability.archive import decode_archive
from creative_memory.engine.settings import UserSettings
from creative_memory.storage.files.fsutil import atomic_write

if TYPE_CHECKING:
    from creative_memory.app.store import MemoryStore


def check_memory(store: MemoryStore, user_id: str) -> CheckResult:
    """:meth:`MemoryService.check`: :func:`check`'s findings as the surfaces answer them."""
    examined, problems = check(store, user_id)
    return CheckResult(
        user_id=user_id,
        healthy=not problems,
        events=0 if examined is None else len(examined.events),
        problems=listed(problems),
        problems_total=len(problems),
    )


def check_every_memory(store: MemoryStore) -> list[CheckResult]:
    """:meth:`MemoryService.check_all`: :func:`check_memory` of every user the storage
    holds (a log or settings), in the order of their ids."""
    return [check_memory(store, user_id) for user_id in store._storage.user_ids()]


def repair_memory(
    store: MemoryStore, user_id: str, save_dropped: str | os.PathLike[str] | None
) -> RepairResult:
    """:meth:`MemoryService.repair` (its ``confirm`` checked): :func:`repair`'s findings
    and what it did, as the surfaces answer them."""
    done = repair(store, user_id, save_dropped)
    examined, written = done.examined, done.log_rewritten
    found = [*([] if examined is None else examined.problems), *done.settings_problems]
    return RepairResult(
        user_id=user_id,
        repaired=written or done.settings_rewritten,
        events_kept=0 if examined is None else len(examined.events),
        events_dropped=0 if examined is None or not written else examined.dropped,
        events_renumbered=0 if examined is None or not written else examined.renumbered,
        dropped_saved_to=None if done.saved_to is None else str(done.saved_to),
        settings_rewritten=done.settings_rewritten,
        problems=listed(found),
        problems_total=len(found),
    )


def check(store: MemoryStore, user_id: str) -> tuple[Examined | None, list[LogProblem]]:
    """What is wrong with the user's log (``None``: there is none) and, as a problem of its
    own, with their settings when they do not load — nothing written."""
    validate_user_id(user_id)
    raw = store._storage.read_raw(user_id)
    examined = None if raw is None else examine(raw)
    problems = [] if examined is None else list(examined.problems)
    return examined, problems + _settings_problems(store, user_id)[0]


class Repaired(NamedTuple):
    """What :func:`repair` found (``examined``: ``None`` when there is no log) and did."""

    examined: Examined | None
    log_rewritten: bool
    saved_to: Path | None
    settings_problems: list[LogProblem]
    settings_rewritten: bool


def repair(
    store: MemoryStore, user_id: str, save_dropped: str | os.PathLike[str] | None = None
) -> Repaired:
    """Repair the user's log, and settings that no longer decode: those are written anew
    with memory off (what they said — off, paused — cannot be read, and learning must not
    resume behind the person's back). Settings naming a derivation version this release
    does not know are left as they are (a newer release wrote them). ``save_dropped``: a
    file the lines a repair drops are written to first (only when it drops any); if that
    write fails, nothing is repaired."""
    validate_user_id(user_id)
    target = None if save_dropped is None else _target(store, save_dropped)
    found: list[Examined] = []
    saved: list[Path] = []

    def decide(raw: RawLog) -> Examined | None:
        examined = examine(raw)
        found.append(examined)
        if not examined.problems:
            return None
        dropped = _dropped(raw, examined)
        if target is not None and dropped:
            atomic_write(target, b"".join(line + b"\n" for line in dropped))
            saved.append(target.resolve())
        return examined

    with store._locked(user_id):
        store._storage.repair(user_id, decide)
        examined = found[0] if found else None
        written = examined is not None and bool(examined.problems)
        settings, unreadable = _settings_problems(store, user_id)
        if unreadable:
            store._storage.write_settings(user_id, UserSettings(memory_enabled=False))
        if written or unreadable:
            store._forget_states(user_id)
            # derive again, as an erasure does — unless the settings still do not load (they
            # name an unknown version; settings written anew here load)
            if unreadable or not settings:
                store._refresh(user_id, write_back=True)
    return Repaired(examined, written, saved[0] if saved else None, settings, unreadable)


def _dropped(raw: RawLog, examined: Examined) -> list[bytes]:
    """The stored lines a repair drops: those ``examined`` found unreadable, in order."""
    unreadable = {p.where for p in examined.problems if p.kind == "unreadable"}
    return [line.data for line in raw.lines if line.where in unreadable]


def _target(store: MemoryStore, path: str | os.PathLike[str]) -> Path:
    """The file the dropped lines go to (:func:`~creative_memory.app.paths.output_file`)."""
    return output_file("save_dropped", path, store._files_root())


def _settings_problems(store: MemoryStore, user_id: str) -> tuple[list[LogProblem], bool]:
    """The user's settings as a problem when they do not load, and whether that is because
    they no longer decode (else they name a derivation version this release does not know,
    kind ``version``, which a repair leaves)."""
    try:
        store._storage.read_settings(user_id)
    except LogDamaged as exc:
        return [LogProblem(where="settings", kind="settings", detail=undecodable(exc))], True
    try:
        store._states_of(user_id)
    except (CreativeMemoryError, ValidationError) as exc:
        return [LogProblem(where="settings", kind="version", detail=str(exc))], False
    return [], False


def verified_checksum(archive: bytes) -> str:
    """The checksum of an archive just encoded from the stored log, decoding it again:
    that verifies the log's hash chain (what was read is what was written). A chain that
    does not verify is the stored log's damage, not the caller's input."""
    try:
        return decode_archive(archive).checksum
    except ValidationError as exc:
        raise LogDamaged(
            f"the event log was altered outside creative-memory: {exc}; {REPAIR_HINT}"
        ) from exc
