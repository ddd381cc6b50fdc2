"""`deployctl rollout status|promote|abort|pause|resume RELEASE`: a running canary, in Argo Rollouts'
habits. The commands ask the apply that runs the canary (``orchestrator.apply.canary_control``);
they return once asked, and that apply acts at its next read of the pods' metrics."""

from __future__ import annotations

from typing import Any

import click

from orchestrator import output
from orchestrator.cli import params as cli_params


@click.group()
def rollout() -> None:
    """A running canary (rollout.canary): its status, and promote, abort, pause or resume it."""


def _where(opts: cli_params.Release) -> tuple[Any, str]:
    from orchestrator.kube import connect

    return connect(opts.kubeconfig, opts.context), opts.resolved_namespace()


@rollout.command()
@cli_params.command_over(cli_params.Release, cli_params.RELEASE_NAME)
def status(name: str, output_format: str, opts: cli_params.Release) -> None:
    """The canary's step, its last window's verdict and the last command; says when none runs."""
    from orchestrator.apply import canary_control

    kube, namespace = _where(opts)
    data = {"release": name, "namespace": namespace, "canary": canary_control.progress(kube, name, namespace)}
    click.echo(output.emit(data, output_format) if output_format != "text" else _text(data))


def _text(data: dict[str, Any]) -> str:
    canary, where = data["canary"], f"{data['release']} in namespace {data['namespace']}"
    if canary is None:
        return f"no canary runs for {where} (`deployctl status {data['release']}` shows the live revision)"
    ready = canary["canary_copies"]
    lines = [
        f"canary of {where}: {canary.get('state', 'starting')}, step {canary.get('step', '?')}/"
        f"{canary.get('steps', '?')} on {canary.get('copies', '?')} of {canary.get('of', '?')} copies "
        f"({canary.get('mode', '?')}; {ready['ready']}/{ready['desired']} canary pods ready); "
        f"stable revision {canary.get('stable_revision', '?')}"
    ]
    if last := canary.get("last"):
        share = last.get("canary_share")
        shown = f", canary share {share:.0%}" if isinstance(share, (int, float)) else ""
        lines.append(f"last window: {last.get('verdict')}: {last.get('reason')}{shown}")
    if command := canary["command"]:
        lines.append(f"last command: {command['command']} by {command['by']} at {command['at']}")
    return "\n".join(lines)


def _ask(verb: str, help_text: str) -> click.Command:
    @cli_params.command_over(cli_params.Release, cli_params.RELEASE_NAME)
    def ask(name: str, output_format: str, opts: cli_params.Release) -> None:
        from orchestrator.apply import canary_control

        kube, namespace = _where(opts)
        command = canary_control.send(kube, name, namespace, verb)  # type: ignore[arg-type]
        data = {"release": name, "namespace": namespace, **command.to_json()}
        text = (
            f"asked the canary of {name} in namespace {namespace} to {verb} (as {command.by}); the apply running "
            "it acts at its next read of the pods' metrics (`deployctl rollout status` shows it)"
        )
        click.echo(output.emit(data, output_format) if output_format != "text" else text)

    ask.__doc__ = help_text
    return rollout.command(name=verb)(ask)


_ask("promote", "Skip the canary's remaining analysis and steps: promote it now (the full gate still runs).")
_ask("abort", "Remove the canary now; the stable copies keep serving and the revision is recorded failed.")
_ask("pause", "Hold the canary where it is until `resume`, `promote` or `abort` (maxWait stops counting).")
_ask("resume", "Go on after `pause`; the window in progress starts again.")
