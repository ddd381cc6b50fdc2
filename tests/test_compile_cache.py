"""engine.compileCache: vLLM's compile caches on a claim or node directory, one directory per key.

The key must hold across what does not change the compiled code (a restart, an SLO change, a new
calibration) and change with what does (image, model, TP/PP, batch shape, compile flags); a profile
whose cache the pod could not write, or whose key could go stale, is refused with exit 2.
"""

from __future__ import annotations

import copy
import pathlib
from typing import Any

import click.testing
import pytest
import yaml

from orchestrator.cli import app as cli
from orchestrator.errors import ExitCode
from orchestrator.plan import planner
from orchestrator.profile import compile_cache as profile_compile_cache
from orchestrator.profile import model as profiles
from orchestrator.render import compile_cache
from orchestrator.render import manifests as render

ROOT = pathlib.Path(__file__).resolve().parent.parent
CLAIM = {"pvc": "vllm-compile-cache"}


def _doc(cache: dict[str, Any] | None = None, **engine: Any) -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "profiles" / "prod-tp4.yaml").read_text())
    doc["engine"].update({"fsGroup": 1000, "compileCache": cache or CLAIM, **engine})
    return doc


def _key(doc: dict[str, Any]) -> str:
    return compile_cache.key(profiles.Profile.model_validate(doc))


def _pod(doc: dict[str, Any]) -> dict[str, Any]:
    prof = profiles.Profile.model_validate(doc)
    deployment = next(o for o in render.render(prof, planner.plan(prof)) if o["kind"] == "Deployment")
    spec: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return spec


def _changed(doc: dict[str, Any], section: str, **values: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    out[section].update(values)
    return out


def test_the_pod_mounts_the_claim_and_points_every_compiler_below_the_key() -> None:
    doc = _doc()
    spec = _pod(doc)
    (volume,) = [v for v in spec["volumes"] if v["name"] == profile_compile_cache.VOLUME]
    assert volume == {"name": "compile-cache", "persistentVolumeClaim": {"claimName": "vllm-compile-cache"}}
    container = spec["containers"][0]
    assert {"name": "compile-cache", "mountPath": profile_compile_cache.MOUNT_PATH} in container["volumeMounts"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    root = f"{profile_compile_cache.MOUNT_PATH}/{_key(doc)}"
    assert env["VLLM_CACHE_ROOT"] == f"{root}/vllm" and env["TRITON_CACHE_DIR"] == f"{root}/triton"
    assert env["FLASHINFER_WORKSPACE_BASE"] == root
    assert spec["securityContext"]["fsGroup"] == 1000


def test_a_node_directory_must_exist_rather_than_be_created_owned_by_root() -> None:
    spec = _pod(_doc({"hostPath": "/var/lib/deployctl/compile-cache"}, fsGroup=None))
    (volume,) = [v for v in spec["volumes"] if v["name"] == profile_compile_cache.VOLUME]
    assert volume["hostPath"] == {"path": "/var/lib/deployctl/compile-cache", "type": "Directory"}


def test_without_the_field_the_pod_has_no_cache_volume_nor_variables() -> None:
    doc = yaml.safe_load((ROOT / "profiles" / "prod-tp4.yaml").read_text())
    spec = _pod(doc)
    assert profile_compile_cache.VOLUME not in [v["name"] for v in spec["volumes"]]
    names = {e["name"] for e in spec["containers"][0]["env"]}
    assert names.isdisjoint(profile_compile_cache.ENV)


@pytest.mark.parametrize(
    ("section", "values"),
    [
        ("gate", {"smoke": {"requests": 32, "slo": {"p95_ttft_ms": "<=3000"}}}),
        ("rollout", {"replicas": 2}),
        ("engine", {"gpuMemoryUtilization": 0.9}),
        ("engine", {"loadFormat": "safetensors"}),
        ("engine", {"startupSeconds": 1200}),
    ],
    ids=["slo-and-gate", "replicas", "memory-fraction", "load-format", "startup-probe"],
)
def test_what_does_not_change_the_compiled_code_keeps_the_key(section: str, values: dict[str, Any]) -> None:
    doc = _doc()
    assert _key(_changed(doc, section, **values)) == _key(doc)


def test_a_new_calibration_keeps_the_key() -> None:
    doc = _doc(skipMemoryProfiling=True)
    prof = profiles.Profile.model_validate(doc)
    args = prof.engine.engine.args(prof.server_settings())
    calibrated = [*args, "--kv-cache-memory-bytes", "123456789"]
    assert compile_cache.compiled_args(calibrated) == compile_cache.compiled_args(args)
    assert "--kv-cache-memory-bytes=5" not in compile_cache.compiled_args([*args, "--kv-cache-memory-bytes=5"])


@pytest.mark.parametrize(
    ("section", "values"),
    [
        ("engine", {"image": "registry.internal/vllm/vllm-openai@sha256:" + "1" * 64}),
        ("engine", {"tensorParallelSize": 2}),
        ("engine", {"maxNumSeqs": 32}),
        ("engine", {"maxModelLen": 4096}),
        ("engine", {"kvCacheDtype": "auto"}),
        ("engine", {"extraArgs": ["--compilation-config", '{"compile_sizes": [1, 2]}']}),
        ("engine", {"extraArgs": ["--enforce-eager"]}),
        ("model", {"revision": "0" * 40}),
    ],
    ids=["image", "tp", "batch", "max-len", "kv-dtype", "compilation-config", "eager", "model-revision"],
)
def test_what_changes_the_compiled_code_gets_a_fresh_directory(section: str, values: dict[str, Any]) -> None:
    doc = _doc()
    assert _key(_changed(doc, section, **values)) != _key(doc)


def _refusal(tmp_path: pathlib.Path, doc: dict[str, Any]) -> str:
    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    result = click.testing.CliRunner().invoke(cli.main, ["render", str(path)], prog_name="deployctl")
    assert result.exit_code == ExitCode.INVALID_PROFILE, result.output
    assert "Traceback" not in result.output
    return " ".join(result.output.split())


@pytest.mark.parametrize(
    ("engine", "field", "message"),
    [
        ({"fsGroup": None}, "engine.compileCache.pvc", "set engine.fsGroup (e.g. 1000)"),
        (
            {"image": "registry.internal/vllm/vllm-openai:latest", "allowUnpinnedImage": True},
            "engine.compileCache",
            "pin engine.image by digest",
        ),
        (
            {"env": [{"name": "VLLM_CACHE_ROOT", "value": "/tmp"}]},
            "engine.env.0.name",
            "set by engine.compileCache",
        ),
        (
            {
                "volumes": [{"name": "scratch", "emptyDir": {}}],
                "volumeMounts": [{"name": "scratch", "mountPath": profile_compile_cache.MOUNT_PATH + "/x"}],
            },
            "engine.volumeMounts.0.mountPath",
            "the compile cache (engine.compileCache)",
        ),
        ({"volumes": [{"name": "compile-cache", "emptyDir": {}}]}, "engine.volumes.0.name", "compileCache adds it"),
        ({"compileCache": {"pvc": "a", "hostPath": "/b"}}, "engine.compileCache", "give exactly one of pvc"),
        ({"compileCache": {"hostPath": "relative/dir"}}, "engine.compileCache.hostPath", "absolute, normalised"),
        ({"compileCache": {"hostPath": "/var/../etc"}}, "engine.compileCache.hostPath", "absolute, normalised"),
    ],
    ids=["claim-without-fsgroup", "unpinned", "env", "mount-below", "volume-name", "both", "relative", "dotdot"],
)
def test_a_cache_the_pod_could_not_write_or_that_could_go_stale_is_exit_2(
    tmp_path: pathlib.Path, engine: dict[str, Any], field: str, message: str
) -> None:
    doc = _doc()
    doc["engine"].update(engine)
    doc["engine"] = {k: v for k, v in doc["engine"].items() if v is not None}
    output = _refusal(tmp_path, doc)
    assert field in output and message in output, output


def test_another_engine_refuses_it(tmp_path: pathlib.Path) -> None:
    doc = yaml.safe_load((ROOT / "profiles" / "tgi-tp4.yaml").read_text())
    doc["engine"].update({"fsGroup": 1000, "compileCache": CLAIM})
    output = _refusal(tmp_path, doc)
    assert "compileCache moves vLLM's compile caches" in output


def test_an_unset_field_keeps_the_profile_hash_of_profiles_written_before_it() -> None:
    doc = yaml.safe_load((ROOT / "profiles" / "prod-tp4.yaml").read_text())
    prof = profiles.Profile.model_validate(doc)
    assert "compileCache" not in prof.model_dump(mode="json")["engine"]
