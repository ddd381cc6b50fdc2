"""`deployctl render`: manifests for GitOps, Helm values, the RBAC deployctl needs, the InferenceProfile
object and the cluster-wide objects (CRDs, the controller, the admission policy).

Parses the options, makes one call into ``orchestrator.render`` (or the CRD and policy modules) and
writes the objects to stdout or one file each; ``orchestrator.cli`` adds the command to the group.
"""

from __future__ import annotations

import pathlib
import sys
from typing import TYPE_CHECKING, Any

import click

from orchestrator import errors, output
from orchestrator.cli import options as cli_options
from orchestrator.cli import params as cli_params

if TYPE_CHECKING:
    from orchestrator.plan import planner
    from orchestrator.profile import model as profile_mod

# The formats that need no PROFILE: the cluster-wide objects.
CLUSTER_FORMATS = ("crd", "controller", "controller-namespace", "policy-crd", "admission")


@click.command()
@cli_options.profile_argument(required=False)
@cli_params.set_option
@click.option("--output-dir", "out_dir", type=click.Path(file_okay=False), help="Write one YAML file per object here.")
@cli_options.renamed_option("--out", "--output-dir")
@cli_options.output_option(
    ("yaml", "json"),
    "yaml",
    old_meaning="write files with --output-dir {value}",
    help="yaml: a multi-document stream; json: one v1 List (helm-values, rules: the document as JSON).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(
        [
            "manifests",
            "helm-values",
            "rules",
            "dashboard",
            "rbac",
            "object",
            "crd",
            "controller",
            "controller-namespace",
            "policy-crd",
            "admission",
        ]
    ),
    default="manifests",
    show_default=True,
    help="Kubernetes manifests; values for charts/vllm-inference; the release's alerts as a Prometheus rule file "
    "(promtool, a Prometheus without the operator); its Grafana dashboard as a ConfigMap (never applied by "
    "`deployctl apply`); the RBAC deployctl itself needs; the profile "
    "as an InferenceProfile object; the InferenceProfile CustomResourceDefinition; `deployctl controller` "
    "in the cluster; the Role and RoleBinding that opt namespaces in to it; the InferencePolicy "
    "CustomResourceDefinition; or the policy's ValidatingAdmissionPolicy, its binding and the default "
    "InferencePolicy (all but the first six need no PROFILE).",
)
@click.option(
    "--controller-namespace",
    default="deployctl-system",
    show_default=True,
    help="With --format controller or controller-namespace: where the controller runs.",
)
@click.option(
    "--watch-namespace",
    "watch_namespaces",
    multiple=True,
    help="With --format controller or controller-namespace (required there): a namespace the controller may "
    "deploy in, given a Role and RoleBinding there (repeatable). Nowhere else can it write.",
)
@click.option(
    "--image",
    default=None,
    help="With --format controller (and required there): the controller image, pinned by digest "
    "(docs/gitops.md says how to build it).",
)
@click.option(
    "--force",
    is_flag=True,
    help="Render a profile that does not fit its GPUs (exit 3 otherwise); the verdict goes into the objects' "
    "annotations.",
)
@cli_options.handles_errors
def render(
    profile_path: str | None,
    sets: tuple[str, ...],
    out_dir: str | None,
    output_format: str,
    fmt: str,
    controller_namespace: str,
    watch_namespaces: tuple[str, ...],
    image: str | None,
    force: bool,
) -> None:
    """Render deterministic manifests (GitOps), Helm values, the RBAC deployctl needs, or the InferenceProfile
    object and its CRD."""
    if out_dir and output_format != "yaml":
        raise errors.UsageError(
            f"--output-dir writes YAML files; drop -o {output_format}, or drop --output-dir to print "
            f"{output_format} to stdout"
        )
    emit = _Emitter(out_dir, output_format)
    if fmt in CLUSTER_FORMATS:
        emit.objects(_cluster_objects(fmt, controller_namespace, watch_namespaces, image))
        return
    if profile_path is None:
        raise errors.UsageError(f"render --format {fmt} needs a PROFILE (a profile file or an InferenceProfile object)")
    _profile_objects(cli_options.load_profile(profile_path, sets).profile, fmt, force, emit)


def _cluster_objects(
    fmt: str, controller_namespace: str, watch_namespaces: tuple[str, ...], image: str | None
) -> list[dict[str, object]]:
    """The objects of a format that needs no profile: a CRD, the controller, or the admission policy."""
    from orchestrator.controller import crd

    if fmt == "crd":
        return [crd.definition()]
    if fmt == "policy-crd":
        return [crd.policy_definition()]
    if fmt == "admission":
        from orchestrator.policy import admission

        return list(admission.objects())
    from orchestrator.render import manifests as render_mod

    if fmt == "controller":
        if image is None:
            raise errors.UsageError(
                "render --format controller needs --image REGISTRY/deployctl-controller@sha256:…, the digest of "
                "the image built from the Containerfile (docs/gitops.md)"
            )
        return list(render_mod.controller(controller_namespace, image, watch_namespaces))
    return list(render_mod.controller_namespace(controller_namespace, watch_namespaces))


def _profile_objects(prof: profile_mod.Profile, fmt: str, force: bool, emit: _Emitter) -> None:
    """The profile's manifests, Helm values, object or RBAC, after the planner's verdict (``--force``: any)."""
    from orchestrator.plan import planner
    from orchestrator.render import manifests as render_mod

    plan = planner.check(prof, allow_unfit=force)
    _warn_unfit(plan)
    if fmt == "helm-values":
        emit.document(render_mod.helm_values(prof, plan), "values.yaml")
        return
    if fmt == "rules":
        emit.document(render_mod.rules(prof, plan), "rules.yaml")
        return
    if fmt == "dashboard":
        emit.objects(render_mod.dashboard_objects(prof, plan))
        return
    if fmt == "object":
        from orchestrator.profile import model as profile_mod

        emit.objects([profile_mod.to_object(prof)])
        return
    key_secret = prof.gate.apiKeySecret.name if prof.gate.apiKeySecret else None
    objects = render_mod.render(prof, plan)
    if fmt == "rbac":
        # The Role grants what this profile's objects need: no RayCluster writes for a single-node profile.
        kinds = {o["kind"] for o in objects}
        warmup = prof.rollout.warmup is not None and prof.rollout.warmup.enabled
        objects = render_mod.rbac(prof.metadata.namespace, api_key_secret=key_secret, kinds=kinds, warmup=warmup)
    emit.objects(objects)


def _warn_unfit(plan: planner.Plan) -> None:
    if not plan.fits:
        problems = " ".join(f.message for f in plan.findings if f.severity == "error")
        click.echo(output.paint("warning: ", "yellow", sys.stderr) + f"rendered with --force: {problems}", err=True)


class _Emitter:
    """Where render's objects go: files under --output-dir, a YAML stream, or one JSON v1 List."""

    def __init__(self, out_dir: str | None, output_format: str) -> None:
        self.out_dir = out_dir
        self.output_format = output_format

    def objects(self, objects: list[dict[str, object]]) -> None:
        from orchestrator.render import manifests as render_mod

        if self.out_dir:
            for written in render_mod.write(objects, pathlib.Path(self.out_dir)):
                click.echo(f"wrote {written}", err=True)
        elif self.output_format == "json":
            click.echo(output.emit({"apiVersion": "v1", "kind": "List", "items": objects}, "json"))
        else:
            click.echo(render_mod.to_yaml(objects), nl=False)

    def document(self, document: dict[str, Any], filename: str) -> None:
        """One document (Helm values, a rule file): ``filename`` under --output-dir, else stdout."""
        text = output.emit(document, self.output_format) + "\n"
        if self.out_dir:
            path = pathlib.Path(self.out_dir)
            path.mkdir(parents=True, exist_ok=True)
            (path / filename).write_text(text)
            click.echo(f"wrote {path / filename}", err=True)
        else:
            click.echo(text, nl=False)
