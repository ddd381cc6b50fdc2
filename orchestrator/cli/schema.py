"""`deployctl schema`: print the profile's JSON Schema for editors and CI validators.

One call into ``orchestrator.profile.json_schema``; ``orchestrator.cli`` adds the command to the group.
"""

from __future__ import annotations

import click

from orchestrator import output
from orchestrator.cli import options as cli_options


@click.command()
@cli_options.output_option(("json", "yaml"), "json", help="json (the file editors read) or yaml.")
@cli_options.handles_errors
def schema(output_format: str) -> None:
    """Print the profile's JSON Schema: deployctl schema > profile.schema.json, then name it in a
    `# yaml-language-server: $schema=profile.schema.json` first line of a profile."""
    from orchestrator.profile import json_schema  # late: it builds the profile models

    if output_format == "json":
        # The very bytes of orchestrator/data/profile.schema.json, so the two never differ.
        click.echo(json_schema.text(), nl=False)
    else:
        click.echo(output.emit(json_schema.generate(), output_format))
