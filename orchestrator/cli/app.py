"""The deployctl command line: parse options, make one library call, print, exit with its code.

Modules that talk to a cluster (and the ``kubernetes`` client they import) are imported inside
the commands that need them, so ``validate`` and ``plan`` start fast on a laptop or CI runner.
"""

from __future__ import annotations

import datetime
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

import orchestrator
from orchestrator import errors, output
from orchestrator.cli import bench as bench_cli
from orchestrator.cli import flags as cli_flags
from orchestrator.cli import keys as cli_keys
from orchestrator.cli import options as cli_options
from orchestrator.cli import params as cli_params
from orchestrator.cli import render as cli_render
from orchestrator.cli import rollout as cli_rollout
from orchestrator.cli import schema as cli_schema
from orchestrator.cli import uninstall as cli_uninstall
from orchestrator.cli import views as cli_views
from orchestrator.errors import ExitCode

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from orchestrator.apply import outcome as outcome_mod

VERSION = orchestrator.__version__
SUPPORTED_KUBERNETES = "1.30 – 1.37"


@click.group(
    cls=cli_options.Group, context_settings={"auto_envvar_prefix": "DEPLOYCTL", "help_option_names": ["-h", "--help"]}
)
@click.version_option(VERSION, prog_name="deployctl")
@click.pass_context
def main(ctx: click.Context) -> None:
    """deployctl: plan, render, apply, gate and roll back vLLM inference on Kubernetes."""
    ctx.color = output.color_setting()  # subcommands inherit it; click.echo keeps or strips colour by it


# --- profile commands (no cluster) ----------------------------------------------------------------


@main.command()
@cli_options.profile_argument()
@cli_params.set_option
@cli_options.output_option()
@cli_options.handles_errors
def validate(profile_path: str, sets: tuple[str, ...], output_format: str) -> None:
    """Check a profile's schema and VRAM math; no cluster needed."""
    from orchestrator.plan import planner

    prof = cli_options.load_profile(profile_path, sets).profile
    plan = planner.check(prof, allow_unfit=True)
    data = {
        "profile": prof.source,
        "valid": True,
        "fits": plan.fits,
        "verdict": plan.verdict,
        "findings": [f.to_json() for f in plan.findings],
    }
    if output_format != "text":
        click.echo(output.emit(data, output_format))
    else:
        status = output.paint("fits", "green") if plan.fits else output.paint("does NOT fit", "red")
        click.echo(
            f"{prof.source}: valid; {status} ({prof.metadata.name}, TP={prof.engine.tensorParallelSize}, "
            f"{prof.hardware.gpu or str(prof.hardware.memoryGiB) + ' GiB'})"
        )
        for f in plan.findings:
            if f.severity != "info":
                click.echo(f"  {f.severity}: {f.message}")
    sys.exit(int(ExitCode.OK if plan.fits else ExitCode.DOES_NOT_FIT))


@main.command()
@cli_options.profile_argument()
@cli_params.set_option
@click.option(
    "--calibrate-from",
    "release",
    metavar="RELEASE",
    help="Correct the memory the model does not explain by what this release's vLLM logged at start-up "
    "(same model, GPU, vLLM version, TP and PP; needs the cluster).",
)
@cli_params.namespace_option("The --calibrate-from release's (default: the profile's namespace, see docs/cli.md).")
@cli_params.cluster_options
@cli_options.output_option(aliases={"table": "text"})
@cli_options.handles_errors
def plan(
    profile_path: str,
    sets: tuple[str, ...],
    release: str | None,
    namespace: str | None,
    kubeconfig: str | None,
    context: str | None,
    output_format: str,
) -> None:
    """The capacity table: does it fit, how many full-context sequences, and why."""
    from orchestrator.plan import planner, planview

    calibration = None
    if release:
        from orchestrator.apply import views

        # The release is looked for where -n says, else where the profile lives (its own namespace,
        # else DEPLOYCTL_NAMESPACE, the context's, default): a release may be calibrated from another namespace.
        where = None if namespace else cli_options.resolve_namespace(None, kubeconfig, context)
        prof = cli_options.load_profile(profile_path, sets, where).profile
        release_ns = namespace or prof.metadata.namespace
        opts = cli_options.options(kubeconfig=kubeconfig, context=context)
        calibration = views.calibration(opts, release, release_ns, prof)
    else:
        prof = cli_options.load_profile(profile_path, sets).profile
    p = planner.check(prof, allow_unfit=True, calibration=calibration)
    if output_format == "text":
        click.echo(planview.render_table(prof, p, color=output.color_enabled(sys.stdout)))
    else:
        click.echo(output.emit(p.to_json(), output_format))
    sys.exit(int(ExitCode.OK if p.fits else ExitCode.DOES_NOT_FIT))


# --- cluster commands -------------------------------------------------------------------------------


def _follow(run: Callable[[output.Progress], outcome_mod.Outcome], output_format: str) -> None:
    """Run an apply, gate or rollback sequence with its progress shown, print how it ended and exit."""
    progress = output.Progress()
    outcome = run(progress)
    progress.finish_line()
    cli_options.finish(outcome, output_format)


@main.command()
@cli_params.command_over(cli_params.Apply, cli_options.profile_argument())
def apply(profile_path: str, output_format: str, opts: cli_params.Apply) -> None:
    """Plan, preflight, lock, apply, watch, gate and record — or roll back."""
    from orchestrator.apply import pipeline

    loaded, options = cli_params.load(opts, profile_path), opts.pipeline_options()
    _follow(lambda progress: pipeline.apply(loaded.profile, loaded.text, options, progress), output_format)


@main.command("gate")
@cli_params.command_over(cli_params.Gate, cli_options.profile_argument())
def gate_cmd(profile_path: str, output_format: str, opts: cli_params.Gate) -> None:
    """GitOps: wait for the synced Deployment to carry this profile, then health + smoke gate and record."""
    from orchestrator.apply import gitops

    loaded, options = cli_params.load(opts, profile_path), opts.pipeline_options()
    _follow(lambda progress: gitops.gate(loaded.profile, loaded.text, options, progress), output_format)


@main.command()
@cli_params.namespace_option(
    "Watch InferenceProfile objects in this namespace only (default: $DEPLOYCTL_NAMESPACE, else the context's, "
    "else default)."
)
@click.option("-A", "--all-namespaces", is_flag=True, help="Watch InferenceProfile objects in every namespace.")
@click.option(
    "--lease-namespace",
    envvar="POD_NAMESPACE",
    help="Namespace of the leader-election Lease (deployctl-controller). Default: the pod's namespace "
    "in the cluster (POD_NAMESPACE), else --namespace.",
)
@cli_params.cluster_options
@click.option("--lease-seconds", type=cli_options.Duration(5, 600, integer=True), default=15, show_default=True)
@click.option("--resync", type=cli_options.Duration(1), default=30, show_default=True, help="Time between resyncs.")
@click.option("--lock-ttl", type=cli_options.Duration(5, 3600, integer=True), default=60, show_default=True)
@click.option(
    "--signing-secret",
    default="deployctl-signing-key",
    show_default=True,
    help="Secret in the --lease-namespace whose signing-key.pem signs the release records (docs/security.md).",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 64),
    default=4,
    show_default=True,
    help="Objects reconciled at once (each object by one worker at a time): one slow rollout never stalls the rest.",
)
@cli_options.handles_errors
def controller(
    namespace: str | None,
    all_namespaces: bool,
    lease_namespace: str | None,
    kubeconfig: str | None,
    context: str | None,
    lease_seconds: int,
    resync: float,
    lock_ttl: int,
    signing_secret: str,
    workers: int,
) -> None:
    """Deploy InferenceProfile objects: each new generation by the apply sequence, status in kstatus terms."""
    from orchestrator.controller import reconciler as controller_mod

    if namespace and all_namespaces:
        raise errors.UsageError("give --namespace NS or --all-namespaces (-A), not both")
    if not all_namespaces:
        namespace = cli_options.resolve_namespace(namespace, kubeconfig, context).name
    lease_ns = lease_namespace or namespace
    if lease_ns is None:
        raise errors.UsageError("with --all-namespaces, give --lease-namespace (or run in a pod with POD_NAMESPACE)")
    settings = controller_mod.Settings(
        namespace=namespace,
        lease_namespace=lease_ns,
        kubeconfig=kubeconfig,
        context=context,
        lease_seconds=lease_seconds,
        resync_seconds=resync,
        lock_ttl=lock_ttl,
        signing_secret=signing_secret,
        workers=workers,
    )

    def report(where: str, message: str) -> None:
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%H:%M:%SZ")
        click.echo(f"{stamp} {where} {message}")

    try:
        controller_mod.run(settings, report)
    except KeyboardInterrupt:
        report("controller", "stopped")


@main.command()
@cli_params.command_over(cli_params.Rollback, cli_params.RELEASE_NAME)
def rollback(name: str, output_format: str, opts: cli_params.Rollback) -> None:
    """Re-apply an earlier revision's stored manifests (needs only a kubeconfig and, for signed records, a key)."""
    from orchestrator.apply import pipeline

    namespace = cli_options.resolve_namespace(opts.namespace, opts.kubeconfig, opts.context).name
    options = opts.pipeline_options()
    _follow(lambda progress: pipeline.rollback(name, namespace, opts.to, options, progress), output_format)


@main.command("bench")
@bench_cli.options
@cli_options.output_option(("text", "json"), "text", aliases={"table": "text"})
@cli_options.handles_errors
def bench_cmd(output_format: str, **options: Unpack[bench_cli.BenchOptions]) -> None:
    """The smoke benchmark alone (vLLM `bench serve` metric names, and its flag names too).

    Exits 5 when nothing could be measured, no request completed, or the error rate is above
    --max-error-rate; the report is printed (and saved) first.
    """
    problem = bench_cli.run(output_format, options)
    if problem:
        # Not raised: handles_errors would add an error object to stdout, which holds the report.
        cli_options.fail(errors.EndpointError(problem))


@main.command()
@cli_options.output_option()
def version(output_format: str) -> None:
    """deployctl's version, the record format it writes and reads, its CRD and chart versions, the engine
    versions it has flag tables for, and the Kubernetes versions it supports (docs/upgrading.md)."""
    from orchestrator import engines
    from orchestrator.controller import crd
    from orchestrator.engines import vllm_flags
    from orchestrator.profile import model as profile_mod
    from orchestrator.records import releases
    from orchestrator.render import manifests as render

    data = {
        "deployctl": VERSION,
        "record_format": {"writes": releases.RECORD_FORMAT, "reads": list(releases.RECORD_FORMATS_READ)},
        "crd": {"name": crd.NAME, "group": crd.GROUP, "version": crd.VERSION},
        # The chart ships with deployctl and carries its version (tests/test_chart.py holds them equal).
        "chart": {"name": render.CHART_NAME, "version": VERSION},
        "default_vllm": profile_mod.DEFAULT_VLLM_VERSION,
        "vllm_flag_sets": vllm_flags.known_versions(),
        "engines": {
            kind: {"default": engine.default_version, "flag_sets": engine.versions()}
            for kind, engine in engines.ENGINES.items()
        },
        "kubernetes": SUPPORTED_KUBERNETES,
    }
    if output_format != "text":
        click.echo(output.emit(data, output_format))
    else:
        lines = [f"deployctl {VERSION}"]
        for engine in engines.ENGINES.values():
            sets = ", ".join(engine.versions())
            lines.append(f"{engine.title}: {engine.default_version} (flag sets: {sets})")
        lines.append(f"Kubernetes: {SUPPORTED_KUBERNETES}")
        reads = ", ".join(str(f) for f in releases.RECORD_FORMATS_READ)
        lines.append(f"Release records: writes format {releases.RECORD_FORMAT}, reads {reads}")
        lines.append(f"CRD: {crd.NAME} {crd.VERSION}; chart: {render.CHART_NAME} {VERSION}")
        click.echo("\n".join(lines))


@main.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell completion script: eval "$(deployctl completion bash)"; also zsh, fish."""
    from click.shell_completion import get_completion_class

    cls = get_completion_class(shell)
    assert cls is not None
    click.echo(cls(main, {}, "deployctl", "_DEPLOYCTL_COMPLETE").source())


for _command in (
    cli_views.history,
    cli_views.status,
    cli_views.diff,
    cli_views.inventory,
    cli_views.audit,
    cli_render.render,
    cli_schema.schema,
    cli_uninstall.uninstall,
    cli_rollout.rollout,
    cli_flags.engine_flags,
    cli_keys.keygen,
):
    main.add_command(_command)
# Last: every option of every command, including those added above, reads DEPLOYCTL_<COMMAND>_<OPTION>.
cli_options.install_envvars(main)


if __name__ == "__main__":
    main()
