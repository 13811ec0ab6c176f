"""JSON nested too deep is bad input, never a ``RecursionError`` (engine/jsondepth.py;
docs/http.md, "Request bodies"): the depth is measured on the text before decoding, and
whatever decodes JSON from outside — request bodies, archives, prototype files — refuses
a document deeper than its limit with a ``ValidationError`` naming what was sent. What the
store keeps (a refinement's ``diff``) has a limit that keeps every archive importable."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from creative_memory import MemoryStore, ValidationError
from creative_memory.app.service import MemoryService
from creative_memory.engine.events import MAX_DIFF_DEPTH, RefinementEvent, rechain
from creative_memory.engine.jsondepth import deeper_than, json_depth
from creative_memory.engine.portability.archive import (
    MAX_ARCHIVE_DEPTH,
    decode_archive,
    encode_archive,
)
from creative_memory.engine.settings import UserSettings

U = "alice"
AT = "2026-01-01T00:00:00.000Z"


def nesting(value: Any) -> int:
    """How many arrays and objects ``value`` holds open at its deepest point."""
    if isinstance(value, list):
        return 1 + max(map(nesting, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(nesting, value.values()), default=0)
    return 0


def nested(depth: int) -> Any:
    """``depth`` arrays, one inside the other (``[[...]]``); ``{}`` for depth 1 is fine too."""
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


TRICKY = st.text(alphabet='[]{}"\\ ,:ab\u00e9\n', max_size=12)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TRICKY,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TRICKY, inner, max_size=4),
    max_leaves=40,
)


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES, st.booleans())
def test_the_depth_of_valid_json_is_its_nesting(value: Any, compact: bool) -> None:
    """Brackets, quotes and backslashes inside strings never count, however escaped."""
    text = json.dumps(value, separators=(",", ":") if compact else None, ensure_ascii=compact)
    data = text.encode()
    assert json_depth(data) == nesting(value)
    for limit in (0, 1, 3):
        assert deeper_than(data, limit) == (nesting(value) > limit)


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        (b"", 0),
        (b"1", 0),
        (b'"[{"', 0),
        (b"[[[", 3),  # not JSON: at least as deep as a decoder would get
        (b"]][", 0),
        (b'["abc[[[[', 1),  # an unterminated string ends the text
        (b'["\\\\", [[]]]', 3),  # an escaped backslash ends no string
        (b'["\\"[[", []]', 2),  # an escaped quote ends no string
    ],
)
def test_the_depth_of_any_text(text: bytes, depth: int) -> None:
    assert json_depth(text) == depth


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40) | TRICKY.map(str.encode), st.integers(1, 7))
def test_a_text_read_in_chunks_has_its_depth(text: bytes, chunk: int) -> None:
    """A large text is split at its quotes a chunk at a time (a file of events split at
    once took some 15 times its size): any cut — inside a string, between a quote and what
    it closes — gives the depth of the text read whole."""
    import creative_memory.engine.jsondepth as jsondepth

    whole = json_depth(text)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(jsondepth, "_CHUNK", chunk)
        assert json_depth(text) == whole


@pytest.mark.parametrize("depth", [1000, 100_000])
def test_an_archive_nested_too_deep_is_an_invalid_archive(tmp_path: Path, depth: int) -> None:
    data = b"[" * depth + b"]" * depth
    with pytest.raises(ValidationError) as ei:
        decode_archive(data)
    assert ei.value.field == "archive" and "nested deeper" in str(ei.value)
    store = MemoryStore(tmp_path / "mem")
    with pytest.raises(ValidationError) as ei:
        MemoryService(store).import_archive(U, data)
    assert ei.value.field == "archive"
    assert store.events(U) == []


def archive_with_diff(diff: Any) -> bytes:
    """A well-formed, checksummed archive of one refinement carrying ``diff``."""
    ev = RefinementEvent(seq=1, at=AT, recorded_at=AT, diff=diff)
    return encode_archive("bob", UserSettings(), rechain([ev]))


def test_a_deep_archive_is_refused_before_anything_recurses(tmp_path: Path) -> None:
    """A checksummed archive whose event nests 500 levels used to pass decoding and fail
    deep in the import (the redaction walk: a ``RecursionError``, a 500 over HTTP)."""
    data = archive_with_diff({"x": nested(500)})
    store = MemoryStore(tmp_path / "mem")
    with pytest.raises(ValidationError) as ei:
        MemoryService(store).import_archive(U, data)
    assert ei.value.field == "archive"
    assert f"nested deeper than {MAX_ARCHIVE_DEPTH} levels" in str(ei.value)
    assert store.events(U) == []


def test_every_diff_the_store_keeps_fits_in_an_archive(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "a")
    store.log_refinement(U, diff=nested(MAX_DIFF_DEPTH))
    data, _ = MemoryService(store).export_archive(U)
    assert json_depth(data) <= MAX_ARCHIVE_DEPTH
    other = MemoryStore(tmp_path / "b")
    assert MemoryService(other).import_archive(U, data).events_added == 1


@pytest.mark.parametrize("depth", [MAX_DIFF_DEPTH + 1, 5000])
def test_a_diff_nested_too_deep_is_refused(tmp_path: Path, depth: int) -> None:
    store = MemoryStore(tmp_path / "mem")
    with pytest.raises(ValidationError) as ei:
        store.log_refinement(U, diff=nested(depth))
    assert ei.value.field == "diff" and "nested deeper" in str(ei.value)
    assert store.events(U) == []


def test_a_prototype_file_nested_too_deep_is_refused(tmp_path: Path) -> None:
    path = Path(tempfile.mkdtemp(dir=tmp_path)) / "preferences.json"
    path.write_bytes(b"[" * 1000 + b"]" * 1000)
    store = MemoryStore(tmp_path / "mem")
    with pytest.raises(ValidationError) as ei:
        MemoryService(store).migrate(U, path)
    assert ei.value.field == "file" and "nested deeper" in str(ei.value)
    assert store.events(U) == []
