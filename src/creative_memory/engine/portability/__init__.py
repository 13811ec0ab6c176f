"""Export/import archive and prototype-migration formats: bytes in, events out."""
