"""The typed results (and inputs) of the application service (docs/architecture.md).

Each is a ``msgspec.Struct``: the CLI renders it, the HTTP API encodes it and generates its
OpenAPI component schema from the same type.
"""

from __future__ import annotations

from typing import Annotated, Any, Final

import msgspec
from msgspec import UNSET, Meta, UnsetType

from creative_memory.engine.errors import StorageError
from creative_memory.engine.ids import project_id_schema
from creative_memory.engine.logcheck import LogProblem
from creative_memory.engine.preview import PromptChange
from creative_memory.engine.settings import UserSettings, VersionChange
from creative_memory.engine.timeutil import TS_PATTERN

#: The most projects one settings change may name (``project_ignore_global``).
MAX_SETTINGS_PROJECTS: Final = 1000


class SettingsView(msgspec.Struct, kw_only=True):
    """A user's settings as every surface shows them, with whether a pause is in force."""

    memory_enabled: bool
    paused: bool
    paused_until: str | None
    disabled_projects: list[str]
    diagnostics_feed: bool
    paused_now: bool

    @classmethod
    def of(cls, settings: UserSettings, paused_now: bool) -> SettingsView:
        """The view of stored ``settings`` (``paused_now``: whether the pause is in force)."""
        return cls(
            memory_enabled=settings.memory_enabled,
            paused=settings.paused,
            paused_until=settings.paused_until,
            disabled_projects=list(settings.disabled_projects),
            diagnostics_feed=settings.diagnostics_feed,
            paused_now=paused_now,
        )


class SettingsChange(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Several settings changed at once; an absent key changes nothing."""

    # The constraints are in the schema only (``extra_json_schema``, not enforced when
    # decoding): the service judges every key first, naming the first bad one.
    memory_enabled: bool | UnsetType = UNSET
    paused: bool | UnsetType = UNSET
    paused_until: Annotated[
        Annotated[str, Meta(extra_json_schema={"pattern": TS_PATTERN})] | UnsetType | None,
        Meta(
            description="A pause end: an ISO 8601 date or date-time in the future (needs "
            "paused true or absent); null: paused until resumed.",
        ),
    ] = UNSET
    project_ignore_global: (
        Annotated[
            dict[str, bool],
            Meta(
                description="Project id: whether retrieval for that project ignores global memory.",
                extra_json_schema={
                    "propertyNames": project_id_schema(),
                    "maxProperties": MAX_SETTINGS_PROJECTS,
                },
            ),
        ]
        | UnsetType
    ) = UNSET
    diagnostics_feed: bool | UnsetType = UNSET


class ProjectToggle(msgspec.Struct, kw_only=True):
    """A project's global-memory switch after a change, and whether it changed."""

    project_id: str
    ignores_global: bool
    changed: bool
    settings: SettingsView


class SettingsUpdate(msgspec.Struct, kw_only=True):
    """A user's settings after one switch, and whether the switch changed anything."""

    changed: bool
    settings: SettingsView


class ForgetResult(msgspec.Struct, kw_only=True):
    """What ``forget`` erased; ``events_removed`` is 0 when there was nothing to forget,
    and then ``elsewhere`` lists the other scopes (``global``, ``project:P``) holding
    exactly that pattern or, when none does, ``suggestions`` close ``type/pattern`` names
    from the user's records."""

    user_id: str
    preference_type: str
    pattern: str
    project_id: str | None
    events_removed: int
    suggestions: list[str] = msgspec.field(default_factory=list)
    elsewhere: list[str] = msgspec.field(default_factory=list)


class ResetResult(msgspec.Struct, kw_only=True):
    """What ``reset`` erased and what is left."""

    user_id: str
    scope: str
    events_removed: int
    events_remaining: int
    settings: SettingsView


class CheckResult(msgspec.Struct, kw_only=True):
    """What a check found wrong with a user's stored memory: ``healthy`` when nothing;
    ``events``: the events of the log that decode; ``problems``: the first 1,000 found
    (those about the header and the settings always among them), ``problems_total`` all of
    them (docs/storage.md, "Check and repair")."""

    user_id: str
    healthy: bool
    events: int
    problems: list[LogProblem]
    problems_total: int


class RepairResult(msgspec.Struct, kw_only=True):
    """What a repair found and did: ``repaired`` when anything was written; the events it
    kept, dropped (lines that were not events) and numbered anew; the file the dropped
    lines were saved to, if any; whether settings that no longer decoded were written anew
    (with memory off). ``problems`` lists what was found, the settings' included (as a
    check lists them: the first 1,000, ``problems_total`` all)."""

    user_id: str
    repaired: bool
    events_kept: int
    events_dropped: int
    events_renumbered: int
    dropped_saved_to: str | None
    settings_rewritten: bool
    problems: list[LogProblem]
    problems_total: int


class ExportResult(msgspec.Struct, kw_only=True):
    """An archive written (or ready to download): its size, checksum and suggested name."""

    user_id: str
    events: int
    checksum: str
    filename: str


class ImportResult(msgspec.Struct, kw_only=True):
    """What an archive import added, and where the user's memory stands after it."""

    user_id: str
    mode: str
    archive_user_id: str
    archive_events: int
    events_added: int
    events_total: int


class AsOf(msgspec.Struct, kw_only=True):
    """The point in a user's history a result describes: right after event ``at_seq``."""

    at_seq: int
    recorded_at: str
    derivation_version: str
    events: int
    #: the next event of the log after this point (a history's "step forward"); ``None``
    #: when the point is the log's last event (now)
    next_seq: int | None = None


class PromptResult(msgspec.Struct, kw_only=True):
    """A memory block (and, for ``compose``, the host prompt with the block placed)."""

    variant: str
    project_id: str | None
    block: str
    diagnostics_feed: str
    prompt: str | None = None
    as_of: AsOf | None = None


class DerivationInfo(msgspec.Struct, kw_only=True):
    """The derivation version a user's memory uses, the store's default, every known
    version, and the user's switches (docs/time-travel.md)."""

    user_id: str
    in_force: str
    default: str
    chosen: bool
    known: list[str]
    history: list[VersionChange]


class PreviewResult(msgspec.Struct, kw_only=True):
    """What switching ``user_id``'s memory to ``to_version`` would change (docs/time-travel.md)."""

    user_id: str
    project_id: str | None
    from_version: str
    to_version: str
    change: PromptChange


class IngestInput(msgspec.Struct, kw_only=True):
    """One parsed input item: its location label, its JSON value, or why it did not parse."""

    where: str | None = None
    value: Any = None
    error: str | None = None


class IngestItem(msgspec.Struct, kw_only=True):
    """What happened to one event (``where`` is ``None`` for pending edits delivered later)."""

    where: str | None
    event: str
    status: str
    reason: str | None
    artifact_id: str | None


class IngestResult(msgspec.Struct, kw_only=True):
    """The per-event report of one ingest call, with the totals."""

    user_id: str
    events: int
    accepted: int
    coalesced: int
    rejected: int
    flushed: int
    failed: int
    inferred: int
    learning: bool
    redactions: dict[str, int]
    results: list[IngestItem]


class IngestInterrupted(KeyboardInterrupt):
    """An ingest stopped by an interrupt (Ctrl-C) between two of its events: ``result`` is
    the report of the events read before it — stored, coalesced or rejected — with the
    pending edit-saves delivered, so nothing read is lost and nothing after it was read
    (``MemoryService.ingest``). Uncaught, it is the interrupt it stands for."""

    def __init__(self, result: IngestResult) -> None:
        super().__init__(f"interrupted after {result.events} events")
        self.result = result


class IngestStopped(StorageError):
    """An ingest stopped by a storage failure (a database gone away, a full disk): its
    message is the failure's, and ``result`` the report of the events taken before the
    one that failed — what is stored — so a host can say what landed and feed only the
    rest again (``MemoryService.ingest``). Edit-saves still pending are not delivered."""

    def __init__(self, result: IngestResult, failure: StorageError) -> None:
        super().__init__(str(failure))
        self.result = result
