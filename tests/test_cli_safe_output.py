"""No stored string can break out of its line in what the CLI prints (docs/cli.md,
"Conventions"; docs/engine.md, "Stored strings").

Validation keeps unsafe strings out of new events, so this test plants them the way old
data would arrive: events appended straight to the backend, past the store's door. Then
every command that prints stored strings — ``inspect``, ``explain``, ``prompt``,
``forget`` — must print each one escaped, inside its own line, with no control character,
line separator or bidi control anywhere in the output.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import msgspec
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from creative_memory import MemoryStore
from creative_memory.cli.main import main
from creative_memory.engine.events import SignalEvent
from creative_memory.engine.text import UNSAFE_CHARS

USER = "alice"
#: What may never appear in what the CLI prints, apart from the newlines that end its lines.
FORBIDDEN = re.compile(f"[{UNSAFE_CHARS}]")
COUNTER = itertools.count()

UNSAFE_TEXT = (
    st.lists(
        st.sampled_from(
            ["a", "b", " ", "#", "\n", "\r", "\x1b", "\x00", "\u202e", "\u2028", "[red]", "é", "\t"]
        ),
        min_size=1,
        max_size=12,
    )
    .map("".join)
    .filter(lambda s: s.strip() != "")
)


def plant(root: Path, pattern: str, ptype: str) -> None:
    """Three negative tags about (``ptype``, ``pattern``), appended past the door."""
    store = MemoryStore(root, derivation_version="1")
    store.ingest_signal(
        USER,
        {
            "signal_type": "explicit_tag",
            "pattern": "plain",
            "preference_type": "color",
            "polarity": "negative",
            "tag_text": None,
            "scope": "global",
            "project_id": None,
            "artifact_id": "a",
            "session_id": "s",
            "timestamp": "2026-01-01T00:00:00Z",
        },
    )
    template = next(e for e in store.events(USER) if isinstance(e, SignalEvent))
    raw = [
        msgspec.structs.replace(template, pattern=pattern, preference_type=ptype, seq=0, h="")
        for _ in range(3)
    ]
    store._storage.append(USER, raw)
    store.close()


def run(root: Path, *args: str) -> str:
    result = CliRunner().invoke(main, ["--data-dir", str(root), "--user", USER, *args])
    assert result.exit_code in (0, 1, 2), result.output
    return result.stdout + result.stderr


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pattern=UNSAFE_TEXT, ptype=st.sampled_from(["color", "lay\nout", "ty\x1bpe"]))
def test_printed_stored_strings_stay_inside_their_line(
    tmp_path_factory: object, pattern: str, ptype: str
) -> None:
    root = Path(str(tmp_path_factory.mktemp(f"safe{next(COUNTER)}")))  # type: ignore[attr-defined]
    plant(root, pattern, ptype)
    # the JSON form carries the exact string (it is data, not a rendering)
    doc = json.loads(run(root, "--json", "inspect"))
    assert pattern in {p["pattern"] for p in doc["preferences"]}
    outputs = {
        "inspect": run(root, "inspect"),
        "explain": run(root, "explain", ptype, pattern),
        "prompt": run(root, "prompt"),
        "prompt --legacy": run(root, "prompt", "--legacy"),
        "forget": run(root, "forget", ptype, pattern),
    }
    for name, out in outputs.items():
        bad = FORBIDDEN.search(out.replace("\n", ""))
        assert bad is None, (name, repr(bad.group(0)) if bad else "", out)
