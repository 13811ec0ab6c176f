"""Safe identifiers: the one rule for user ids and project ids (docs/engine.md, "Identifiers").

A user id names a directory and a project id names a bucket of records, so both are
restricted to ``[A-Za-z0-9_-]+`` and to :data:`MAX_ID_LENGTH` characters (a file name must
fit the file system); a project id may also not be one of the names that would corrupt a
JavaScript object used as a map (``__proto__``, ``constructor``, ``prototype``).
Every surface checks ids through this module (the JSON schemas use :data:`SAFE_ID_PATTERN`
and :data:`RESERVED_IDS`).
"""

from __future__ import annotations

import re
from typing import Any, Final, TypeGuard

from creative_memory.engine.errors import ValidationError
from creative_memory.engine.text import preview

#: The characters a safe id may hold, as a regular-expression character class body.
SAFE_ID_CHARS: Final = "A-Za-z0-9_-"
#: A safe id as an anchored pattern (for JSON schemas).
SAFE_ID_PATTERN: Final = f"^[{SAFE_ID_CHARS}]+$"
#: Project ids that are refused even though their characters are safe.
RESERVED_IDS: Final = ("__proto__", "constructor", "prototype")
#: The longest user or project id (a user id names a directory and files in it).
MAX_ID_LENGTH: Final = 128


def project_id_schema(*, empty: bool = False) -> dict[str, Any]:
    """What :func:`validate_project_id` accepts, as JSON Schema keywords (a fresh dict, for
    ``msgspec.Meta(extra_json_schema=...)``): safe characters, at most
    :data:`MAX_ID_LENGTH`, not reserved. ``empty``: the empty string too (no project)."""
    return {
        "pattern": f"^[{SAFE_ID_CHARS}]{'*' if empty else '+'}$",
        "maxLength": MAX_ID_LENGTH,
        "not": {"enum": list(RESERVED_IDS)},
    }


_SAFE_ID: Final = re.compile(f"[{SAFE_ID_CHARS}]+")
_UNSAFE_CHAR: Final = re.compile(f"[^{SAFE_ID_CHARS}]")


def show(value: object) -> str:
    """``value`` as error messages quote it: a string in double quotes (a short, escaped
    prefix of a long one), else its repr (:func:`~creative_memory.engine.text.preview`)."""
    return preview(value)


def _check_length(field: str, value: str) -> None:
    if len(value) > MAX_ID_LENGTH:
        raise ValidationError(
            field, f"{field} {show(value)} is too long: at most {MAX_ID_LENGTH} characters"
        )


def is_safe_id(value: object) -> TypeGuard[str]:
    """Whether ``value`` is a non-empty string of ``[A-Za-z0-9_-]`` only."""
    return isinstance(value, str) and _SAFE_ID.fullmatch(value) is not None


def safe_name(name: str) -> str:
    """``name`` with every character outside ``[A-Za-z0-9_-]`` replaced by ``_``."""
    return _UNSAFE_CHAR.sub("_", name)


def validate_user_id(user_id: object) -> str:
    """``user_id`` if it is a safe basename, else a :class:`ValidationError` (``user_id``)."""
    if not is_safe_id(user_id):
        raise ValidationError(
            "user_id",
            f"user_id {show(user_id)} is not a safe basename. "
            "Only alphanumeric characters, hyphens, and underscores are allowed.",
        )
    _check_length("user_id", user_id)
    return user_id


def validate_project_id(project_id: object) -> str:
    """``project_id`` if it is a safe, unreserved key, else a :class:`ValidationError`."""
    if isinstance(project_id, str) and project_id in RESERVED_IDS:
        raise ValidationError(
            "project_id",
            f"project_id {show(project_id)} is not a safe key — it would corrupt object "
            "semantics. Use a normal identifier.",
        )
    if not is_safe_id(project_id):
        raise ValidationError(
            "project_id",
            f"project_id {show(project_id)} is not a safe key. "
            "Only alphanumeric characters, hyphens, and underscores are allowed.",
        )
    _check_length("project_id", project_id)
    return project_id


def scope_of(bucket: str | None) -> str:
    """The record ``scope`` of a bucket: ``"global"`` for ``None``, else ``"project:<id>"``."""
    return "global" if bucket is None else "project:" + bucket


def bucket_of_scope(scope: str) -> str | None:
    """Inverse of :func:`scope_of`: ``None`` for ``"global"``, else the project id."""
    return None if scope == "global" else scope[len("project:") :]
