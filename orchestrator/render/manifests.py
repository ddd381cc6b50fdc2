"""Profile → Kubernetes objects: the Jinja2 manifests, the Helm chart's values, and deployctl's RBAC.

Every setting is resolved once, in Python (``orchestrator.render.resolve``), into
``chart_values.Values``: the Helm chart's values, whose JSON schema is the chart's
values.schema.json. The Jinja2 templates in ``manifests/`` and the chart's Go templates only place
those values into objects, so ``deployctl render`` and ``helm template`` fed ``deployctl render
--format helm-values`` give the same objects, and a test holds them to it. The output is
deterministic: the same profile gives the same bytes.
"""

from __future__ import annotations

import functools
import json
import pathlib
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any, NoReturn

import jinja2
import yaml

from orchestrator import conventions, errors, yaml_text
from orchestrator.plan import planner
from orchestrator.profile import base as profile_base
from orchestrator.profile import model as profiles
from orchestrator.render import alerts, chart_values, dashboard, promql, resolve

CHART_NAME = "vllm-inference"  # also app.kubernetes.io/name, as in a chart made by `helm create`
MANAGED_BY = conventions.MANAGED_BY  # the Helm chart writes the same, so both renders carry equal labels
MANAGED_BY_LABEL = conventions.MANAGED_BY_LABEL
RELEASE_LABEL = conventions.RELEASE_LABEL
PROFILE_HASH_ANNOTATION = conventions.PROFILE_HASH_ANNOTATION
GPU_RESOURCE = conventions.GPU_RESOURCE
GPU_PRODUCT_LABEL = conventions.GPU_PRODUCT_LABEL

# Objects in the order they are applied: the NetworkPolicy exists before the first pod can
# reach out, the ServiceAccount before the pods that name it.
_WORKLOAD_TEMPLATES = (
    "serviceaccount.yaml.j2",
    "networkpolicy.yaml.j2",  # only with airgap.denyEgress
    "service.yaml.j2",
    "poddisruptionbudget.yaml.j2",
)
# What runs the copies: a Deployment of one-pod copies, or a group object per engine.
_COPY_TEMPLATES = {"": "deployment.yaml.j2", "kuberay": "raycluster.yaml.j2", "lws": "leaderworkerset.yaml.j2"}

# KubeRay starts `ray start` itself unless a pod template carries this annotation; then it only
# exports the command as $KUBERAY_GEN_RAY_START_CMD, and the head script runs it, waits for the
# workers and starts vLLM.
RAY_OVERWRITE_CMD_ANNOTATION = "ray.io/overwrite-container-cmd"
_RBAC_TEMPLATE = "rbac/deployctl.yaml.j2"
# Last: it only tells Prometheus where the pods are (profile monitoring.podMonitor).
_PODMONITOR_TEMPLATE = "podmonitor.yaml.j2"
_PROMETHEUSRULE_TEMPLATE = "prometheusrule.yaml.j2"  # profile monitoring.alerts
_HTTPROUTE_TEMPLATE = "httproute.yaml.j2"  # rollout.canary.traffic httpRoute


# --- templates -------------------------------------------------------------------------------------


def helm_values(profile: profiles.Profile, plan: planner.Plan) -> dict[str, Any]:
    """The chart's values for a profile: what `deployctl render --format helm-values` prints."""
    return resolve.values(profile, plan, None).model_dump(mode="json")


def render(
    profile: profiles.Profile, plan: planner.Plan, strategy: Mapping[str, object] | None = None
) -> list[dict[str, Any]]:
    """The release's Kubernetes objects in apply order.

    ``plan`` is the profile's plan, made once by the caller (it sizes the startup probe). When its
    verdict is not "fits" (``render --force``), every object carries the verdict in an annotation,
    so a reviewer of the GitOps change sees it. ``strategy`` is the Deployment strategy preflight
    chose from the cluster's free GPUs; without it, rollout.strategy decides, and "auto" replaces
    one pod at a time, which never hangs.
    """
    resolved = resolve.values(profile, plan, strategy)
    values = resolved.model_dump(mode="json")
    labels = _labels(resolved)
    context = {
        "values": values,
        "name": resolved.fullnameOverride,
        "namespace": profile.metadata.namespace,
        "labels": labels,
        "selector": _selector(resolved),
        "annotations": {PROFILE_HASH_ANNOTATION: resolved.profileHash},
        # Ours last, as in _labels: the selector labels and the profile hash are not overridable.
        "pod_labels": {**resolved.podLabels, **labels},
        # Not on the pod template: a change to SLOs or gate settings must not restart (and reload) the pods.
        "pod_annotations": dict(resolved.podAnnotations),
        "copy_label": conventions.COPY_LABEL,
        "role_label": conventions.GROUP_ROLE_LABEL,
        "ray_overwrite_annotation": RAY_OVERWRITE_CMD_ANNOTATION,
        "target_labels": list(promql.TARGET_POD_LABELS),
    }
    objects: list[dict[str, Any]] = []
    for template in _WORKLOAD_TEMPLATES:
        if template != "networkpolicy.yaml.j2" or values["networkPolicy"]["enabled"]:
            objects.extend(_render_template(template, context))
    objects.extend(_render_template(_COPY_TEMPLATES[values["group"]["engine"]], context))
    if values["podMonitor"]["enabled"]:
        objects.extend(_render_template(_PODMONITOR_TEMPLATE, context))
    if values["prometheusRule"]["enabled"]:
        objects.extend(_render_template(_PROMETHEUSRULE_TEMPLATE, context))
    if values["httpRoute"]["enabled"]:  # after the Service it routes to
        objects.extend(_render_template(_HTTPROUTE_TEMPLATE, context))
    if plan.verdict != "fits":
        for obj in objects:
            obj["metadata"].setdefault("annotations", {})[conventions.FIT_VERDICT_ANNOTATION] = _verdict_text(plan)
    return objects


def rules(profile: profiles.Profile, plan: planner.Plan) -> dict[str, Any]:
    """The release's alerts as a Prometheus rule file (``groups:``): `render --format rules`, for
    promtool and a Prometheus without the operator. The same groups as the PrometheusRule's."""
    return alerts.rule_file(profile, resolve.startup_allowed(profile, plan))


def dashboard_objects(profile: profiles.Profile, plan: planner.Plan) -> list[dict[str, Any]]:
    """The dashboard's ConfigMap, labelled as the chart labels it: `render --format dashboard`."""
    resolved = resolve.values(profile, plan, None)
    labels = {**profile.monitoring.dashboard.labels, **_labels(resolved)}
    return [dashboard.config_map(profile, labels)]


def _verdict_text(plan: planner.Plan) -> str:
    problems = [f.message for f in plan.findings if f.severity in ("error", "invalid")]
    return f"{plan.verdict} (rendered with --force): " + " ".join(problems)


def rbac(
    namespace: str,
    service_account: str = "deployctl",
    api_key_secret: str | None = None,
    kinds: Collection[str] | None = None,
    warmup: bool | None = None,
) -> list[dict[str, Any]]:
    """What deployctl itself may do: a Role in ``namespace``, read-only nodes and pods cluster-wide.

    Returns the ServiceAccount, Role, RoleBinding, ClusterRole and ClusterRoleBinding. With
    ``api_key_secret`` (the profile's gate.apiKeySecret name) the Role may also get that Secret.
    ``kinds``: the kinds the profile renders; the Role writes RayClusters, LeaderWorkerSets and the
    Prometheus Operator's kinds only when they are among them. None: all of them (a Role for any
    profile). ``warmup``:
    the profile runs a warm-up (rollout.warmup), which creates and deletes pods; None: as for any profile.
    """
    some = set(conventions.OPTIONAL_KINDS)  # the kinds only some profiles render
    optional = some if kinds is None else set(kinds) & some
    values = {
        "namespace": namespace,
        "service_account": service_account,
        "api_key_secret": api_key_secret,
        "kinds": sorted(optional),
        "warmup": True if warmup is None else warmup,
    }
    return _render_template(_RBAC_TEMPLATE, values)


CONTROLLER_TEMPLATE = "controller.yaml.j2"


CONTROLLER_NAMESPACE_TEMPLATE = "controller-namespace.yaml.j2"
_CONTROLLER_LABELS = {"app.kubernetes.io/name": "deployctl-controller", MANAGED_BY_LABEL: MANAGED_BY}


def controller(namespace: str, image: str, watch_namespaces: Sequence[str] = ()) -> list[dict[str, Any]]:
    """`deployctl controller` in the cluster: its Namespace, ServiceAccount, a ClusterRole of reads
    and its binding, the leader Lease with the Role that may only take it, a Role and RoleBinding in
    each of ``watch_namespaces`` (where it may deploy), and a Deployment of two replicas.

    Refuses (exit 2) an image not pinned by digest and a namespace that is not a DNS label: what
    runs with the controller's rights must be the bytes that were reviewed, and a bad name would
    only fail later, at apply, half installed."""
    problems = []
    if not profile_base.DIGEST.search(image):
        problems.append(
            f"--image {image} is not pinned by digest: give REGISTRY/deployctl-controller@sha256:<64 hex digits> "
            "(the digest your registry reports for the image built from the Containerfile, docs/gitops.md)"
        )
    problems += _namespace_problems(namespace, watch_namespaces)
    if problems:
        raise errors.InvalidInstall("render --format controller: " + "; ".join(problems))
    context = {"namespace": namespace, "image": image, "labels": _CONTROLLER_LABELS, "group": "deployctl.dev"}
    return _render_template(CONTROLLER_TEMPLATE, {**context, "watch_namespaces": list(dict.fromkeys(watch_namespaces))})


def controller_namespace(namespace: str, watch_namespaces: Sequence[str]) -> list[dict[str, Any]]:
    """What opts namespaces in to the controller running in ``namespace``: a Role and RoleBinding in each."""
    problems = _namespace_problems(namespace, watch_namespaces)
    if not watch_namespaces:
        problems.append("give the namespaces to opt in with --watch-namespace NS (repeatable)")
    if problems:
        raise errors.InvalidInstall("render --format controller-namespace: " + "; ".join(problems))
    context = {"namespace": namespace, "labels": _CONTROLLER_LABELS, "group": "deployctl.dev"}
    return _render_template(
        CONTROLLER_NAMESPACE_TEMPLATE, {**context, "watch_namespaces": list(dict.fromkeys(watch_namespaces))}
    )


def _namespace_problems(namespace: str, watch_namespaces: Sequence[str]) -> list[str]:
    named = [("--controller-namespace", namespace)] + [("--watch-namespace", w) for w in watch_namespaces]
    return [
        f"{option} {value} is not a namespace name: at most 63 lowercase letters, digits and hyphens, starting "
        "and ending with a letter or digit"
        for option, value in named
        if len(value) > 63 or not profile_base.DNS1123_LABEL.match(value)
    ]


def _labels(values: chart_values.Values) -> dict[str, str]:
    # Ours are set last: a profile label must not change what the selectors match.
    return {
        **values.commonLabels,
        **_selector(values),
        "app.kubernetes.io/component": "inference-server",
        "app.kubernetes.io/part-of": "llm-inference",
        conventions.MANAGED_BY_LABEL: MANAGED_BY,
        "app.kubernetes.io/version": values.engine.version,
        RELEASE_LABEL: values.fullnameOverride,
    }


def _selector(values: chart_values.Values) -> dict[str, str]:
    # Never the version: a Deployment's selector cannot change after creation.
    return {
        "app.kubernetes.io/name": values.nameOverride or CHART_NAME,
        "app.kubernetes.io/instance": values.fullnameOverride,
    }


def _render_template(template: str, context: Mapping[str, object]) -> list[dict[str, Any]]:
    text = _environment().get_template(template).render(context)
    return [doc for doc in yaml.safe_load_all(text) if doc]


@functools.cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_templates_dir())),
        undefined=jinja2.StrictUndefined,  # a missing value is an error, never an empty string
        keep_trailing_newline=True,
        autoescape=False,  # YAML, not HTML; values are escaped by the json filter instead
    )
    env.filters["json"] = _to_json
    env.filters["merged"] = lambda base, extra: {**base, **extra}
    return env


def _to_json(value: object) -> str:
    """The template filter: values go in as JSON, which is YAML, so quoting is never our problem."""

    def not_json(obj: object) -> NoReturn:
        if isinstance(obj, jinja2.Undefined):
            str(obj)  # StrictUndefined raises UndefinedError here, naming the missing value
        raise TypeError(f"a {type(obj).__name__} cannot go into a manifest")

    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=not_json)
    # JSON leaves DEL, the C1 controls and lone surrogates raw, which YAML refuses to read, and the line
    # separators U+0085, U+2028 and U+2029 raw, which YAML folds into a space: escape them (\uXXXX means the
    # same in both), so any string a profile holds renders and parses back exactly.
    return _NOT_YAML_PRINTABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


_NOT_YAML_PRINTABLE = re.compile("[\x7f-\x9f\u2028\u2029\ud800-\udfff\ufffe\uffff]")


def _templates_dir() -> pathlib.Path:
    # The templates are the package orchestrator.manifests, in a checkout and installed alike (the
    # top-level manifests/ of the repo is a link to them).
    return pathlib.Path(__file__).resolve().parent.parent / "manifests"


# --- output ----------------------------------------------------------------------------------------


def to_yaml(objects: list[dict[str, Any]]) -> str:
    """One YAML stream, keys sorted as `kubectl get -o yaml` shows them: same objects, same bytes."""
    return "---\n".join(
        yaml_text.safe_dump(obj, sort_keys=True, default_flow_style=False, allow_unicode=True, width=1 << 16)
        for obj in objects
    )


_FILE_NAME = re.compile(r"^\d{2}-[a-z]+-(?P<name>[a-z0-9-]+)\.yaml$")


def write(objects: list[dict[str, Any]], out_dir: str | pathlib.Path) -> list[pathlib.Path]:
    """One file per object, ``NN-kind-name.yaml`` (NN keeps `kubectl apply -f DIR` in apply order).

    Files this function wrote earlier for the same release names and no longer renders (say, the
    NetworkPolicy after denyEgress was turned off, or an earlier revision's RayClusters) are
    removed, so a GitOps folder never keeps a stale object; other files are left alone.
    """
    out = pathlib.Path(out_dir)
    try:
        return _write(objects, out)
    except OSError as e:
        raise errors.UsageError(
            f"cannot write the manifests into --output-dir {out}: {e.strerror or e}"
            + (f" ({e.filename})" if e.filename and str(e.filename) != str(out) else "")
            + "; give a directory you may write (it is created when missing)"
        ) from e


def _write(objects: list[dict[str, Any]], out: pathlib.Path) -> list[pathlib.Path]:
    if out.exists() and not out.is_dir():  # /dev/null, a file: mkdir's "File exists" would not say why
        raise NotADirectoryError(20, "it exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    written: list[pathlib.Path] = []
    for index, obj in enumerate(objects):
        # Binding names may hold ':' (deployctl-preflight:NS:SA), which some file systems and tools refuse.
        safe_name = obj["metadata"]["name"].replace(":", "_")
        path = out / f"{index:02d}-{obj['kind'].lower()}-{safe_name}.yaml"
        path.write_text(to_yaml([obj]), encoding="utf-8")
        written.append(path)
    names = {obj["metadata"]["name"] for obj in objects}
    # Copies are named by a hash of their templates: an earlier revision's are this release's too.
    releases = {obj["metadata"].get("labels", {}).get(RELEASE_LABEL) for obj in objects} - {None}
    copies = [re.compile(rf"{re.escape(resolve.copy_prefix(str(r)))}-[0-9a-f]{{8}}-\d+") for r in releases]
    for path in sorted(out.iterdir()):
        match = _FILE_NAME.match(path.name)
        if not match or path in written:
            continue
        if match["name"] in names or any(c.fullmatch(match["name"]) for c in copies):
            path.unlink()
    return written
