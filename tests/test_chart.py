"""The Helm chart: generated schema, documented values, `helm lint`, and equality with the Jinja2 render.

The Helm checks use the helm binary built from source into .cache/bin/helm (e2e/cluster/build.sh).
Without it they skip on a workstation and fail in CI (CI is set), where it is built first.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import re
import subprocess
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from orchestrator import planner, profile, render


def _rendered(prof: profile.Profile, strategy: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The objects of ``prof``, rendered with its own plan as every command does."""
    return render.render(prof, planner.plan(prof), strategy)


ROOT = pathlib.Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "vllm-inference"
HELM = ROOT / ".cache" / "bin" / "helm"
PROFILES = [
    *sorted((ROOT / "profiles").glob("*.yaml")),
    ROOT / "tests" / "golden" / "every-option.profile.yaml",
    ROOT / "tests" / "golden" / "lws.profile.yaml",
]
HOOK = "helm.sh/hook"


@pytest.fixture(scope="module")
def helm() -> pathlib.Path:
    if not HELM.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{HELM} is missing; CI must build it first (e2e/cluster/build.sh helm)")
        pytest.skip(f"{HELM} is not built yet; run e2e/cluster/build.sh helm")
    return HELM


def _run(*args: str | pathlib.Path) -> str:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"{' '.join(map(str, args))} failed:\n{done.stdout}{done.stderr}"
    return done.stdout


def _helm_template(helm: pathlib.Path, prof: profile.Profile, tmp: pathlib.Path) -> list[dict[str, Any]]:
    values = tmp / f"{prof.metadata.name}.values.yaml"
    values.write_text(yaml.safe_dump(render.helm_values(prof, planner.plan(prof))), encoding="utf-8")
    out = _run(helm, "template", prof.metadata.name, CHART, "--namespace", prof.metadata.namespace, "-f", values)
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
    render.Values.model_validate(yaml.safe_load(text))


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
    leaves = _leaves(render.Values)
    assert sorted(leaves - documented.keys()) == [], "values.yaml lacks these values"
    assert sorted(k for k in leaves if not documented[k]) == [], "these values have no `# --` comment"


def test_chart_app_version_is_the_default_vllm_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    assert chart["name"] == render.CHART_NAME
    assert chart["appVersion"] == values["engine"]["version"] == profile.DEFAULT_VLLM_VERSION


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.stem)
def test_helm_values_of_every_profile_are_valid_chart_values(path: pathlib.Path) -> None:
    values = render.helm_values(profile.load(path), planner.plan(profile.load(path)))
    assert render.Values.model_validate(values).model_dump(mode="json") == values


# --- with the helm binary --------------------------------------------------------------------------


def test_helm_lint_passes_with_defaults_and_with_every_profile(helm: pathlib.Path, tmp_path: pathlib.Path) -> None:
    _run(helm, "lint", "--strict", CHART)
    for path in PROFILES:
        values = tmp_path / f"{path.stem}.yaml"
        values.write_text(
            yaml.safe_dump(render.helm_values(profile.load(path), planner.plan(profile.load(path)))), encoding="utf-8"
        )
        _run(helm, "lint", "--strict", CHART, "-f", values)


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.stem)
def test_helm_template_equals_the_jinja2_render_object_by_object(
    helm: pathlib.Path, tmp_path: pathlib.Path, path: pathlib.Path
) -> None:
    prof = profile.load(path)
    from_helm = [o for o in _helm_template(helm, prof, tmp_path) if HOOK not in o["metadata"].get("annotations", {})]
    ours = _rendered(prof)
    assert sorted(map(_key, from_helm)) == sorted(map(_key, ours))
    by_key = {_key(o): o for o in from_helm}
    for obj in ours:
        assert by_key[_key(obj)] == obj, f"{obj['kind']} differs between helm template and deployctl render"


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


def test_helm_test_hook_checks_health_through_the_service(helm: pathlib.Path, tmp_path: pathlib.Path) -> None:
    prof = profile.load(PROFILES[0])
    hooks = [o for o in _helm_template(helm, prof, tmp_path) if o["metadata"].get("annotations", {}).get(HOOK)]
    assert len(hooks) == 1
    pod = hooks[0]
    assert pod["kind"] == "Pod" and pod["metadata"]["annotations"][HOOK] == "test"
    name, port = prof.metadata.name, prof.engine.port
    assert pod["spec"]["containers"][0]["command"][-1] == f"http://{name}:{port}/health"
    assert pod["spec"]["containers"][0]["image"] == prof.engine.image
    selector = _rendered(prof)[-1]["spec"]["selector"]["matchLabels"]
    assert not selector.items() <= pod["metadata"]["labels"].items(), "the Service must not route to the test pod"
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
