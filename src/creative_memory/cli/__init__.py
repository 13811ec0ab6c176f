"""The command line (creative-memory, alias od-memory): parse, call the service, render.

The entry point is :func:`creative_memory.cli.main.main`; ``python -m creative_memory.cli``
runs it too.
"""
