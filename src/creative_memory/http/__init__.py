"""The local daemon: HTTP JSON API and the Settings → Memory page over the MemoryService."""
