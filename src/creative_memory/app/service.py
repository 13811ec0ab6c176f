"""The application service: every user-facing operation, once (docs/architecture.md).

The CLI and the HTTP API both parse their input into Python values, call one
:class:`MemoryService` method and render its result; they never decide. Each method
validates everything it is given (a :class:`ValidationError` naming the field), writes
nothing when it fails, and returns a typed result (a ``msgspec.Struct``: the HTTP layer
encodes it and generates its OpenAPI schema from the same type).

The rules that the surfaces used to decide differently (docs/architecture.md,
"One answer on every surface"):

* a pause must end in the future (``until``);
* erasure is idempotent: forgetting a pattern, or resetting a project, that has no memory
  succeeds and reports 0 events removed;
* an event is validated on its own: a non-object, an unknown kind, a missing ``user_id``
  or one naming another user rejects that event only, with a reason.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import msgspec

from creative_memory.app.history import History, inspect_at, preview, retrieval_at
from creative_memory.app.history import as_of as history_as_of
from creative_memory.app.ingesting import ingest_items
from creative_memory.app.lookup import hints, nothing
from creative_memory.app.migration import MigrateResult, migrate_prototype
from creative_memory.app.paths import output_file, read_file
from creative_memory.app.repair import (
    check_every_memory,
    check_memory,
    repair_memory,
    verified_checksum,
)
from creative_memory.app.results import (
    CheckResult,
    DerivationInfo,
    ExportResult,
    ForgetResult,
    ImportResult,
    IngestInput,
    IngestInterrupted,
    IngestItem,
    IngestResult,
    IngestStopped,
    PreviewResult,
    ProjectToggle,
    PromptResult,
    RepairResult,
    ResetResult,
    SettingsChange,
    SettingsUpdate,
    SettingsView,
)
from creative_memory.app.settings_change import settings_edit
from creative_memory.app.store import MemoryStore
from creative_memory.app.worker import DerivationWorker, lazy_status
from creative_memory.capture.layer import CaptureLayer
from creative_memory.engine.derivation.registry import check_version, known_versions
from creative_memory.engine.errors import Conflict, NotFound, StorageError, ValidationError
from creative_memory.engine.events import validate_project_id
from creative_memory.engine.explain import Explanation
from creative_memory.engine.ids import bucket_of_scope
from creative_memory.engine.models import DecayResult, RetrievalResult
from creative_memory.engine.portability.archive import decode_archive, encode_archive
from creative_memory.engine.prompt import (
    build_critique_block,
    build_generation_block,
    build_prompt_block,
    insert_memory_block_into_prompt,
    remove_memory_block,
    summarize_diagnostics,
)
from creative_memory.engine.scope import validate_feature
from creative_memory.engine.settings import VersionChange
from creative_memory.engine.timeline import Timeline, timeline
from creative_memory.engine.timeutil import format_ts, instant_to_ms
from creative_memory.storage.files.fsutil import atomic_write

__all__ = [
    "CheckResult",
    "Conflict",
    "DerivationInfo",
    "ExportResult",
    "ForgetResult",
    "ImportResult",
    "IngestInput",
    "IngestInterrupted",
    "IngestItem",
    "IngestResult",
    "IngestStopped",
    "MemoryService",
    "NotFound",
    "PreviewResult",
    "ProjectToggle",
    "PromptResult",
    "RepairResult",
    "ResetResult",
    "SettingsChange",
    "SettingsUpdate",
    "SettingsView",
    "StorageError",
    "ValidationError",
]

VARIANTS: Final = ("generation", "critique", "legacy")
COMPOSE_VARIANTS: Final = ("generation", "critique")  # the variants with a heading to place
IMPORT_MODES: Final = ("merge", "replace")


# -- the service ---------------------------------------------------------------------------
class MemoryService:
    """Every user-facing operation over one :class:`MemoryStore` — and, in a daemon with
    background derivation, the :class:`DerivationWorker` that derives after each batch
    (``inspect`` reports it; docs/daemon.md, "Background derivation")."""

    def __init__(self, store: MemoryStore, worker: DerivationWorker | None = None) -> None:
        self.store = store
        self.history = History(store)
        self.worker = worker

    # settings -----------------------------------------------------------------------------
    def settings(self, user_id: str) -> SettingsView:
        """The user's settings and whether a pause is in force now."""
        return SettingsView.of(self.store.get_settings(user_id), self.store.is_paused(user_id))

    def set_enabled(self, user_id: str, enabled: bool) -> SettingsUpdate:
        """The soft kill switch: off means nothing is learned or injected (nothing deleted)."""
        return self._update(user_id, lambda: self.store.set_memory_enabled(user_id, enabled))

    def pause(self, user_id: str, until: str | None = None) -> SettingsUpdate:
        """Pause learning until ``until`` (a future ISO 8601 date) or until resumed."""
        return self._update(user_id, lambda: self.store.pause(user_id, until))

    def resume(self, user_id: str) -> SettingsUpdate:
        """End a pause (``changed`` is false when learning was not paused)."""
        return self._update(user_id, lambda: self.store.resume(user_id))

    def _update(self, user_id: str, change: Callable[[], None]) -> SettingsUpdate:
        """Apply one switch; ``changed`` tells whether the settings differ afterwards."""
        before = self.settings(user_id)
        change()
        after = self.settings(user_id)
        return SettingsUpdate(changed=after != before, settings=after)

    def set_derivation_version(self, user_id: str, version: str) -> SettingsUpdate:
        """Make ``version`` the derivation version ``user_id``'s memory uses (reversibly: the
        log is untouched and each version's cache stays under its own key); a switch of the
        version in force is recorded with its time (docs/time-travel.md). Unchanged only
        when it already is the user's choice: a store's default is not one."""
        check_version(version)
        chosen = self.store.get_settings(user_id).derivation_version
        try:
            before = self.store._version_of(user_id)
        except ValidationError:  # one this release does not know (a newer one chose it)
            before = chosen or self.store.derivation_version
        if version != chosen:
            at = format_ts(self.store.now_ms())
            switch = [VersionChange(at=at, version=version, previous=before)]
            self.store._update_settings(
                user_id,
                lambda s: msgspec.structs.replace(
                    s,
                    derivation_version=version,
                    derivation_history=[
                        *s.derivation_history,
                        *(switch if version != before else []),
                    ],
                ),
            )
        return SettingsUpdate(changed=version != chosen, settings=self.settings(user_id))

    def derivation(self, user_id: str) -> DerivationInfo:
        """Which derivation version ``user_id``'s memory uses, and the choices."""
        settings = self.store.get_settings(user_id)
        return DerivationInfo(
            user_id=user_id,
            in_force=self.store._version_of(user_id),
            default=self.store.derivation_version,
            chosen=settings.derivation_version is not None,
            known=list(known_versions()),
            history=list(settings.derivation_history),
        )

    def preview(self, user_id: str, version: str, project_id: str | None = None) -> PreviewResult:
        """What switching to ``version`` would change: records, the injected set, the block.
        Writes nothing."""
        return preview(self.store, self.history, user_id, version, project_id)

    def set_project_ignores_global(
        self, user_id: str, project_id: str, ignore: bool
    ) -> ProjectToggle:
        """Make retrieval for ``project_id`` ignore global memory (or use it again)."""
        validate_project_id(project_id)
        before = project_id in self.store.get_settings(user_id).disabled_projects
        self.store.set_project_disabled(user_id, project_id, ignore)
        return ProjectToggle(
            project_id=project_id,
            ignores_global=ignore,
            changed=before != ignore,
            settings=self.settings(user_id),
        )

    def set_diagnostics_feed(self, user_id: str, enabled: bool) -> SettingsUpdate:
        """Switch the one-line diagnostics summary for chat."""
        return self._update(user_id, lambda: self.store.set_diagnostics_feed(user_id, enabled))

    def change_settings(self, user_id: str, change: SettingsChange) -> SettingsView:
        """Change several settings at once: everything is validated before anything is
        written, then written in one settings update, so a bad key changes nothing
        (app/settings_change.py)."""
        edit = settings_edit(change, self.store.now_ms())
        self.store.get_settings(user_id)  # validates user_id before the write
        if edit is not None:
            self.store._update_settings(user_id, edit)
        return self.settings(user_id)

    # reading ------------------------------------------------------------------------------
    def inspect(
        self,
        user_id: str,
        project_id: str | None = None,
        *,
        at_seq: int | None = None,
        as_of: str | None = None,
    ) -> dict[str, Any]:
        """Settings, every derived record with provenance, the retrieval and its diagnostics,
        and the list of projects (JSON-ready; docs/inspect.schema.json) — now, or right
        after event ``at_seq`` / as of a time (docs/time-travel.md)."""
        point = self.history.point(user_id, at_seq, as_of)
        if point is None:
            doc = self.store.inspect(user_id, project_id)
            worker = self.worker
            status = lazy_status(user_id) if worker is None else worker.status_of(user_id)
            doc["derivation"] = msgspec.to_builtins(status)
        else:
            doc = inspect_at(self.store, self.history, user_id, project_id, point)
        found = set(doc["settings"].get("disabled_projects", []))
        for rec in doc["preferences"]:
            bucket = bucket_of_scope(rec["scope"])
            if bucket is not None:
                found.add(bucket)
        doc["projects"] = sorted(found)
        return doc

    def explain(
        self,
        user_id: str,
        preference_type: str,
        pattern: str,
        project_id: str | None = None,
        *,
        at_seq: int | None = None,
        as_of: str | None = None,
    ) -> Explanation:
        """The derivation trace of one pattern (up to event ``at_seq`` / time ``as_of``);
        :class:`NotFound` when nothing is known."""
        point = self.history.point(user_id, at_seq, as_of)
        validate_feature(user_id, preference_type, pattern, project_id)
        result = self.history.explained(user_id, point, (preference_type, pattern, project_id))
        if point is not None:
            result.as_of = msgspec.to_builtins(history_as_of(point))
        if not result.steps and not result.records:
            feature = (preference_type, pattern, project_id)
            raise nothing(self.store, "to explain", user_id, feature, point)
        return result

    def timeline(
        self,
        user_id: str,
        preference_type: str,
        pattern: str,
        project_id: str | None = None,
        *,
        at_seq: int | None = None,
        as_of: str | None = None,
    ) -> Timeline:
        """The evidence about one pattern (up to event ``at_seq`` / time ``as_of``), read
        from the log without deriving; :class:`NotFound` when there is none."""
        validate_feature(user_id, preference_type, pattern, project_id)
        point = self.history.point(user_id, at_seq, as_of)
        events = self.history.events_until(user_id, point)
        result = timeline(events, preference_type, pattern, project_id)
        if not result.events:
            feature = (preference_type, pattern, project_id)
            raise nothing(self.store, "to show", user_id, feature, point)
        result.as_of = None if point is None else msgspec.to_builtins(history_as_of(point))
        return result

    # erasure ------------------------------------------------------------------------------
    def forget(
        self,
        user_id: str,
        preference_type: str,
        pattern: str,
        project_id: str | None = None,
    ) -> ForgetResult:
        """Erase every raw event about one pattern; 0 removed when there was nothing."""
        removed = self.store.forget(user_id, preference_type, pattern, project_id=project_id)
        feature = (preference_type, pattern, project_id)
        close, other = ([], []) if removed else hints(self.store, user_id, *feature)
        return ForgetResult(
            user_id=user_id,
            preference_type=preference_type,
            pattern=pattern,
            project_id=project_id,
            events_removed=removed,
            suggestions=close,
            elsewhere=other,
        )

    def reset(self, user_id: str, scope: str = "all", *, confirm: bool) -> ResetResult:
        """Erase memory for real in ``scope``; needs ``confirm=True``."""
        if confirm is not True:
            raise ValidationError(
                "confirm", "a reset erases memory for real: confirm it (confirm=true, --confirm)"
            )
        erased = self.store._reset(user_id, scope)
        return ResetResult(
            user_id=user_id,
            scope=scope,
            events_removed=erased,
            events_remaining=self.store._storage.event_count(user_id),
            settings=self.settings(user_id),
        )

    # check and repair ---------------------------------------------------------------------
    def check(self, user_id: str) -> CheckResult:
        """What is wrong with the user's stored log and settings; nothing is written."""
        return check_memory(self.store, user_id)

    def check_all(self) -> list[CheckResult]:
        """:meth:`check` of every user the storage holds (an operator's question)."""
        return check_every_memory(self.store)

    def repair(
        self,
        user_id: str,
        *,
        confirm: bool,
        save_dropped: str | os.PathLike[str] | None = None,
    ) -> RepairResult:
        """Mend a damaged log and settings (docs/storage.md, "Check and repair"); needs
        ``confirm=True``. ``save_dropped``: a file for the lines the repair drops."""
        if confirm is not True:
            raise ValidationError(
                "confirm",
                "a repair drops the lines that are not events and keeps edited events as they "
                "read now: confirm it (confirm=true, --confirm)",
            )
        return repair_memory(self.store, user_id, save_dropped)

    # portability --------------------------------------------------------------------------
    def export_archive(self, user_id: str) -> tuple[bytes, ExportResult]:
        """The user's archive (raw events and settings, checksummed) and what it holds."""
        events = self.store.events(user_id)
        data = encode_archive(user_id, self.store.get_settings(user_id), events)
        checksum = verified_checksum(data)
        stamp = datetime.fromtimestamp(self.store.now_ms() / 1000, UTC).strftime("%Y%m%d")
        return data, ExportResult(
            user_id=user_id,
            events=len(events),
            checksum=checksum,
            filename=f"creative-memory-{user_id}-{stamp}.json",
        )

    def export_to(self, user_id: str, path: str | os.PathLike[str]) -> ExportResult:
        """Write the user's archive to ``path`` (atomically; the directory must exist, and
        not inside the file store's directory: :func:`~creative_memory.app.paths.output_file`)."""
        target = output_file("path", path, self.store._files_root())
        data, result = self.export_archive(user_id)
        atomic_write(target, data)
        return result

    def import_archive(self, user_id: str, data: bytes, mode: str = "merge") -> ImportResult:
        """Import an archive (``merge`` or ``replace``); nothing is written when it fails."""
        if mode not in IMPORT_MODES:
            raise ValidationError("mode", f'mode must be "merge" or "replace", got {mode!r}')
        if not data.strip():
            raise ValidationError("archive", "the archive is empty; send an export archive")
        archive = decode_archive(data)
        added = self.store._import_bytes(user_id, data, mode)
        return ImportResult(
            user_id=user_id,
            mode=mode,
            archive_user_id=archive.user_id,
            archive_events=len(archive.events),
            events_added=added,
            events_total=self.store._storage.event_count(user_id),
        )

    def import_file(
        self, user_id: str, path: str | os.PathLike[str], mode: str = "merge"
    ) -> ImportResult:
        """Import the archive in ``path``."""
        return self.import_archive(user_id, read_file("path", Path(path)), mode)

    def migrate(
        self, user_id: str, path: str | os.PathLike[str], *, from_user: str | None = None
    ) -> MigrateResult:
        """Import a prototype-era ``preferences.json`` (the file, a prototype user directory
        or a prototype root holding ``<user>/preferences.json``); another user's file only
        when ``from_user`` names its owner (app/migration.py)."""
        return migrate_prototype(self.store, self.settings, user_id, Path(path), from_user)

    # ingest -------------------------------------------------------------------------------
    def ingest(
        self,
        user_id: str,
        items: Iterable[IngestInput],
        layer: CaptureLayer,
        *,
        now_ms: int | None = None,
        close: bool = False,
        progress: Callable[[int], None] | None = None,
        sync_every: int = 0,
    ) -> IngestResult:
        """Feed wire-format events through the capture layer for ``user_id``.

        Each item is judged on its own; a bad one is reported ``rejected`` with a reason
        and never stops the rest. With ``now_ms`` every event is captured at that time (the
        daemon); without it each event's own ``timestamp`` is its capture time (replaying
        a file). ``close`` delivers the pending edit-saves at the end (a one-shot batch).
        ``progress`` is called with 1 after each item (a progress display). ``sync_every``
        makes the appends of every so many items durable together (one fsync per batch
        instead of one per event; not inside another such block, e.g. the daemon's lane).

        An interrupt (``KeyboardInterrupt``) stops it: the pending edit-saves are delivered
        all the same (with ``close``) and :class:`IngestInterrupted` carries the report of
        the items taken before it. An interrupt that lands while an event is being stored
        may leave that one event stored and unreported; the CLI holds Ctrl-C back until
        the item in hand is done (or raises it from ``progress``).
        """
        return ingest_items(
            self.store, user_id, items, layer,
            now_ms=now_ms, close=close, progress=progress, sync_every=sync_every,
        )  # fmt: skip

    # prompt and decay ---------------------------------------------------------------------
    def prompt(
        self,
        user_id: str,
        project_id: str | None = None,
        variant: str = "generation",
        *,
        at_seq: int | None = None,
        as_of: str | None = None,
    ) -> PromptResult:
        """The memory block for a generation (or critique, or the legacy block) — now, or
        as it was right after event ``at_seq`` / as of a time."""
        _choice("variant", variant, VARIANTS)
        if project_id is not None:
            validate_project_id(project_id)
        point = self.history.point(user_id, at_seq, as_of)
        if point is None:  # rendered, never changed: the memoised retrieval, not a copy
            retrieved = self.store._retrieved(
                user_id, None if project_id is None else {"project_id": project_id}
            )[0]
        else:
            retrieved = retrieval_at(self.store, self.history, user_id, project_id, point)
        return PromptResult(
            variant=variant,
            project_id=project_id,
            block=_block(variant, retrieved, project_id),
            diagnostics_feed=self._feed(user_id, retrieved),
            as_of=None if point is None else history_as_of(point),
        )

    def compose(
        self,
        user_id: str,
        host_prompt: str,
        project_id: str | None = None,
        variant: str = "generation",
        *,
        at_seq: int | None = None,
        as_of: str | None = None,
    ) -> PromptResult:
        """The host's composed system prompt with the memory block placed in it — the block
        of now, or as it was right after event ``at_seq`` / as of a time
        (docs/prompt-composition.md)."""
        if not isinstance(host_prompt, str):
            raise ValidationError("host_prompt", "host_prompt must be a string")
        if variant == "legacy":
            raise ValidationError(
                "variant", "the legacy block has no heading to place; use generation or critique"
            )
        _choice("variant", variant, COMPOSE_VARIANTS)
        result = self.prompt(user_id, project_id, variant, at_seq=at_seq, as_of=as_of)
        # nothing to inject (memory off, forgotten, empty): a block composed earlier goes too
        result.prompt = (
            insert_memory_block_into_prompt(host_prompt, result.block)
            if result.block.strip()
            else remove_memory_block(host_prompt)
        )
        return result

    def decay(self, user_id: str, now: str | None = None) -> DecayResult:
        """One decay pass at ``now`` (default: the store's clock). A ``now`` later than the
        clock is refused: the pass is stored, and records weakened or archived by time
        that has not passed would stay so until new evidence revives them one by one."""
        if now is not None and instant_to_ms(now, "now") > self.store.now_ms():
            raise ValidationError(
                "now",
                f"{now} is in the future: a decay pass is stored, and what it weakens or "
                "archives stays so; run it as of now or an earlier time",
            )
        return self.store.run_decay(user_id, now)

    # helpers ------------------------------------------------------------------------------
    def _feed(self, user_id: str, retrieved: RetrievalResult) -> str:
        if not self.store.get_settings(user_id).diagnostics_feed:
            return ""
        return summarize_diagnostics(retrieved)


def _choice(field: str, value: object, allowed: tuple[str, ...]) -> None:
    if not isinstance(value, str) or value not in allowed:
        raise ValidationError(field, f"{field} must be one of {', '.join(allowed)}; got {value!r}")


def _block(variant: str, retrieved: RetrievalResult, project_id: str | None) -> str:
    if variant == "generation":
        return build_generation_block(retrieved, project_id)
    if variant == "critique":
        return build_critique_block(retrieved, project_id)
    return build_prompt_block(retrieved, project_id)
