"""Finding a pattern a person asked about: close names among their own records, the other
scopes that hold exactly that pattern, and the answer when there is nothing to show
(docs/cli.md, "Exit codes and errors" and "Conventions").

A pattern asked for in the wrong scope (global memory when it was learned in a project, or
the other way round) is pointed to where it is, rather than to another pattern with a
similar name: forgetting that one instead would erase the wrong thing.
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING

from creative_memory.app.store import MemoryStore
from creative_memory.engine.errors import NotFound
from creative_memory.engine.ids import bucket_of_scope, scope_of

if TYPE_CHECKING:
    from creative_memory.app.history import Point


def close_names(store: MemoryStore, user_id: str, preference_type: str, pattern: str) -> list[str]:
    """Up to three ``type/pattern`` names from the user's own records close to the one
    asked for (a typo, another spelling, a shortened pattern); never the name itself."""
    wanted = f"{preference_type}/{pattern}"
    known = sorted(
        {f"{p.preference_type}/{p.pattern}" for p in store.list_preferences(user_id)} - {wanted}
    )
    close = difflib.get_close_matches(wanted, known, n=3, cutoff=0.6)
    for name in known:  # the same pattern under another type, or a longer pattern
        ptype, _, pat = name.partition("/")
        if (pat == pattern or (ptype == preference_type and pattern in pat)) and (
            name not in close
        ):
            close.append(name)
    return close[:3]


def scopes_holding(
    store: MemoryStore, user_id: str, preference_type: str, pattern: str
) -> list[str]:
    """The scopes (``global``, ``project:P``) where the user has a record of exactly
    ``preference_type``/``pattern`` now, global first."""
    scopes = {
        p.scope
        for p in store.list_preferences(user_id)
        if p.preference_type == preference_type and p.pattern == pattern
    }
    return sorted(scopes, key=lambda s: (s != "global", s))


def hints(
    store: MemoryStore, user_id: str, preference_type: str, pattern: str, project_id: str | None
) -> tuple[list[str], list[str]]:
    """(close names, other scopes) for a pattern with nothing in ``project_id``'s scope:
    when the pattern itself is in another scope, that is the hint and no close name is."""
    here = scope_of(project_id)
    other = [s for s in scopes_holding(store, user_id, preference_type, pattern) if s != here]
    return ([] if other else close_names(store, user_id, preference_type, pattern)), other


def _where(project_id: str | None) -> str:
    """The bucket a pattern was looked for in, in words."""
    return f"project {project_id}" if project_id else "global memory"


def _scopes_words(scopes: list[str]) -> str:
    """``project landing`` / ``global memory and project landing``: scopes in words."""
    return " and ".join(_where(bucket_of_scope(s)) for s in scopes)


def nothing(
    store: MemoryStore,
    what: str,
    user_id: str,
    feature: tuple[str, str, str | None],
    point: Point | None = None,
) -> NotFound:
    """The :class:`NotFound` of a pattern (``feature``: type, pattern, project) with nothing
    ``what`` (e.g. "to explain"), at ``point`` in the past if given: it names the scopes
    that hold the pattern, else close names, when there are some."""
    preference_type, pattern, project_id = feature
    name = f"{preference_type}/{pattern} in {_where(project_id)}"
    if point is None:
        message = f"nothing {what}: {user_id} has no memory of {name}"
    else:
        then = f"right after event {point.at_seq}" if point.events else "before the first event"
        message = f"nothing {what}: {user_id} had no memory of {name} at that point ({then})"
    scopes = scopes_holding(store, user_id, preference_type, pattern)
    other = [s for s in scopes if s != scope_of(project_id)]
    if point is not None and len(other) < len(scopes):  # in that scope now
        message += "; it was learned later"
    elif other:
        message += f"; it is in {_scopes_words(other)}{' now' if point is not None else ''}"
    else:
        close = close_names(store, user_id, preference_type, pattern)
        message += f"; did you mean {' or '.join(close)}?" if close else ""
    return NotFound("pattern", message)
