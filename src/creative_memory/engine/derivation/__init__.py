"""Derivation versions: pure folds from raw events to preference records (docs/engine.md)."""
