"""``python -m orchestrator``: the deployctl command, as the console script runs it."""

from orchestrator.cli import main

main()
