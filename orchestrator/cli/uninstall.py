"""`deployctl uninstall`: its options, one call into ``orchestrator.apply.uninstall``, the printed ending.

Like ``orchestrator.cli.views``, it uses only the shared helpers of ``orchestrator.cli.options``;
``orchestrator.cli`` adds the command to the ``deployctl`` group.
"""

from __future__ import annotations

import os

import click

from orchestrator import output
from orchestrator.cli import options as cli_options
from orchestrator.cli import params as cli_params


@click.command()
@click.argument("name")
@cli_params.namespace_option()
@click.option(
    "--purge",
    is_flag=True,
    help="Also delete the release records (the audit trail), after writing them to --audit-export; "
    "a tombstone ConfigMap stays. Needs a Role that may delete ConfigMaps (docs/runbook.md).",
)
@click.option(
    "--audit-export",
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="With --purge: a new file for the verified export of every record, written before any is deleted.",
)
@click.option("--dry-run", is_flag=True, help="Say what would be deleted and what would be refused; write nothing.")
@click.option(
    "--wait/--no-wait",
    default=True,
    show_default=True,
    help="Wait until the release's pods are gone (their GPUs free again).",
)
@click.option(
    "--timeout",
    type=cli_options.Duration(1),
    default="10m",
    show_default=True,
    help="One deadline for the deletes and the wait for the pods: 90s, 10m, 1h30m or seconds.",
)
@click.option("--lock-ttl", type=cli_options.Duration(5, 3600, integer=True), default=60, show_default=True)
@cli_params.cluster_options
@cli_params.signing_options
@cli_options.output_option()
@cli_options.handles_errors
def uninstall(
    name: str,
    namespace: str | None,
    purge: bool,
    audit_export: str | None,
    dry_run: bool,
    wait: bool,
    timeout: float,
    lock_ttl: int,
    kubeconfig: str | None,
    context: str | None,
    output_format: str,
    signing_key: str | None,
    verify_keys: tuple[str, ...],
) -> None:
    """Delete a release's objects and record the uninstall; its history stays unless --purge.

    Only objects deployctl applied for NAME are deleted (never PVCs, Secrets or the namespace).
    An already uninstalled release exits 0 and changes nothing; `deployctl rollback NAME`
    re-deploys the revision that was live.
    """
    from orchestrator.apply import uninstall as uninstall_mod  # late: it pulls in the kubernetes client
    from orchestrator.records import trust as record_trust

    request = uninstall_mod.Request(
        name=name,
        namespace=cli_options.resolve_namespace(namespace, kubeconfig, context).name,
        purge=purge,
        audit_export=audit_export,
        dry_run=dry_run,
        wait=wait,
        timeout=timeout,
        lock_ttl=lock_ttl,
        kubeconfig=kubeconfig,
        context=context,
        environ=dict(os.environ),
        keys=record_trust.load(signing_key, verify_keys),
    )
    progress = output.Progress()
    try:
        outcome = uninstall_mod.uninstall(request, progress)
    finally:
        progress.finish_line()
    cli_options.finish(outcome, output_format)
