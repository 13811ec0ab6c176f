"""Redaction before disk (docs/capture.md, "Redaction"): the host-side policy the capture
layer applies.

Raw events can carry user text: tag text and edit diffs. Before an event is handed to the
adapter (and so before anything is written) the capture layer passes it through a
:class:`RedactionPolicy`, which

* replaces e-mail addresses, phone numbers, URLs with embedded credentials and
  secret-looking tokens in free-text fields by typed placeholders (``[email]``, ``[phone]``,
  ``[url-with-credentials]``, ``[secret]``; configurable extra patterns get ``[<name>]``);
* keeps only the fields that derivation and the refinement log need (everything else a host
  sends along — prompts, HTML, chat transcripts, arbitrary metadata — is dropped).

Tag text is special: a tag must normalise to a key of ``TAG_POLARITY`` or the adapter rejects
it, and it is stored un-normalised (docs/engine.md, "Adapter"). A recognised tag is one of
nine fixed phrases, so it is kept verbatim (redacting it would break the tag lookup); any
other tag text is redacted like any free text (it is rejected by the adapter anyway, and
its error message must not echo personal data).

The store applies the same policy once more to every event it appends
(:meth:`RedactionPolicy.redact_stored`: adapter and direct library calls, archive import,
prototype migration): the one door into the log. Redaction is idempotent (a placeholder is
never matched again), so what the capture layer already redacted passes unchanged and is
counted once.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from creative_memory.capture.adapter import normalise_tag
from creative_memory.engine.constants import TAG_POLARITY
from creative_memory.engine.events import (
    ComparisonEvent,
    ComparisonSide,
    Event,
    Feature,
    LegacyRecordEvent,
    RefinementEvent,
    SignalEvent,
)

Replacement = str | Callable[[re.Match[str]], str]


@dataclass(frozen=True)
class RedactionRule:
    """One typed rule: every match of ``regex`` becomes ``[<kind>]`` (or ``replace(m)``)."""

    kind: str
    regex: re.Pattern[str]
    replace: Replacement | None = None
    accept: Callable[[re.Match[str]], bool] | None = None  # extra check on a candidate match

    @property
    def placeholder(self) -> str:
        """The text that replaces a match, e.g. ``[email]``."""
        return f"[{self.kind}]"


def _digits(text: str) -> int:
    return sum(c.isdigit() for c in text)


def _phone_ok(m: re.Match[str]) -> bool:
    text = m.group(0)
    n = _digits(text)
    if text.startswith("+"):
        return 8 <= n <= 15
    return 9 <= n <= 15


def _entropy(text: str) -> float:
    counts = Counter(text)
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def _secret_like(m: re.Match[str]) -> bool:
    """A long token mixing cases and digits with high character entropy (API keys, hashes
    in base64). Plain identifiers (``MyLongComponentName2``) and hex colours do not pass."""
    tok = m.group(0)
    if len(tok) >= 32 and re.fullmatch(r"[0-9a-fA-F]+", tok) and _digits(tok) >= 3:
        return True  # hex key / token (also catches digests: privacy first)
    has_lower = any(c.islower() for c in tok)
    has_upper = any(c.isupper() for c in tok)
    return _digits(tok) >= 3 and has_lower and has_upper and _entropy(tok) >= 3.8


def _keep_key(placeholder: str) -> Callable[[re.Match[str]], str]:
    def repl(m: re.Match[str]) -> str:
        return m.group("key") + placeholder

    return repl


#: Built-in rules, applied in this order (credentials-in-URLs before e-mail, because
#: ``user:pass@host`` also looks like an address).
DEFAULT_RULES: Final[tuple[RedactionRule, ...]] = (
    RedactionRule(
        "secret",
        re.compile(
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?-----END [A-Z0-9 ]*PRIVATE KEY-----",
            re.DOTALL,
        ),
    ),
    RedactionRule(
        "url-with-credentials",
        re.compile(r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s/@:]+:[^\s/@]*@[^\s\"'<>]+"),
    ),
    RedactionRule(
        "email",
        re.compile(
            r"(?<![\w.+-])[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,}\b"
        ),
    ),
    RedactionRule(
        "secret",  # well-known key formats
        re.compile(
            r"\b(?:"
            r"(?:sk|pk|rk)[-_](?:live|test|proj)?[-_]?[A-Za-z0-9]{16,}"
            r"|gh[pousr]_[A-Za-z0-9]{30,}"
            r"|github_pat_[A-Za-z0-9_]{30,}"
            r"|(?:AKIA|ASIA)[0-9A-Z]{16}"
            r"|xox[abposr]-[A-Za-z0-9\-]{10,}"
            r"|AIza[0-9A-Za-z_\-]{35}"
            r"|eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"
            r")"
        ),
    ),
    RedactionRule(
        "secret",  # Authorization: Bearer <token>
        re.compile(r"(?P<key>\b[Bb]earer\s+)[A-Za-z0-9\-._~+/]{8,}=*"),
        replace=_keep_key("[secret]"),
    ),
    RedactionRule(
        "secret",  # password=..., api_key: "...", token=...
        re.compile(
            r"(?P<key>(?i:\b(?:password|passwd|pwd|secret|client[_-]?secret|token|"
            r"access[_-]?token|auth[_-]?token|api[_-]?key|access[_-]?key|private[_-]?key)\b)"
            r"[\"']?\s*[:=]\s*[\"']?)(?!\[)[^\s\"',;&}]{4,}"
        ),
        replace=_keep_key("[secret]"),
    ),
    RedactionRule(
        "phone",
        re.compile(
            r"(?<![\w+])(?:"
            r"\+\d{1,3}(?:[ .\-]?\(?\d{1,4}\)?){2,5}"  # international
            r"|\(?\b\d{3}\)?[ .\-]\d{3}[ .\-]\d{4}"  # 555-123-4567, (555) 123 4567
            r"|\b0\d{2,4}[ /\-]\d{5,9}"  # 030 1234567, 0171-1234567
            r")(?![\w])"
        ),
        accept=_phone_ok,
    ),
    RedactionRule(
        "secret",  # generic high-entropy token
        re.compile(r"(?<![A-Za-z0-9_\-+/=])[A-Za-z0-9_\-+/=]{24,}(?![A-Za-z0-9_\-+/=])"),
        accept=_secret_like,
    ),
)

#: Fields of a wire-format event that derivation, the refinement log or the capture policy
#: need. Everything else is dropped before the event reaches the adapter.
EVENT_FIELDS: Final = frozenset(
    {
        "event",
        "user_id",
        "artifact_id",
        "session_id",
        "project_id",
        "timestamp",
        "artifact_meta",
        "diff",
        "tag_text",
        "rating",
        "chose",
        "over",
        "dimensions",
    }
)
_SIDE_FIELDS: Final = frozenset({"artifact_id", "artifact_meta"})
_FEATURE_FIELDS: Final = ("preference_type", "pattern")


@dataclass
class RedactionPolicy:
    """What is redacted and what is kept.

    ``extra_patterns``: name → regex (string or compiled); matches become ``[name]``. They run
    after the built-in rules. ``redact_patterns``: also redact the extractor's ``pattern`` /
    ``preference_type`` strings (off by default: they are identifiers from the host's
    classifier, not user text, and redacting them would merge unrelated features).
    ``store_diffs``: keep (redacted) diffs for the refinement log, or drop them entirely.
    """

    extra_patterns: Mapping[str, str | re.Pattern[str]] = field(default_factory=dict)
    redact_patterns: bool = False
    store_diffs: bool = True
    rules: tuple[RedactionRule, ...] = field(init=False)

    def __post_init__(self) -> None:
        extra: list[RedactionRule] = []
        for name, rx in self.extra_patterns.items():
            if not isinstance(name, str) or not re.fullmatch(r"[a-z0-9][a-z0-9_\-]*", name):
                raise ValueError(f"extra_patterns: bad placeholder name {name!r}")
            extra.append(RedactionRule(name, re.compile(rx) if isinstance(rx, str) else rx))
        self.rules = DEFAULT_RULES + tuple(extra)

    # -- text ----------------------------------------------------------------------------
    def redact_text(self, text: str, counts: Counter[str] | None = None) -> str:
        """``text`` with every sensitive match replaced by its typed placeholder."""
        for rule in self.rules:
            text = _apply_rule(rule, text, counts)
        return text

    def redact_value(self, value: Any, counts: Counter[str] | None = None) -> Any:
        """Redact every string (including mapping keys) inside a JSON-like value."""
        if isinstance(value, str):
            return self.redact_text(value, counts)
        if isinstance(value, Mapping):
            return {
                (self.redact_text(k, counts) if isinstance(k, str) else k): self.redact_value(
                    v, counts
                )
                for k, v in value.items()
            }
        if isinstance(value, (list, tuple)):
            return [self.redact_value(v, counts) for v in value]
        return value

    def redact_tag(self, tag_text: Any, counts: Counter[str] | None = None) -> Any:
        """A recognised tag verbatim (it is one of nine fixed phrases); other text redacted."""
        if not isinstance(tag_text, str):
            return tag_text
        if normalise_tag(tag_text) in TAG_POLARITY:
            return tag_text
        return self.redact_text(tag_text, counts)

    # -- events --------------------------------------------------------------------------
    def redact_event(
        self, event: Mapping[str, Any], counts: Counter[str] | None = None
    ) -> dict[str, Any]:
        """A copy of a wire-format/handler event keeping only the needed fields, with free
        text redacted. Shapes that are malformed are passed through (minus unknown keys) so
        the adapter can reject them with its usual message."""
        out: dict[str, Any] = {}
        for key, value in event.items():
            if key not in EVENT_FIELDS:
                continue
            if key == "diff":
                if not self.store_diffs:
                    # keep the fact that an edit was saved (the refinement log entry), not
                    # its content
                    out[key] = {} if value is not None and value is not False else value
                    continue
                out[key] = self.redact_value(value, counts)
            elif key == "tag_text":
                out[key] = self.redact_tag(value, counts)
            elif key == "artifact_meta":
                out[key] = self._meta(value, counts)
            elif key in ("chose", "over"):
                out[key] = self._side(value, counts)
            else:
                out[key] = value
        return out

    # -- stored events -------------------------------------------------------------------
    def redact_stored(self, ev: Event, counts: Counter[str] | None = None) -> Event:
        """``ev`` with its free text redacted (``ev`` itself when nothing changes): a
        signal's tag text, a refinement's diff (``{}`` when diffs are not stored), a legacy
        record's tags, a comparison's dimensions; patterns and types too with
        ``redact_patterns``."""
        if isinstance(ev, SignalEvent):
            changes: dict[str, Any] = {"tag_text": self.redact_tag(ev.tag_text, counts)}
            if self.redact_patterns:
                changes["pattern"] = self.redact_text(ev.pattern, counts)
                changes["preference_type"] = self.redact_text(ev.preference_type, counts)
        elif isinstance(ev, RefinementEvent):
            diff = self.redact_value(ev.diff, counts) if self.store_diffs else {}
            changes = {"diff": diff}
        elif isinstance(ev, LegacyRecordEvent):
            record = dict(ev.record)
            tags = record.get("explicit_tags")
            if isinstance(tags, list):
                record["explicit_tags"] = [self.redact_tag(t, counts) for t in tags]
            if self.redact_patterns:
                for name in _FEATURE_FIELDS:
                    if isinstance(record.get(name), str):
                        record[name] = self.redact_text(record[name], counts)
            changes = {"record": record}
        elif isinstance(ev, ComparisonEvent):
            dims = ev.dimensions
            changes = {
                "dimensions": None if dims is None else [self.redact_text(d, counts) for d in dims],
                "chose": self._stored_side(ev.chose, counts),
                "over": self._stored_side(ev.over, counts),
            }
        else:
            return ev
        if all(getattr(ev, k) == v for k, v in changes.items()):
            return ev
        return msgspec.structs.replace(ev, **changes)

    def _stored_side(self, side: ComparisonSide, counts: Counter[str] | None) -> ComparisonSide:
        if not self.redact_patterns:
            return side
        feats = [
            Feature(
                self.redact_text(f.preference_type, counts), self.redact_text(f.pattern, counts)
            )
            for f in side.features
        ]
        return side if feats == side.features else msgspec.structs.replace(side, features=feats)

    def _meta(self, meta: Any, counts: Counter[str] | None) -> Any:
        if not isinstance(meta, Mapping):
            return meta
        signals = meta.get("signals")
        if not isinstance(signals, list):
            return {"signals": signals} if "signals" in meta else {}
        kept: list[Any] = []
        for entry in signals:
            if not isinstance(entry, Mapping):
                kept.append(entry)
                continue
            e = {k: entry[k] for k in _FEATURE_FIELDS if k in entry}
            if self.redact_patterns:
                e = {
                    k: self.redact_text(v, counts) if isinstance(v, str) else v
                    for k, v in e.items()
                }
            kept.append(e)
        return {"signals": kept}

    def _side(self, side: Any, counts: Counter[str] | None) -> Any:
        if not isinstance(side, Mapping):
            return side
        out = {k: v for k, v in side.items() if k in _SIDE_FIELDS}
        if "artifact_meta" in out:
            out["artifact_meta"] = self._meta(out["artifact_meta"], counts)
        return out


def _apply_rule(rule: RedactionRule, text: str, counts: Counter[str] | None) -> str:
    def repl(m: re.Match[str]) -> str:
        if rule.accept is not None and not rule.accept(m):
            return m.group(0)
        if counts is not None:
            counts[rule.kind] += 1
        if rule.replace is None:
            return rule.placeholder
        if isinstance(rule.replace, str):
            return rule.replace
        return rule.replace(m)

    return rule.regex.sub(repl, text)


def redact_text(text: str, extra_patterns: Iterable[tuple[str, str]] = ()) -> str:
    """Convenience: redact ``text`` with the default rules plus ``extra_patterns``."""
    return RedactionPolicy(extra_patterns=dict(extra_patterns)).redact_text(text)
