"""The typed bodies of the HTTP API (docs/http.md): request bodies are decoded into these
``msgspec`` Structs (unknown keys refused), responses are encoded from the service's result
types, and the OpenAPI component schemas are generated from both (http/openapi.py)."""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

import msgspec
from msgspec import Meta

from creative_memory.app.results import AsOf
from creative_memory.app.service import (
    COMPOSE_VARIANTS,
    CheckResult,
    DerivationInfo,
    ForgetResult,
    ImportResult,
    IngestResult,
    PreviewResult,
    PromptResult,
    RepairResult,
    ResetResult,
    SettingsChange,
    SettingsUpdate,
    SettingsView,
)
from creative_memory.app.worker import UserDerivation
from creative_memory.engine.derivation.registry import known_versions
from creative_memory.engine.explain import Explanation
from creative_memory.engine.ids import (
    MAX_ID_LENGTH,
    RESERVED_IDS,
    SAFE_ID_CHARS,
    project_id_schema,
)
from creative_memory.engine.models import Preference, RetrievalResult
from creative_memory.engine.text import MAX_TEXT_LENGTH
from creative_memory.engine.timeline import Timeline
from creative_memory.engine.timeutil import TS_PATTERN
from creative_memory.http.config import MAX_BATCH
from creative_memory.http.problems import ProblemDoc

# -- query and path parameters -------------------------------------------------------------
# Parameters are parsed by the routes (routes/common.py), never decoded with these types:
# their constraints only say what the route and the service accept.
ProjectParam = Annotated[
    str,
    Meta(
        description="A project id; empty or absent means no project (global memory).",
        extra_json_schema=project_id_schema(empty=True),
    ),
]
VariantParam = Annotated[
    Literal["generation", "critique", "legacy"], Meta(description="Which memory block.")
]
FormatParam = Annotated[Literal["text", "json"], Meta(description="text/plain or JSON.")]
ModeParam = Annotated[Literal["merge", "replace"], Meta(description="How to import.")]
PathSegment = Annotated[
    str,
    Meta(
        min_length=1,
        max_length=MAX_TEXT_LENGTH,
        description="Percent-encode '/' as %2F.",
    ),
]
AtSeqParam = Annotated[
    int,
    Meta(
        ge=0,
        description="Right after this event (docs/time-travel.md); not with as_of. Written "
        "with at most 30 digits; a number past the last event means now.",
    ),
]
AsOfParam = Annotated[
    str,
    Meta(
        pattern=TS_PATTERN,
        description="As of this ISO 8601 time: right after the last event recorded by then "
        "(a bare date is its midnight UTC; docs/time-travel.md); not with at_seq.",
    ),
]
_KNOWN: Final = {"enum": list(known_versions())}
VersionParam = Annotated[
    str, Meta(description="A derivation version (docs/engine.md).", extra_json_schema=_KNOWN)
]


# -- request bodies --------------------------------------------------------------------------
# A body is decoded into its Struct: a constraint msgspec would enforce changes what the
# route answers (which key a 422 names first, its detail), so what the service judges is
# stated in ``extra_json_schema``, for the document only.
_RESERVED_SCOPES: Final = [f"project:{r}" for r in RESERVED_IDS]
_SCOPE: Final = {
    "pattern": f"^(all|global|project:[{SAFE_ID_CHARS}]{{1,{MAX_ID_LENGTH}}})$",
    "not": {"enum": _RESERVED_SCOPES},
}


class ComposeRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """POST /api/v1/prompt: the host's composed system prompt and what to retrieve for."""

    host_prompt: Annotated[str, Meta(description="The host's composed system prompt.")]
    project_id: Annotated[
        Annotated[str, Meta(extra_json_schema=project_id_schema(empty=True))] | None,
        Meta(description="Empty or null: no project."),
    ] = None
    variant: Annotated[
        str,
        Meta(
            description="generation (default) or critique.",
            extra_json_schema={"enum": list(COMPOSE_VARIANTS)},
        ),
    ] = "generation"
    format: FormatParam = "text"


class DerivationRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """POST /api/v1/derivation: the derivation version the user's memory is to use."""

    version: VersionParam


class ResetRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """POST /api/v1/reset: a reset erases for real, so ``confirm`` must be true."""

    confirm: Annotated[
        bool,
        Meta(description="Must be true (absent or false: 422).", extra_json_schema={"const": True}),
    ] = False
    scope: Annotated[
        str, Meta(description='"all", "global" or "project:<id>".', extra_json_schema=_SCOPE)
    ] = "all"


class RepairRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """POST /api/v1/repair: a repair drops what is not an event, so ``confirm`` must be true.

    Only ``confirm``: the file the library and the command line can save the dropped lines
    to (``save_dropped``) would be a path on the daemon's disk, which a remote caller does
    not choose (docs/storage.md, "Check and repair")."""

    confirm: Annotated[
        bool,
        Meta(description="Must be true (absent or false: 422).", extra_json_schema={"const": True}),
    ] = False


_EVENT_DOC: Final = (
    "A wire-format event (docs/http.md, 'Ingestion'): `event` names the handler without its "
    "`on_` prefix; `user_id` must be the token's user. Every item of a batch is judged on "
    "its own and reported; a bad item is `rejected` with a reason, never an HTTP error."
)


class WireEvent(msgspec.Struct, kw_only=True):
    """One wire-format event; every problem with it is reported per event, not as an error.

    Only the keys common to every kind are listed: an event also carries its kind's own
    keys (`rating`, `tag_text`, `diff`, `chose`/`over`, ...), checked per event."""

    # open in the OpenAPI document (OPEN_COMPONENTS): additionalProperties: true

    event: Annotated[Any, Meta(description="thumbs_rated, explicit_tag_applied, ...")] = None
    user_id: Annotated[Any, Meta(description="The token's user (required).")] = None
    artifact_id: Any = None
    session_id: Any = None
    project_id: Any = None
    timestamp: Annotated[Any, Meta(description="ISO 8601.")] = None
    artifact_meta: Annotated[Any, Meta(description='{"signals": [{preference_type, pattern}]}')] = (
        None
    )
    trigger: Annotated[Any, Meta(description="Where the action came from.")] = None


EventsBody = Annotated[
    WireEvent | Annotated[list[Any], Meta(max_length=MAX_BATCH)],
    Meta(description=_EVENT_DOC),
]


# -- response bodies -------------------------------------------------------------------------
class DerivationHealth(msgspec.Struct, kw_only=True):
    """When derived state is brought up to date (docs/daemon.md, "Background derivation"):
    ``lazy`` (on the first read after new events) or ``background`` (a worker after each
    batch: its queue depth — users waiting —, counters and most recent derivation; and,
    when the request carries credentials, the caller's own record as ``user``)."""

    mode: Literal["lazy", "background"]
    running: bool = False
    queue_depth: int = 0
    derivations: int = 0
    failures: int = 0
    last_derived_at: str | None = None
    last_duration_ms: float | None = None
    user: UserDerivation | None = None


class Health(msgspec.Struct, kw_only=True):
    """GET /healthz."""

    status: Literal["ok"]
    version: str
    derivation: DerivationHealth


class MemoryView(msgspec.Struct, kw_only=True):
    """GET /api/v1/memory: MemoryService.inspect (docs/inspect.schema.json) with projects."""

    user_id: str
    derivation_version: str
    settings: SettingsView
    preferences: list[Preference]
    event_count: int
    project_id: str | None
    retrieval: RetrievalResult
    projects: list[str]
    as_of: Annotated[
        AsOf | None, Meta(description="The point shown, when at_seq or as_of was given.")
    ] = None
    derivation: Annotated[
        UserDerivation | None,
        Meta(
            description="How this user's state is kept derived (docs/daemon.md, "
            '"Background derivation"): lazy, or the worker\'s queue and last derivation; '
            "absent for a point in the past."
        ),
    ] = None


class Archive(msgspec.Struct, kw_only=True):
    """A creative-memory-archive document (docs/storage.md): raw events and settings."""

    format: Literal["creative-memory-archive"]
    archive_version: Literal[1]
    user_id: str
    settings: dict[str, Any]
    events: list[dict[str, Any]]
    checksum: Annotated[str, Meta(pattern="^sha256:[0-9a-f]{64}$")]


class SignedOut(msgspec.Struct, kw_only=True):
    """POST /logout."""

    signed_out: bool


class OpenApiDoc(msgspec.Struct, kw_only=True):
    """GET /openapi.json: this document."""

    openapi: str


#: Component schemas that admit keys beyond their listed properties
#: (``additionalProperties: true``): a wire event carries its kind's own keys.
OPEN_COMPONENTS: Final = (WireEvent,)

#: Every named type the OpenAPI document has a component schema for.
COMPONENTS: Final = (
    ProblemDoc,
    Health,
    DerivationHealth,
    UserDerivation,
    OpenApiDoc,
    MemoryView,
    WireEvent,
    IngestResult,
    ComposeRequest,
    PromptResult,
    ForgetResult,
    Explanation,
    Timeline,
    SettingsView,
    SettingsChange,
    ResetRequest,
    ResetResult,
    CheckResult,
    RepairRequest,
    RepairResult,
    Archive,
    ImportResult,
    SignedOut,
    AsOf,
    DerivationInfo,
    DerivationRequest,
    SettingsUpdate,
    PreviewResult,
)
