"""`deployctl keygen`: a new key pair for signing release records (docs/security.md#signed-records).

Like ``orchestrator.cli.views``, it uses only the shared helpers of ``orchestrator.cli.options``;
``orchestrator.cli`` adds it to the ``deployctl`` group.
"""

from __future__ import annotations

import pathlib

import click

from orchestrator import output
from orchestrator.cli import options as cli_options


@click.command()
@click.argument("private_key_file", type=click.Path(dir_okay=False), default="deployctl-signing-key.pem")
@click.option(
    "--public-key-file",
    type=click.Path(dir_okay=False),
    help="Where the public key goes (default: PRIVATE_KEY_FILE with .pub instead of .pem).",
)
@click.option(
    "--algorithm",
    type=click.Choice(["ed25519", "ecdsa-p256"]),
    default="ed25519",
    show_default=True,
    help="The key type; ECDSA P-256 where policy asks for NIST curves.",
)
@cli_options.output_option()
@cli_options.handles_errors
def keygen(private_key_file: str, public_key_file: str | None, algorithm: str, output_format: str) -> None:
    """Write a new signing key (mode 0600, never over an existing file) and its public key."""
    from orchestrator.records import signing  # late: it pulls in cryptography

    private = pathlib.Path(private_key_file)
    public = pathlib.Path(public_key_file) if public_key_file else private.with_suffix(".pub")
    signer = signing.generate(private, public, algorithm)
    result = {"private_key_file": str(private), "public_key_file": str(public), "keyid": signer.keyid}
    if output_format != "text":
        click.echo(output.emit(result, output_format))
        return
    click.echo(f"wrote {private} (keep it secret: it signs release records) and {public} (keyid {signer.keyid})")
