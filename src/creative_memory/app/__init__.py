"""The application layer: the MemoryStore facade and the MemoryService behind every surface."""
