"""The read-only cluster commands of deployctl: history, status, diff, inventory and audit.

Each parses its options, makes one call into ``orchestrator.apply.views`` and prints the result as text,
JSON or YAML; ``orchestrator.cli`` adds them to the ``deployctl`` group.
"""

from __future__ import annotations

import pathlib
import sys
from collections.abc import Callable, Mapping

import click

from orchestrator import errors, output
from orchestrator.cli import options as cli_options
from orchestrator.cli import params as cli_params
from orchestrator.errors import ExitCode


@click.command()
@cli_params.command_over(cli_params.Release, cli_params.RELEASE_NAME)
def history(name: str, output_format: str, opts: cli_params.Release) -> None:
    """The release's revisions: status, description, when, who."""
    from orchestrator.apply import views

    rows = views.history(cli_params.connection(opts), name, opts.resolved_namespace())
    _show(
        rows,
        output_format,
        lambda: output.table(
            ["REVISION", "STATUS", "GATE", "KV PLAN/SEEN", "SERVING", "UPDATED", "ACTOR", "IMAGE", "DESCRIPTION"],
            [
                [
                    r["revision"],
                    r["status"],
                    r.get("gate") or "-",
                    _kv(r.get("planner") or {}),
                    _seconds(r.get("time_to_serving")),
                    r["timestamp"],
                    _actor(r["actor"]),
                    _short_image(r["image"]),
                    r["description"],
                ]
                for r in rows
            ],
        ),
    )


def _kv(check: Mapping[str, object]) -> str:
    """KV tokens planned/observed, in thousands: `1007k/1012k`; `-` for what is unknown."""

    def k(value: object) -> str:
        return f"{value / 1000:.0f}k" if isinstance(value, int) else "-"

    return f"{k(check.get('kv_tokens_planned'))}/{k(check.get('kv_tokens_observed'))}"


def _seconds(value: object) -> str:
    """A time to serving in whole seconds (`412s`); `-` when the revision has none (or a record says nonsense)."""
    from orchestrator.apply import time_to_serving

    seconds = time_to_serving.seconds_of(value)
    return "-" if seconds is None else f"{seconds:.0f}s"


def _actor(actor: Mapping[str, object]) -> str:
    """The user, and the CI job when there was one (e.g. `ci-bot (github run 42)`)."""
    ci = actor.get("ci")
    jobs = ci.items() if isinstance(ci, Mapping) else ()
    job = next((f"{k.lower()}={v}" for k, v in jobs if k.endswith(("RUN_ID", "JOB_ID", "BUILD_ID"))), "")
    return f"{actor.get('user', '?')}" + (f" ({job})" if job else "")


def _short_image(image: str) -> str:
    return (
        image if "@sha256:" not in image else image.split("@sha256:")[0] + "@sha256:" + image.split("@sha256:")[1][:12]
    )


@click.command()
@cli_params.command_over(cli_params.Release, cli_params.RELEASE_NAME)
def status(name: str, output_format: str, opts: cli_params.Release) -> None:
    """Live revision, pods (ready, node, GPUs), last failure and gate result."""
    from orchestrator.apply import views

    data = views.status(cli_params.connection(opts), name, opts.resolved_namespace())
    _show(data, output_format, lambda: views.format_status(data))


def _show(data: object, output_format: str, as_text: Callable[[], str]) -> None:
    """``data`` as JSON or YAML, else the text view ``as_text`` makes of it."""
    click.echo(output.emit(data, output_format) if output_format != "text" else as_text())


@click.command()
@cli_params.command_over(
    cli_params.Diff,
    cli_options.profile_argument(),
    cli_options.output_option(help="text: a unified diff; json/yaml: each object's change and diff."),
)
def diff(profile_path: str, output_format: str, opts: cli_params.Diff) -> None:
    """Server-side dry-run against the live objects, as a unified diff.

    Exit 0: no changes; 11: changes (kubectl diff's 1, moved: 1 is a usage error here); others: errors.
    """
    from orchestrator.apply import views
    from orchestrator.plan import planner

    prof = cli_params.load(opts, profile_path).profile
    plan = planner.check(prof)
    objects = views.diff_objects(cli_params.connection(opts), prof, plan)
    changed = any(o["change"] != "unchanged" for o in objects)
    if output_format != "text":
        click.echo(output.emit({"changed": changed, "objects": objects}, output_format))
    else:
        text = "".join(o["diff"] for o in objects)
        click.echo(text or "no changes", nl=bool(not text) or not text.endswith("\n"))
    sys.exit(int(ExitCode.DIFF_CHANGES if changed else ExitCode.OK))


@click.command()
@cli_params.cluster_options
@cli_options.output_option()
@cli_options.handles_errors
def inventory(kubeconfig: str | None, context: str | None, output_format: str) -> None:
    """The cluster's GPU pools: product, nodes, GPUs total and free, NVLink."""
    from orchestrator.apply import views

    pools = views.inventory(cli_options.options(kubeconfig=kubeconfig, context=context))
    if output_format != "text":
        click.echo(output.emit(pools, output_format))
        return
    click.echo(
        output.table(
            ["PRODUCT", "GPU", "NVLINK", "NODES", "GPUS", "FREE"],
            [
                [
                    p["product"],
                    p.get("gpu") or "-",
                    "yes" if p["nvlink"] else "no",
                    p["nodes"],
                    p["gpus_total"],
                    p["gpus_free"],
                ]
                for p in pools
            ],
        )
    )
    outside = sorted({p["product"] for p in pools if not p.get("gpu") and p["product"] != "unknown"})
    if outside:
        # The value to copy: a profile for these GPUs names them by product label, not catalog key.
        click.echo(
            f"GPU -: not in the catalog; profile them with hardware.memoryGiB and hardware.productLabels: "
            f"[{', '.join(outside)}]"
        )


@click.group(cls=cli_options.Group)
def audit() -> None:
    """Verify or export the tamper-evident release chain."""


@audit.command("verify")
@click.argument("name", required=False)
@cli_params.namespace_option()
@click.option(
    "--file",
    "export_file",
    type=click.Path(dir_okay=False, exists=True),
    help="Verify an exported chain offline instead of the live records.",
)
@click.option(
    "--against",
    type=click.Path(dir_okay=False, exists=True),
    help="Also compare the live chain with an earlier export (catches a deleted newest record).",
)
@click.option(
    "--key",
    "keys",
    multiple=True,
    type=click.Path(dir_okay=False),
    envvar="DEPLOYCTL_VERIFY_KEY",
    help="A trusted public key (PEM): also check every record's signature; repeatable.",
)
@cli_params.cluster_options
@cli_options.output_option()
@cli_options.handles_errors
def audit_verify(
    name: str | None,
    namespace: str | None,
    export_file: str | None,
    against: str | None,
    keys: tuple[str, ...],
    kubeconfig: str | None,
    context: str | None,
    output_format: str,
) -> None:
    """Walk the hash chain, and with --key the signatures; an edited, deleted or unsigned record is
    reported with its revision (exit 9)."""
    from orchestrator.apply import views

    if not export_file and not name:
        raise errors.UsageError("give a release NAME, or --file EXPORT.json to verify an export offline")
    ns = cli_options.resolve_namespace(namespace, kubeconfig, context).name if name else "default"
    opts = cli_options.options(kubeconfig=kubeconfig, context=context, verify_keys=keys)
    result = views.audit_verify(opts, name, ns, export_file, against)
    if output_format != "text":
        click.echo(output.emit(result, output_format))
    elif result["ok"]:
        signed = ", every record signed by a trusted key" if keys else " (signatures not checked: no --key)"
        click.echo(
            output.paint("OK", "green")
            + f": {result['records']} records, chain intact (head {result['head'][:16]}){signed}"
        )
    else:
        click.echo(output.paint("TAMPERED", "red") + f": {len(result['problems'])} problem(s)")
        for p in result["problems"]:
            click.echo(
                f"  revision {p['revision']}: {p['message']}" if p["revision"] is not None else f"  {p['message']}"
            )
    sys.exit(0 if result["ok"] else int(ExitCode.AUDIT_FAILED))


@audit.command("export")
@click.argument("name")
@cli_params.namespace_option()
@click.option("--output-file", "out_file", type=click.Path(dir_okay=False), help="File to write (default: stdout).")
@cli_options.renamed_option("--out", "--output-file")
@cli_options.output_option(
    ("json", "yaml"), "json", old_meaning="write the file with --output-file {value}", help="The document's format."
)
@cli_params.cluster_options
@cli_options.handles_errors
def audit_export(
    name: str,
    namespace: str | None,
    out_file: str | None,
    output_format: str,
    kubeconfig: str | None,
    context: str | None,
) -> None:
    """Write the release chain as a JSON (or YAML) document an auditor can keep."""
    from orchestrator.apply import views

    ns = cli_options.resolve_namespace(namespace, kubeconfig, context).name
    doc = views.audit_export(cli_options.options(kubeconfig=kubeconfig, context=context), name, ns)
    text = output.emit(doc, output_format) + "\n"
    if out_file:
        pathlib.Path(out_file).write_text(text)
        click.echo(f"wrote {out_file} ({len(doc['records'])} records)", err=True)
    else:
        click.echo(text, nl=False)


@audit.command("trust")
@click.argument("name")
@cli_params.namespace_option()
@click.option("--up-to", type=click.IntRange(1), help="The newest revision to vouch for (default: the newest).")
@cli_params.signing_options
@cli_params.cluster_options
@cli_options.output_option()
@cli_options.handles_errors
def audit_trust(
    name: str,
    namespace: str | None,
    up_to: int | None,
    signing_key: str | None,
    verify_keys: tuple[str, ...],
    kubeconfig: str | None,
    context: str | None,
    output_format: str,
) -> None:
    """Vouch, with your signing key, for the unsigned records from before signing: appends a signed
    record naming the hash they chain to (docs/security.md#signed-records)."""
    from orchestrator.apply import views

    ns = cli_options.resolve_namespace(namespace, kubeconfig, context).name
    opts = cli_options.options(kubeconfig=kubeconfig, context=context, signing_key=signing_key, verify_keys=verify_keys)
    result = views.audit_trust(opts, name, ns, up_to, lambda where, message: click.echo(message, err=True))
    if output_format != "text":
        click.echo(output.emit(result, output_format))
    else:
        click.echo(
            output.paint("TRUSTED", "green") + f": revision {result['revision']} of {name} vouches for revisions "
            f"1-{result['up_to']} (head {result['head'][:16]}), signed by key {result['keyid'][:16]}"
        )
