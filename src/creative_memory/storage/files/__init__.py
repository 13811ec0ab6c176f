"""The embedded file store: one append-only log per user, with its derived-state cache."""
