"""``python -m orchestrator.cli``: the deployctl command."""

from orchestrator.cli.app import main

main()
