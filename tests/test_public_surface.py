"""The deliberate public surface: what ``creative_memory`` exports and what a
``MemoryStore`` offers. A change here is a change of the public contract (README,
docs/architecture.md): make it on purpose, in this list too."""

from __future__ import annotations

import difflib
import inspect
import re
import sys
from pathlib import Path
from typing import Any

import creative_memory as cm
from creative_memory import MemoryStore, adapter

EXPORTS = {
    "ARCHIVE_DAYS", "CHARS_PER_TOKEN", "DECAY_DAYS", "DERIVATION_VERSION",
    "INJECTION_THRESHOLD", "MAX_INJECTION_COUNT", "MAX_PER_CATEGORY", "MIN_NEG_FLOOR",
    "NEGATIVE_BUDGET_RATIO", "NEGATIVE_PRIORITY_MULTIPLIER", "NORMALIZER", "SCHEMA_VERSION",
    "SIGNAL_WEIGHTS", "TAG_POLARITY", "TOKEN_BUDGET",
    "CaptureConfig", "CaptureLayer", "CaptureReport", "CreativeMemoryError", "DecayResult",
    "LogDamaged", "MemoryStore", "Preference", "RedactionPolicy", "Refinement", "RetrievalResult",
    "StorageError", "ValidationError", "__version__", "adapter",
    "build_critique_block", "build_generation_block", "build_prompt_block",
    "diagnostics_feed_line", "insert_memory_block", "insert_memory_block_into_prompt",
    "summarize_diagnostics",
}  # fmt: skip

STORE_METHODS = {
    "add_erasure_listener", "append_comparison", "close", "events", "explain",
    "export_memory", "flush", "forget", "get_settings", "import_memory", "import_prototype",
    "ingest_signal", "ingest_signals", "inspect", "is_paused", "list_preferences",
    "log_refinement", "now_ms", "pause", "refinement_log", "remove_erasure_listener",
    "reset_memory", "resume", "retrieve_for_injection", "root", "run_decay",
    "set_diagnostics_feed", "set_memory_enabled", "set_project_disabled",
}  # fmt: skip


def test_package_exports_exactly_the_public_names() -> None:
    assert set(cm.__all__) == EXPORTS
    assert len(cm.__all__) == len(EXPORTS)  # no duplicates
    for name in cm.__all__:
        assert hasattr(cm, name), name


def test_memory_store_offers_exactly_its_public_methods() -> None:
    public = {n for n in dir(MemoryStore) if not n.startswith("_")}
    assert public == STORE_METHODS


def test_hosts_can_append_without_records() -> None:
    """``records=False`` (append, derive nothing) on the store and every adapter handler."""
    assert inspect.signature(MemoryStore.ingest_signals).parameters["records"].default is True
    for name, handler in adapter.HANDLERS.items():
        param = inspect.signature(handler).parameters.get("records")
        assert param is not None and param.kind is inspect.Parameter.KEYWORD_ONLY, name
        assert param.default is True, name


# -- signatures, against the checked-in list -------------------------------------------------
SURFACE_FILE = Path(__file__).parent / "fixtures" / "public_api.txt"


def _describe(name: str, obj: Any) -> list[str]:
    if inspect.isclass(obj):
        try:
            sig = str(inspect.signature(obj))
        except ValueError:  # an exception type with the builtin constructor
            sig = f"({', '.join(b.__name__ for b in obj.__bases__)})"
        lines = [f"class {name}{sig}"]
        if obj is MemoryStore:
            for meth in sorted(STORE_METHODS):
                member = inspect.getattr_static(obj, meth)
                if isinstance(member, property):
                    lines.append(f"  property {meth}")
                else:
                    lines.append(f"  def {meth}{inspect.signature(getattr(obj, meth))}")
        return lines
    if inspect.ismodule(obj):
        lines = [f"module {name}"]
        for attr in sorted(getattr(obj, "__all__", None) or vars(obj)):
            value = getattr(obj, attr)
            if attr.startswith("_") or getattr(value, "__module__", None) != obj.__name__:
                continue
            if inspect.isfunction(value):
                lines.append(f"  def {attr}{inspect.signature(value)}")
        return lines
    if callable(obj):
        return [f"def {name}{inspect.signature(obj)}"]
    return [f"{name} = {obj!r}"]


def surface() -> str:
    """Every public name of ``creative_memory`` with its signature (constants with their
    value), and every ``MemoryStore`` method's signature: one line each."""
    lines: list[str] = []
    for name in sorted(cm.__all__):
        lines.extend(_describe(name, getattr(cm, name)))
    text = "\n".join(lines) + "\n"
    # set reprs follow hash randomisation: print their members sorted
    return re.sub(
        r"frozenset\(\{([^}]*)\}\)",
        lambda m: "frozenset({" + ", ".join(sorted(m.group(1).split(", "))) + "})",
        text,
    )


def test_the_signatures_are_the_checked_in_ones() -> None:
    """Changing the public API is a deliberate act: regenerate the list with
    ``python -m tests.test_public_surface --write`` and review the diff."""
    want = SURFACE_FILE.read_text(encoding="utf-8")
    got = surface()
    assert got == want, "\n".join(
        difflib.unified_diff(want.splitlines(), got.splitlines(), "checked in", "now", lineterm="")
    )


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        SURFACE_FILE.write_text(surface(), encoding="utf-8")
    else:
        sys.stdout.write(surface())
