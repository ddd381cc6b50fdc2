"""The deployctl command line: parse options, make one library call, print, exit with its code.

Modules that talk to a cluster (and the ``kubernetes`` client they import) are imported inside
the commands that need them, so ``validate`` and ``plan`` start fast on a laptop or CI runner.
"""

from __future__ import annotations

import datetime
import difflib
import functools
import gc
import os
import pathlib
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

import orchestrator
from orchestrator import bench_cli, errors, output
from orchestrator.errors import ExitCode

F = TypeVar("F", bound=Callable[..., Any])

VERSION = orchestrator.__version__
SUPPORTED_KUBERNETES = "1.30 – 1.37"


class _UsageError(click.UsageError):
    exit_code = int(ExitCode.USAGE)


class _Group(click.Group):
    """Suggests the closest command for a mistyped one; usage errors exit 1, not click's 2.

    Exit code 2 means "invalid profile" to pipelines (docs/cli.md), so a mistyped option must
    not look like one.
    """

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except click.UsageError as e:
            raise _UsageError(e.format_message(), e.ctx) from e

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as e:
            # format_message, not .message: a missing argument keeps its text there (it was a blank "Error:")
            raise _UsageError(e.format_message(), e.ctx) from e

    def resolve_command(self, ctx: click.Context, args: list[str]) -> Any:
        name = args[0] if args else ""
        if name and name not in self.commands and not name.startswith("-"):
            close = difflib.get_close_matches(name, list(self.commands), n=1)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            raise click.UsageError(f"no such command '{name}'.{hint}", ctx)
        return super().resolve_command(ctx, args)


def _fail(exc: errors.DeployctlError, fmt: str = "text") -> None:
    if fmt in ("json", "yaml"):
        click.echo(output.emit({"error": exc.message, "exit_code": int(exc.exit_code)}, fmt))
    click.echo(output.paint("error: ", "red", sys.stderr) + exc.message, err=True)
    sys.exit(int(exc.exit_code))


def handles_errors(fn: F) -> F:
    """Every DeployctlError becomes its message and exit code; nothing else is expected to escape."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except errors.DeployctlError as e:
            _fail(e, kwargs.get("output_format", "text"))
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)

    return wrapper  # type: ignore[return-value]


def _output_option(choices: tuple[str, ...] = ("text", "json", "yaml"), default: str = "text") -> Callable[[F], F]:
    return click.option(
        "--output",
        "output_format",
        type=click.Choice(choices),
        default=default,
        show_default=True,
        help="text for people, json/yaml for pipelines.",
    )


def _cluster_options(fn: F) -> F:
    fn = click.option("--context", help="kubeconfig context (default: the current one).")(fn)
    fn = click.option("--kubeconfig", type=click.Path(dir_okay=False), help="kubeconfig file (default: $KUBECONFIG).")(
        fn
    )
    return fn


def _load(path: str) -> Any:
    from orchestrator import profile as profile_mod

    return profile_mod.load(path)


@click.group(cls=_Group, context_settings={"auto_envvar_prefix": "DEPLOYCTL", "help_option_names": ["-h", "--help"]})
@click.version_option(VERSION, prog_name="deployctl")
def main() -> None:
    """deployctl: plan, render, apply, gate and roll back vLLM inference on Kubernetes."""


# --- profile commands (no cluster) ----------------------------------------------------------------


def _checked(prof: Any, *, allow_unfit: bool = False) -> Any:
    """The plan, or the refusal every command gives for the profile (planner.check owns the verdict)."""
    from orchestrator import planner

    return planner.check(prof, allow_unfit=allow_unfit)


@main.command()
@click.argument("profile_path", metavar="PROFILE")
@_output_option()
@handles_errors
def validate(profile_path: str, output_format: str) -> None:
    """Check a profile's schema and VRAM math; no cluster needed."""
    prof = _load(profile_path)
    plan = _checked(prof, allow_unfit=True)
    data = {
        "profile": profile_path,
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
            f"{profile_path}: valid; {status} ({prof.metadata.name}, TP={prof.engine.tensorParallelSize}, "
            f"{prof.hardware.gpu or str(prof.hardware.memoryGiB) + ' GiB'})"
        )
        for f in plan.findings:
            if f.severity != "info":
                click.echo(f"  {f.severity}: {f.message}")
    sys.exit(int(ExitCode.OK if plan.fits else ExitCode.DOES_NOT_FIT))


@main.command()
@click.argument("profile_path", metavar="PROFILE")
@click.option(
    "--calibrate-from",
    "release",
    metavar="RELEASE",
    help="Correct the memory the model does not explain by what this release's vLLM logged at start-up "
    "(same model, GPU, vLLM version, TP and PP; needs the cluster).",
)
@click.option("-n", "--namespace", default="default", show_default=True, help="The --calibrate-from release's.")
@_cluster_options
@_output_option(("table", "json", "yaml"), "table")
@handles_errors
def plan(
    profile_path: str,
    release: str | None,
    namespace: str,
    kubeconfig: str | None,
    context: str | None,
    output_format: str,
) -> None:
    """The capacity table: does it fit, how many full-context sequences, and why."""
    from orchestrator import planner, planview

    prof = _load(profile_path)
    calibration = None
    if release:
        from orchestrator import views

        calibration = views.calibration(_options(kubeconfig=kubeconfig, context=context), release, namespace, prof)
    p = planner.check(prof, allow_unfit=True, calibration=calibration)
    if output_format == "table":
        click.echo(planview.render_table(prof, p, color=output.color_enabled(sys.stdout)))
    else:
        click.echo(output.emit(p.to_json(), output_format))
    sys.exit(int(ExitCode.OK if p.fits else ExitCode.DOES_NOT_FIT))


@main.command()
@click.argument("profile_path", metavar="PROFILE", required=False)
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False), help="Write one file per object here.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["manifests", "helm-values", "rbac", "object", "crd", "controller"]),
    default="manifests",
    show_default=True,
    help="Kubernetes manifests; values for charts/vllm-inference; the RBAC deployctl itself needs; the profile "
    "as an InferenceProfile object; the InferenceProfile CustomResourceDefinition; or `deployctl controller` "
    "in the cluster (crd and controller need no PROFILE).",
)
@click.option(
    "--controller-namespace",
    default="deployctl-system",
    show_default=True,
    help="With --format controller: where the controller runs.",
)
@click.option(
    "--image",
    default=None,
    help="With --format controller: the controller image, pinned by digest (docs/gitops.md says how to build it).",
)
@click.option(
    "--force",
    is_flag=True,
    help="Render a profile that does not fit its GPUs (exit 3 otherwise); the verdict goes into the objects' "
    "annotations.",
)
@handles_errors
def render(
    profile_path: str | None, out_dir: str | None, fmt: str, controller_namespace: str, image: str | None, force: bool
) -> None:
    """Render deterministic manifests (GitOps), Helm values, the RBAC deployctl needs, or the InferenceProfile
    object and its CRD."""
    from orchestrator import render as render_mod

    if fmt == "crd":
        from orchestrator import crd

        _emit_objects([crd.definition()], out_dir)
        return
    if fmt == "controller":
        _emit_objects(render_mod.controller(controller_namespace, image or render_mod.CONTROLLER_IMAGE), out_dir)
        return
    if profile_path is None:
        raise errors.UsageError(f"render --format {fmt} needs a PROFILE (a profile file or an InferenceProfile object)")
    prof = _load(profile_path)
    plan = _checked(prof, allow_unfit=force)
    if not plan.fits:
        problems = " ".join(f.message for f in plan.findings if f.severity == "error")
        click.echo(output.paint("warning: ", "yellow", sys.stderr) + f"rendered with --force: {problems}", err=True)
    if fmt == "helm-values":
        text = output.emit(render_mod.helm_values(prof, plan), "yaml") + "\n"
        if out_dir:
            path = pathlib.Path(out_dir)
            path.mkdir(parents=True, exist_ok=True)
            (path / "values.yaml").write_text(text)
            click.echo(f"wrote {path / 'values.yaml'}", err=True)
        else:
            click.echo(text, nl=False)
        return
    if fmt == "object":
        from orchestrator import profile as profile_mod

        _emit_objects([profile_mod.to_object(prof)], out_dir)
        return
    key_secret = prof.gate.apiKeySecret.name if prof.gate.apiKeySecret else None
    objects = (
        render_mod.rbac(prof.metadata.namespace, api_key_secret=key_secret)
        if fmt == "rbac"
        else render_mod.render(prof, plan)
    )
    _emit_objects(objects, out_dir)


def _emit_objects(objects: list[dict[str, Any]], out_dir: str | None) -> None:
    from orchestrator import render as render_mod

    if out_dir:
        for written in render_mod.write(objects, pathlib.Path(out_dir)):
            click.echo(f"wrote {written}", err=True)
    else:
        click.echo(render_mod.to_yaml(objects), nl=False)


# --- cluster commands -------------------------------------------------------------------------------


def _options(**kw: Any) -> Any:
    from orchestrator import pipeline

    return pipeline.Options(environ=dict(os.environ), **kw)


def _finish(outcome: Any, output_format: str) -> None:
    if output_format in ("json", "yaml"):
        click.echo(output.emit(outcome.to_json(), output_format))
    else:
        color = "green" if outcome.exit_code == ExitCode.OK else "red"
        click.echo(output.paint(outcome.result.upper(), color) + f": {outcome.message}")
        if outcome.gate:
            click.echo(f"  smoke gate: {outcome.gate.summary()}")
        if outcome.timings:
            phases = ", ".join(f"{k} {v:.1f}s" for k, v in outcome.timings.items())
            click.echo(f"  timings: {phases}")
        for warning in outcome.warnings:
            click.echo(f"  warning: {warning}")
    gc.freeze()  # leave what was allocated so far out of the interpreter's exit collections (~70 ms)
    sys.exit(int(outcome.exit_code))


def _apply_like(fn: F) -> F:
    fn = click.option(
        "--lock-ttl",
        type=click.IntRange(5, 3600),
        default=60,
        show_default=True,
        help="Seconds before a lock left by a killed deployctl may be taken over.",
    )(fn)
    fn = click.option(
        "--timeout",
        type=click.FloatRange(1),
        help="Overall rollout deadline in seconds (default: rollout.progressDeadlineSeconds).",
    )(fn)
    fn = click.option("--skip-bench", is_flag=True, help="Skip the smoke benchmark; gate on /health only.")(fn)
    fn = click.option("--endpoint", help="Reach the server here instead of port-forwarding to each pod.")(fn)
    fn = _cluster_options(fn)
    return fn


@main.command()
@click.argument("profile_path", metavar="PROFILE")
@_apply_like
@click.option("--no-rollback", is_flag=True, help="Leave a failed revision in place for debugging.")
@click.option("--create-namespace", is_flag=True, help="Create the profile's namespace if it is missing.")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Plan, preflight and a server-side dry-run apply: say what would happen, write nothing.",
)
@_output_option()
@handles_errors
def apply(
    profile_path: str,
    kubeconfig: str | None,
    context: str | None,
    endpoint: str | None,
    skip_bench: bool,
    timeout: float | None,
    lock_ttl: int,
    no_rollback: bool,
    create_namespace: bool,
    dry_run: bool,
    output_format: str,
) -> None:
    """Plan, preflight, lock, apply, watch, gate and record — or roll back."""
    from orchestrator import pipeline

    prof = _load(profile_path)
    text = pathlib.Path(profile_path).read_text()
    progress = output.Progress(quiet=False)
    outcome = pipeline.apply(
        prof,
        text,
        _options(
            kubeconfig=kubeconfig,
            context=context,
            endpoint=endpoint,
            rollback=not no_rollback,
            skip_bench=skip_bench,
            timeout=timeout,
            create_namespace=create_namespace,
            dry_run=dry_run,
            lock_ttl=lock_ttl,
        ),
        progress,
    )
    progress.finish_line()
    _finish(outcome, output_format)


@main.command("gate")
@click.argument("profile_path", metavar="PROFILE")
@_apply_like
@_output_option()
@handles_errors
def gate_cmd(
    profile_path: str,
    kubeconfig: str | None,
    context: str | None,
    endpoint: str | None,
    skip_bench: bool,
    timeout: float | None,
    lock_ttl: int,
    output_format: str,
) -> None:
    """GitOps: wait for the synced Deployment to carry this profile, then health + smoke gate and record."""
    from orchestrator import gitops

    prof = _load(profile_path)
    progress = output.Progress()
    outcome = gitops.gate(
        prof,
        pathlib.Path(profile_path).read_text(),
        _options(
            kubeconfig=kubeconfig,
            context=context,
            endpoint=endpoint,
            skip_bench=skip_bench,
            timeout=timeout,
            lock_ttl=lock_ttl,
        ),
        progress,
    )
    progress.finish_line()
    _finish(outcome, output_format)


@main.command()
@click.option("-n", "--namespace", help="Watch InferenceProfile objects in this namespace only.")
@click.option("-A", "--all-namespaces", is_flag=True, help="Watch InferenceProfile objects in every namespace.")
@click.option(
    "--lease-namespace",
    envvar="POD_NAMESPACE",
    help="Namespace of the leader-election Lease (deployctl-controller). Default: the pod's namespace "
    "in the cluster (POD_NAMESPACE), else --namespace.",
)
@_cluster_options
@click.option("--lease-seconds", type=click.IntRange(5, 600), default=15, show_default=True)
@click.option("--resync", type=click.FloatRange(1), default=30, show_default=True, help="Seconds between resyncs.")
@click.option("--lock-ttl", type=click.IntRange(5, 3600), default=60, show_default=True)
@handles_errors
def controller(
    namespace: str | None,
    all_namespaces: bool,
    lease_namespace: str | None,
    kubeconfig: str | None,
    context: str | None,
    lease_seconds: int,
    resync: float,
    lock_ttl: int,
) -> None:
    """Deploy InferenceProfile objects: each new generation by the apply sequence, status in kstatus terms."""
    from orchestrator import controller as controller_mod

    if bool(namespace) == all_namespaces:
        raise errors.UsageError("give --namespace NS or --all-namespaces (-A), one of them")
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
    )

    def report(where: str, message: str) -> None:
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%H:%M:%SZ")
        click.echo(f"{stamp} {where} {message}")

    try:
        controller_mod.run(settings, report)
    except KeyboardInterrupt:
        report("controller", "stopped")


@main.command()
@click.argument("name")
@click.option("-n", "--namespace", default="default", show_default=True)
@click.option("--to", "to", type=int, help="Revision to restore (default: the last good one before the live one).")
@_cluster_options
@click.option("--endpoint", help="Reach the server here instead of port-forwarding to each pod.")
@click.option("--timeout", type=click.FloatRange(1), help="Rollout deadline in seconds.")
@click.option("--lock-ttl", type=click.IntRange(5, 3600), default=60, show_default=True)
@_output_option()
@handles_errors
def rollback(
    name: str,
    namespace: str,
    to: int | None,
    kubeconfig: str | None,
    context: str | None,
    endpoint: str | None,
    timeout: float | None,
    lock_ttl: int,
    output_format: str,
) -> None:
    """Re-apply an earlier revision's stored manifests (needs only a kubeconfig)."""
    from orchestrator import pipeline

    progress = output.Progress()
    outcome = pipeline.rollback(
        name,
        namespace,
        to,
        _options(kubeconfig=kubeconfig, context=context, endpoint=endpoint, timeout=timeout, lock_ttl=lock_ttl),
        progress,
    )
    progress.finish_line()
    _finish(outcome, output_format)


@main.command()
@click.argument("name")
@click.option("-n", "--namespace", default="default", show_default=True)
@_cluster_options
@_output_option()
@handles_errors
def history(name: str, namespace: str, kubeconfig: str | None, context: str | None, output_format: str) -> None:
    """The release's revisions: status, description, when, who."""
    from orchestrator import views

    rows = views.history(_options(kubeconfig=kubeconfig, context=context), name, namespace)
    if output_format != "text":
        click.echo(output.emit(rows, output_format))
        return
    click.echo(
        output.table(
            ["REVISION", "STATUS", "GATE", "KV PLAN/SEEN", "UPDATED", "ACTOR", "IMAGE", "DESCRIPTION"],
            [
                [
                    r["revision"],
                    r["status"],
                    r.get("gate") or "-",
                    _kv(r.get("planner") or {}),
                    r["timestamp"],
                    _actor(r["actor"]),
                    _short_image(r["image"]),
                    r["description"],
                ]
                for r in rows
            ],
        )
    )


def _kv(check: dict[str, Any]) -> str:
    """KV tokens planned/observed, in thousands: `1007k/1012k`; `-` for what is unknown."""

    def k(value: object) -> str:
        return f"{value / 1000:.0f}k" if isinstance(value, int) else "-"

    return f"{k(check.get('kv_tokens_planned'))}/{k(check.get('kv_tokens_observed'))}"


def _actor(actor: dict[str, Any]) -> str:
    """The user, and the CI job when there was one (e.g. `ci-bot (github run 42)`)."""
    ci = actor.get("ci") or {}
    job = next((f"{k.lower()}={v}" for k, v in ci.items() if k.endswith(("RUN_ID", "JOB_ID", "BUILD_ID"))), "")
    return f"{actor.get('user', '?')}" + (f" ({job})" if job else "")


def _short_image(image: str) -> str:
    return (
        image if "@sha256:" not in image else image.split("@sha256:")[0] + "@sha256:" + image.split("@sha256:")[1][:12]
    )


@main.command()
@click.argument("name")
@click.option("-n", "--namespace", default="default", show_default=True)
@_cluster_options
@_output_option()
@handles_errors
def status(name: str, namespace: str, kubeconfig: str | None, context: str | None, output_format: str) -> None:
    """Live revision, pods (ready, node, GPUs), last failure and gate result."""
    from orchestrator import views

    data = views.status(_options(kubeconfig=kubeconfig, context=context), name, namespace)
    if output_format != "text":
        click.echo(output.emit(data, output_format))
        return
    click.echo(views.format_status(data))


@main.command()
@click.argument("profile_path", metavar="PROFILE")
@_cluster_options
@handles_errors
def diff(profile_path: str, kubeconfig: str | None, context: str | None) -> None:
    """Server-side dry-run against the live objects, as a unified diff (exit 0: none, 1: changes)."""
    from orchestrator import views

    prof = _load(profile_path)
    text = views.diff(_options(kubeconfig=kubeconfig, context=context), prof, _checked(prof))
    click.echo(text or "no changes", nl=bool(not text) or not text.endswith("\n"))
    sys.exit(1 if text else 0)


@main.command()
@_cluster_options
@_output_option()
@handles_errors
def inventory(kubeconfig: str | None, context: str | None, output_format: str) -> None:
    """The cluster's GPU pools: product, nodes, GPUs total and free, NVLink."""
    from orchestrator import views

    pools = views.inventory(_options(kubeconfig=kubeconfig, context=context))
    if output_format != "text":
        click.echo(output.emit(pools, output_format))
        return
    click.echo(
        output.table(
            ["PRODUCT", "NVLINK", "NODES", "GPUS", "FREE"],
            [
                [p["product"], "yes" if p["nvlink"] else "no", p["nodes"], p["gpus_total"], p["gpus_free"]]
                for p in pools
            ],
        )
    )


@main.group(cls=_Group)
def audit() -> None:
    """Verify or export the tamper-evident release chain."""


@audit.command("verify")
@click.argument("name", required=False)
@click.option("-n", "--namespace", default="default", show_default=True)
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
@_cluster_options
@_output_option()
@handles_errors
def audit_verify(
    name: str | None,
    namespace: str,
    export_file: str | None,
    against: str | None,
    kubeconfig: str | None,
    context: str | None,
    output_format: str,
) -> None:
    """Walk the hash chain; an edited or deleted record is reported with its revision (exit 9)."""
    from orchestrator import views

    if not export_file and not name:
        raise errors.UsageError("give a release NAME, or --file EXPORT.json to verify an export offline")
    result = views.audit_verify(_options(kubeconfig=kubeconfig, context=context), name, namespace, export_file, against)
    if output_format != "text":
        click.echo(output.emit(result, output_format))
    elif result["ok"]:
        click.echo(
            output.paint("OK", "green") + f": {result['records']} records, chain intact (head {result['head'][:16]})"
        )
    else:
        click.echo(output.paint("TAMPERED", "red") + f": {len(result['problems'])} problem(s)")
        for p in result["problems"]:
            click.echo(f"  revision {p['revision']}: {p['message']}")
    sys.exit(0 if result["ok"] else int(ExitCode.AUDIT_FAILED))


@audit.command("export")
@click.argument("name")
@click.option("-n", "--namespace", default="default", show_default=True)
@click.option("-o", "--out", "out_file", type=click.Path(dir_okay=False), help="File to write (default: stdout).")
@_cluster_options
@handles_errors
def audit_export(name: str, namespace: str, out_file: str | None, kubeconfig: str | None, context: str | None) -> None:
    """Write the release chain as a JSON document an auditor can keep."""
    from orchestrator import views

    doc = views.audit_export(_options(kubeconfig=kubeconfig, context=context), name, namespace)
    text = output.emit(doc, "json") + "\n"
    if out_file:
        pathlib.Path(out_file).write_text(text)
        click.echo(f"wrote {out_file} ({len(doc['records'])} records)", err=True)
    else:
        click.echo(text, nl=False)


@main.command("bench")
@bench_cli.options
@_output_option(("table", "json"), "table")
@handles_errors
def bench_cmd(output_format: str, **options: Any) -> None:
    """The smoke benchmark alone (vLLM `bench serve` metric names, and its flag names too).

    Exits 5 when nothing could be measured, no request completed, or the error rate is above
    --max-error-rate; the report is printed (and saved) first.
    """
    problem = bench_cli.run(output_format, options)
    if problem:
        # Not raised: handles_errors would add an error object to stdout, which holds the report.
        _fail(errors.EndpointError(problem))


@main.command()
@_output_option()
def version(output_format: str) -> None:
    """deployctl's version, the engine versions it has flag tables for, and the Kubernetes versions it supports."""
    from orchestrator import engines, vllm_flags
    from orchestrator import profile as profile_mod

    data = {
        "deployctl": VERSION,
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
        click.echo("\n".join(lines))


@main.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell completion script: eval "$(deployctl completion bash)"."""
    from click.shell_completion import get_completion_class

    cls = get_completion_class(shell)
    assert cls is not None
    click.echo(cls(main, {}, "deployctl", "_DEPLOYCTL_COMPLETE").source())


if __name__ == "__main__":
    main()
