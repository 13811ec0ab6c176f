"""``python -m creative_memory.cli``: the same entry point as the installed script."""

from creative_memory.cli.main import main

main()
