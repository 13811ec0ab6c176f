"""A database URL's password, kept out of everything shown (docs/deploy.md): one rule for
``whoami``, the CLI's advice and every error a PostgreSQL store raises.

The password is what lies between the first ``:`` of the user info and the *last* ``@``
before the host part — wider than libpq's own reading, which stops the user info at the
first ``@`` and never looks past a ``/``: a password holding a raw ``@``, ``/``, ``?`` or
``#`` (not percent-encoded, as it should be) is still hidden whole, and so is every piece
of it a libpq message may quote (``failed to resolve host 'cd@127.0.0.1'``). A ``password=``
query parameter is hidden too. Hiding a little more than the password is harmless;
showing any of it is not.
"""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import unquote

_QUERY_PASSWORD: Final = re.compile(r"(?i)([?&]password=)([^&#]*)")
#: The shortest piece of a password a message is searched for (shorter ones are too common).
_MIN_PIECE: Final = 3


def _userinfo(url: str) -> tuple[str, str, str] | None:
    """``(scheme + "://" + user + ":", password, "@" + the rest)``, or ``None`` without a
    password in the user info."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, hostpart = rest.rpartition("@")
    if not sep or not at or ":" not in userinfo:
        return None
    user, _, password = userinfo.partition(":")
    return f"{scheme}{sep}{user}:", password, f"@{hostpart}"


def redact_url(url: str) -> str:
    """``url`` with its password replaced by ``***`` (the user info's and the query's)."""
    parts = _userinfo(url)
    if parts is not None:
        url = f"{parts[0]}***{parts[2]}"
    return _QUERY_PASSWORD.sub(r"\1***", url)


def secrets_of(url: str) -> list[str]:
    """Every string a message about ``url`` must not show: the passwords (user info and
    query), raw and percent-decoded, and the pieces between the ``@``, ``/``, ``?`` and
    ``#`` they hold — longest first."""
    found = [m[2] for m in _QUERY_PASSWORD.finditer(url)]
    parts = _userinfo(url)
    if parts is not None:
        found.append(parts[1])
    for value in re.findall(r"\bpassword\s*=\s*('(?:[^'\\]|\\.)*'|[^\s&#]*)", url):
        found.append(value[1:-1] if value.startswith("'") else value)
    out: set[str] = set()
    for raw in found:
        for value in (raw, unquote(raw)):
            out.add(value)
            out.update(p for p in re.split(r"[@/?#]", value) if len(p) >= _MIN_PIECE)
    return sorted((s for s in out if s), key=len, reverse=True)


def scrub(text: str, url: str) -> str:
    """``text`` (a message about ``url``, e.g. libpq's, which may quote the URL or a piece
    of it) with the URL redacted and no password, or piece of one, left in it."""
    out = text.replace(url, redact_url(url))
    for secret in secrets_of(url):
        out = out.replace(secret, "***")
    return out
