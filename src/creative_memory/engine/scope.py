"""Scopes and option values of the listing and erasure calls (docs/architecture.md,
"Option values"): a value that is not understood is an error, never a silent default."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from creative_memory.engine.errors import ValidationError
from creative_memory.engine.events import validate_project_id, validate_user_id
from creative_memory.engine.models import Preference

if TYPE_CHECKING:
    from creative_memory.engine.derivation.base import DerivedState
from creative_memory.engine.text import MAX_TEXT_LENGTH, preview


def validate_feature(
    user_id: str, preference_type: object, pattern: object, project_id: object
) -> None:
    """Checks shared by the calls that name one pattern (forget, explain): non-empty
    strings of at most ``MAX_TEXT_LENGTH`` characters. They write nothing, so they accept
    a pattern that breaks the stored-string rule: one stored before the rule existed can
    still be explained and erased (docs/engine.md, "Stored strings")."""
    validate_user_id(user_id)
    for name, value in (("preference_type", preference_type), ("pattern", pattern)):
        if not isinstance(value, str) or not value:
            raise ValidationError(name, f"{name} must be a non-empty string")
        if len(value) > MAX_TEXT_LENGTH:
            raise ValidationError(
                name, f"{name} {preview(value)} is too long: at most {MAX_TEXT_LENGTH} characters"
            )
    if project_id is not None:
        validate_project_id(project_id)


POLARITY_OPTIONS: Final = ("all", "positive", "negative")
STATUS_OPTIONS: Final = ("all", "stable", "under_review", "archived")


def parse_scope(scope: object) -> str | None:
    """``"project:<x>"`` → validated ``x``; ``"all"`` / ``"global"`` → ``None``.

    Anything else is an error (docs/architecture.md, "Option values"): a scope that is
    not understood must never list everything or erase nothing silently. Every error
    names ``scope`` — an unsafe project id too: it is the key the caller sent.
    """
    if not isinstance(scope, str):
        raise ValidationError("scope", "scope must be a string")
    if scope in ("all", "global"):
        return None
    if scope.startswith("project:") and scope.count(":") == 1:
        try:
            return validate_project_id(scope.removeprefix("project:"))
        except ValidationError as exc:  # the caller sent a scope, not a project_id
            raise ValidationError("scope", f"scope {preview(scope)}: {exc}") from None
    raise ValidationError(
        "scope", f"unknown scope {preview(scope)}: expected 'all', 'global' or 'project:<id>'"
    )


def check_option(field: str, value: object, allowed: tuple[str, ...]) -> None:
    """A ``ValidationError`` naming ``field`` unless ``value`` is one of ``allowed``."""
    if not isinstance(value, str) or value not in allowed:
        raise ValidationError(
            field, f"unknown {field} {preview(value)}: expected one of {', '.join(allowed)}"
        )


def check_list_options(
    scope: object, polarity: object, min_strength: object, status: object
) -> None:
    """The options of ``list_preferences``, each a :class:`ValidationError` naming it:
    the scope (:func:`parse_scope`), polarity and status (one of their options) and
    ``min_strength`` — a number (not a bool); NaN and the infinities are numbers, compared
    as the reference does (``>= NaN`` keeps nothing)."""
    parse_scope(scope)
    check_option("polarity", polarity, POLARITY_OPTIONS)
    if isinstance(min_strength, bool) or not isinstance(min_strength, int | float):
        raise ValidationError(
            "min_strength", f"min_strength must be a number, got {preview(min_strength)}"
        )
    check_option("status", status, STATUS_OPTIONS)


def select_records(
    state: DerivedState, scope: str, polarity: str, min_strength: float, status: str
) -> list[Preference]:
    """The exported records of ``state`` in ``scope`` that pass the filters, strongest first
    (the options already checked)."""
    project = parse_scope(scope)
    if project is not None:
        source = state.project_records(project) or []
    elif scope == "global":
        source = state.global_records
    else:
        source = state.all_records()
    out = [
        r
        for r in source
        if (polarity == "all" or r.polarity == polarity)
        and r.signal_strength >= min_strength
        and (status == "all" or r.polarity_status == status)
    ]
    out.sort(key=lambda r: r.signal_strength, reverse=True)
    return [state.export_record(r) for r in out]
