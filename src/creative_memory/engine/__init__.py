"""The pure engine: events, derivation versions, retrieval, prompt blocks, explain (docs/engine.md).

No I/O, no clock, no environment: time enters as arguments."""
