"""User-supplied JSON text as Python values: the one decoding rule every surface applies
(docs/capture.md, "One JSON rule") — the HTTP API's request bodies and the CLI's
``ingest`` input (each document, or each line of JSON lines) call :func:`decode_json`.

The rule, for a text of bytes:

* an optional UTF-8 byte order mark before the text is ignored (RFC 8259 §8.1 allows it);
* it is nested at most ``max_depth`` levels (:data:`MAX_JSON_DEPTH` unless told),
  measured on the text before decoding (:mod:`creative_memory.engine.jsondepth`), so the
  decoder never recurses past the limit, however deep the text;
* it is JSON as RFC 8259 defines it, in UTF-8: ``NaN``, ``Infinity`` and ``-Infinity``
  are not JSON, nor are comments, trailing commas or a lone surrogate escape;
* a number too large to hold is read as ±infinity — a float beyond the double range
  (``1e400``) and an integer too long for the decoder to convert alike (more digits than
  ``sys.get_int_max_str_digits``, 4,300 by default; msgspec counts a minus sign in that
  4,300, so ``-`` and exactly 4,300 digits is one) — and judged where it is used, like any other
  value: the one event holding it in a field it reads is rejected on its own, a settings
  key holding it is refused by name. The text is not refused whole for a number.

Anything else raises :class:`JsonTextError`, whose ``reason`` each surface places (a CLI
line, the HTTP ``body``). Archives and prototype files are not read by this rule: they are
formats this program writes, read strictly (``engine/portability``).
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

import msgspec

from creative_memory.engine.jsondepth import deeper_than

#: How deeply a JSON document from outside may nest (request bodies, ingested events).
MAX_JSON_DEPTH: Final = 64

_BOM: Final = b"\xef\xbb\xbf"
#: Numbers too large for a float (``1e400``) are infinity, not a refusal of the text.
_DECODER: Final = msgspec.json.Decoder(float_hook=float)
#: A JSON string (skipped as it is; an unterminated one runs to the end of the text, so
#: each byte is scanned once) or an integer token of more than 640 digits — the fewest
#: ``sys.set_int_max_str_digits`` allows, so no shorter integer is ever out of range. An
#: integer token: not inside a number (after a digit, ``.``, ``e``, a sign), not the
#: integer part of a fraction or exponent (before ``.``, ``e``, ``E``).
_STRING_OR_LONG_INT: Final = re.compile(
    rb'"[^"\\]*+(?:\\.?[^"\\]*+)*+"?|(?<![\w.+-])(?P<int>-?[0-9]{641,}+)(?![.eE])',
    re.DOTALL,
)


class JsonTextError(ValueError):
    """A text that is not JSON by the rule above. ``reason`` says why, to follow a location
    ("not valid JSON (...)", "not valid UTF-8", "nested deeper than 64 levels");
    ``too_deep`` tells the depth limit from the rest (HTTP answers it 422, not 400)."""

    def __init__(self, reason: str, *, too_deep: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.too_deep = too_deep


def decode_json(data: bytes, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``data`` (one JSON text) as Python values by the rule in this module's docstring;
    raises :class:`JsonTextError` for a text the rule refuses."""
    if data.startswith(_BOM):  # as whitespace: the byte offsets of errors stay right
        data = b"   " + data[len(_BOM) :]
    if deeper_than(data, max_depth):
        raise JsonTextError(f"nested deeper than {max_depth} levels", too_deep=True)
    try:
        return _DECODER.decode(data)
    except msgspec.ValidationError:  # untyped, this is only an integer out of range
        pass
    except msgspec.DecodeError as exc:
        raise _not_json(data, exc) from None
    try:
        return _DECODER.decode(_STRING_OR_LONG_INT.sub(_as_infinity, data))
    except msgspec.DecodeError as exc:
        raise _not_json(data, exc) from None


def _as_infinity(match: re.Match[bytes]) -> bytes:
    """An integer token the decoder cannot read as ``±1e400`` padded to its length (the
    byte offsets of any later error stay right); a string or a readable integer as it is."""
    token = match["int"]
    if token is None:
        return match[0]
    try:
        _DECODER.decode(token)
    except msgspec.ValidationError:
        return (b"-1e400" if token.startswith(b"-") else b"1e400").ljust(len(token))
    return token


def _not_json(data: bytes, exc: msgspec.DecodeError) -> JsonTextError:
    """Why ``data`` is not JSON: not UTF-8 (checked only now that it failed), or the
    decoder's own message, which names the byte where it stopped (0 is the first) — a
    text that ends too early, at its end."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return JsonTextError("not valid UTF-8")
    message = str(exc)
    if message == "Input data was truncated":
        # msgspec says so of a lone surrogate escape too (``"\ud800"``): a text Python's
        # own reader takes whole did not end early
        try:
            json.loads(data)
        except ValueError:
            message = f"JSON ends early at byte {len(data.rstrip())}"
        else:
            message = "a \\u escape names half of a surrogate pair, which is no character"
    return JsonTextError(f"not valid JSON ({message})")
