"""The package version, in one place (the CLI, the daemon and the facade read it)."""

__version__ = "0.1.0"
