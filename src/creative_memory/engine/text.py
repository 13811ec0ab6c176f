"""Stored strings are safe by construction (docs/engine.md, "Stored strings").

One rule for every string the memory keeps and later prints — patterns, preference types,
tags, artifact, session, user and project ids: no control character (C0 and C1, so no NUL,
newline, tab or ESC), no line or paragraph separator, no bidirectional-text control and no
lone surrogate. A string that breaks it raises a :class:`ValidationError` naming the field;
its message quotes at most a short, escaped prefix of the value (:func:`preview`).

Independently of validation, :func:`escape_line` is what a renderer applies to a stored
string (one that arrived before these rules, through an old archive or a prototype file):
every character the rule rejects is shown as a visible escape, so the string stays inside
its own line. For a string that passes the rule it is the identity, so the blocks of
strings that pass validation are byte-exact.
"""

from __future__ import annotations

import re
from typing import Final

from creative_memory.engine.errors import ValidationError

#: Characters no stored string may hold: C0/C1 controls and DEL, line/paragraph separators,
#: the bidi marks, embeddings, overrides and isolates, and surrogates.
UNSAFE_CHARS: Final = (
    "\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff"
)
_UNSAFE: Final = re.compile(f"[{UNSAFE_CHARS}]")
#: The longest pattern, preference type, tag or artifact/session id the engine stores (the
#: capture boundary is stricter: docs/capture.md, "Limits").
MAX_TEXT_LENGTH: Final = 1000
#: How many characters of an offending value an error message quotes.
PREVIEW_CHARS: Final = 40

# JavaScript String.prototype.trim's whitespace (a tag may carry it at its ends: the
# adapter trims it before the lookup, docs/engine.md, "Adapter").
_JS_WS: Final = (
    "\t\n\x0b\x0c\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)


#: What shows nothing on its own: JavaScript's whitespace and the zero-width format
#: characters (Mongolian vowel separator, zero-width space, non-joiner and joiner, word joiner).
_INVISIBLE: Final = _JS_WS + "\u180e\u200b\u200c\u200d\u2060"


def is_blank(value: str) -> bool:
    """Whether ``value`` shows nothing: empty, or only whitespace and invisible characters."""
    return not value.strip(_INVISIBLE)


def first_unsafe(value: str) -> int | None:
    """The index of the first character of ``value`` the rule rejects, else ``None``."""
    m = _UNSAFE.search(value)
    return None if m is None else m.start()


def _escape_char(ch: str) -> str:
    code = ord(ch)
    named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
    if ch in named:
        return named[ch]
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_line(value: str) -> str:
    """``value`` with every unsafe character shown as an escape (``\\n``, ``\\x1b``,
    ``\\u202e``): it can no longer end a line, start a terminal escape or reorder text.
    The identity for a string that passes :func:`check_text`."""
    if _UNSAFE.search(value) is None:
        return value
    return _UNSAFE.sub(lambda m: _escape_char(m.group(0)), value)


def preview(value: object, limit: int = PREVIEW_CHARS) -> str:
    """``value`` as an error message quotes it: a string in double quotes, escaped, at most
    ``limit`` characters of it (then ``…`` and the full length); anything else its repr,
    shortened the same way."""
    if isinstance(value, str):
        shown = escape_line(value[:limit].replace("\\", "\\\\").replace('"', '\\"'))
        tail = f"… ({len(value)} characters)" if len(value) > limit else ""
        return f'"{shown}"{tail}'
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def check_text(field: str, value: object, *, max_length: int | None = None) -> str:
    """``value`` if it is a non-empty string that passes the rule (and is at most
    ``max_length`` characters), else a :class:`ValidationError` naming ``field``."""
    if not isinstance(value, str) or not value:
        raise ValidationError(field, f"{field} must be a non-empty string")
    at = first_unsafe(value)
    if at is not None:
        raise ValidationError(
            field,
            f"{field} {preview(value)} holds a control, line-break or bidi character "
            f"({_escape_char(value[at])} at {at}); stored strings must be one plain line",
        )
    if max_length is not None and len(value) > max_length:
        raise ValidationError(
            field,
            f"{field} {preview(value)} is too long: at most {max_length} characters",
        )
    return value


def check_name(field: str, value: object, *, max_length: int | None = None) -> str:
    """A pattern or preference type: :func:`check_text`, and not blank (a name of only
    spaces or invisible characters would print as an empty item of the prompt block)."""
    text = check_text(field, value, max_length=max_length)
    if is_blank(text):
        raise ValidationError(
            field,
            f"{field} {preview(text)} is blank: only whitespace or invisible characters",
        )
    return text


def check_optional_text(field: str, value: object, *, max_length: int | None = None) -> str | None:
    """:func:`check_text` for a value that may be ``None`` (or empty)."""
    if value is None or value == "":
        return None if value is None else ""
    return check_text(field, value, max_length=max_length)


def check_tag(field: str, value: object, *, max_length: int | None = None) -> str:
    """A tag text: :func:`check_text` of the tag without the JavaScript whitespace at its
    ends (the adapter trims it before the lookup; the engine keeps it verbatim)."""
    if not isinstance(value, str):
        raise ValidationError(field, f"{field} must be a string")
    core = value.strip(_JS_WS)
    if core:
        check_text(field, core)
    if max_length is not None and len(value) > max_length:
        raise ValidationError(
            field, f"{field} {preview(value)} is too long: at most {max_length} characters"
        )
    return value
