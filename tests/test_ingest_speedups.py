"""The ingest path's shortcuts give what the long way gives (docs/performance.md, "Daemon
CPU per ingest request")."""

from __future__ import annotations

import random

from creative_memory.engine.timeutil import _parse_grammar, try_parse_ts


def _common_shapes(rng: random.Random, n: int) -> list[str]:
    """Timestamps of the two common shapes with every field drawn around its limits."""
    out = []
    for _ in range(n):
        y = rng.choice([0, 1, 1600, 1900, 1970, 2000, 2024, 2100, 9999])
        mo, d = rng.randrange(0, 14), rng.randrange(0, 33)
        h, mi, s = rng.randrange(0, 26), rng.randrange(0, 61), rng.randrange(0, 61)
        text = f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}"
        if rng.random() < 0.5:
            text += f".{rng.choice([0, 0, 1, 500, 999]):03d}"
        out.append(text + "Z")
    return out


def test_the_common_shapes_parse_as_the_grammar_parses_them() -> None:
    rng = random.Random(11)
    texts = _common_shapes(rng, 30_000)
    # any Unicode decimal digit is a digit to both (\d and int())
    wide = str.maketrans("0123456789", "０１２３４５６７８９")
    texts += [t.translate(wide) for t in texts[:200]]
    texts += [
        "2024-02-29T24:00:00Z", "2023-02-29T10:00:00Z", "2024-12-31T24:00:00.000Z",
        "2024-12-31T24:00:00.001Z", "2024-12-31T24:01:00Z", "2024-12-31T25:00:00Z",
        "2024-01-01T00:00:00.12Z", "2024-01-01T00:00:00.1234Z", "2024-01-01T00:00:00+01:00",
        "2024-01-01T00:00:00", "2024-01-01T00:00Z", "2024-01-01", "x024-01-01T00:00:00Z",
    ]  # fmt: skip
    valid = 0
    for text in texts:
        expected = _parse_grammar(text)
        assert try_parse_ts(text) == expected, text
        valid += expected is not None
    assert 0 < valid < len(texts)  # both outcomes were exercised
