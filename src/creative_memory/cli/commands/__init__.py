"""The CLI's commands, one module per area; each parses, calls the service and renders
(docs/cli.md)."""
