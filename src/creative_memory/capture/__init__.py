"""The host side: the wire format, the adapter (events to signals), policy, redaction."""
