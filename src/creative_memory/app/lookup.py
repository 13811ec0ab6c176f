"""Finding a pattern a person asked about: close names among their own records, and the
answer when there is nothing to show (docs/cli.md, "Exit codes and errors")."""

from __future__ import annotations

import difflib

from creative_memory.app.store import MemoryStore
from creative_memory.engine.errors import NotFound


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


def _where(project_id: str | None) -> str:
    """The bucket a pattern was looked for in, in words."""
    return f"project {project_id}" if project_id else "global memory"


def nothing(
    store: MemoryStore,
    what: str,
    user_id: str,
    preference_type: str,
    pattern: str,
    project_id: str | None,
) -> NotFound:
    """The :class:`NotFound` of a pattern with nothing ``what`` (e.g. "to explain"), naming
    close names when there are some."""
    close = close_names(store, user_id, preference_type, pattern)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    return NotFound(
        "pattern",
        f"nothing {what}: {user_id} has no memory of "
        f"{preference_type}/{pattern} in {_where(project_id)}{hint}",
    )
