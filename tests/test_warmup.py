"""The warm-up (rollout.warmup, model.verify): where its pods go, what they are, what their reports mean.

The pods run against the real API server in e2e/test_warmup_cluster.py; here the shipped warm-up
script runs for real on real directories, and deployctl's judgement of its report is checked, the
model signature one made with the real model-signing 1.1.1 (tests/data/model_signing).
"""

from __future__ import annotations

import copy
import hashlib
import pathlib
import shutil
import subprocess
import sys
from typing import Any

import pytest
import yaml

from orchestrator import errors
from orchestrator.apply import time_to_serving, warmup, warmup_pods
from orchestrator.plan import node_reports, planner, preflight
from orchestrator.profile import model as profiles
from orchestrator.records import model_manifest
from orchestrator.render import manifests as render

ROOT = pathlib.Path(__file__).resolve().parent.parent
SIGNED = ROOT / "tests" / "data" / "model_signing"
KEY = (SIGNED / "TEST-ONLY-model-key.pub").read_text()
REPORT = warmup_pods.REPORT


def _profile(verify: dict[str, Any] | None = None, **warm: Any) -> profiles.Profile:
    doc = yaml.safe_load((ROOT / "profiles" / "prod-tp4.yaml").read_text())
    doc["rollout"]["warmup"] = {"enabled": True, **warm}
    doc["engine"].update({"fsGroup": 1000, "compileCache": {"pvc": "compile"}})
    if verify is not None:
        doc["model"]["verify"] = verify
    return profiles.Profile.model_validate(doc)


def _pod(prof: profiles.Profile, node: str = "gpu-0") -> dict[str, Any]:
    template = warmup_pods.pod_template(render.render(prof, planner.plan(prof)))
    return warmup_pods.pod(prof, template, node)


def _node(name: str, *, eligible: bool = True, free: int = 0, release: int = 0) -> node_reports.NodeReport:
    return node_reports.NodeReport(name, "A100", 8, free, release, True, eligible, ())


def _verdict(*nodes: node_reports.NodeReport) -> preflight.Preflight:
    names = [n.name for n in nodes if n.eligible]
    return preflight.Preflight(list(nodes), names, 1, {"all": names}, 0, 0, {}, "one-at-a-time", False, [], None)


def test_the_targets_are_the_eligible_nodes_where_a_new_pod_fits_on_freed_or_free_gpus() -> None:
    verdict = _verdict(
        _node("runs-the-release", release=4),
        _node("has-free-gpus", free=4),
        _node("half-free", free=2, release=2),
        _node("full", free=2),
        _node("not-eligible", eligible=False, free=8),
    )
    assert warmup_pods.targets(verdict, 4) == ["runs-the-release", "has-free-gpus", "half-free"]


def test_the_pod_is_the_release_pod_cut_down_pinned_to_its_node_without_gpu_token_env_or_secret() -> None:
    prof = _profile({"sha256Manifest": "SHA256SUMS"}, timeoutSeconds=600)
    template = warmup_pods.pod_template(render.render(prof, planner.plan(prof)))
    pod = warmup_pods.pod(prof, template, "gpu-a100-0")
    spec, (container,) = pod["spec"], pod["spec"]["containers"]
    assert spec["nodeName"] == "gpu-a100-0" and spec["restartPolicy"] == "Never"
    assert spec["activeDeadlineSeconds"] == 600 and spec["automountServiceAccountToken"] is False
    assert spec["securityContext"] == template["spec"]["securityContext"]  # uid 1000, fsGroup, seccomp
    assert spec["tolerations"] == template["spec"]["tolerations"]
    assert [v["name"] for v in spec["volumes"]] == ["model", "compile-cache"]
    assert all(m["readOnly"] for m in container["volumeMounts"] if m["name"] == "model")
    assert container["image"] == prof.engine.image and "env" not in container and "envFrom" not in container
    assert "nvidia.com/gpu" not in str(container["resources"]) and "limits" not in container["resources"]
    assert container["args"] == ["/models/llama3-70b-instruct", "SHA256SUMS", "1", "/var/cache/deployctl-compile"]
    assert pod["metadata"]["labels"] == {
        "deployctl.dev/warmup": "llama3-70b",
        "app.kubernetes.io/managed-by": "deployctl",
    }
    assert "deployctl.dev/release" not in pod["metadata"]["labels"]  # no selector of the release matches it
    assert pod["metadata"]["name"] == warmup_pods.pod_name("llama3-70b", "gpu-a100-0")
    assert len(warmup_pods.pod_name("x" * 63, "n")) <= 63


def _run_script(model: pathlib.Path, manifest: str = "", digest: bool = True, cache: str = "") -> str:
    argv = [sys.executable, "-c", warmup_pods.SCRIPT, str(model), manifest, "1" if digest else "0", cache]
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


def _succeeded() -> dict[str, Any]:
    return {"status": {"phase": "Succeeded"}}


def test_the_script_reads_every_file_hashes_it_and_the_signature_verifies(tmp_path: pathlib.Path) -> None:
    model = pathlib.Path(shutil.copytree(SIGNED / "model", tmp_path / "model"))
    (model / ".git").mkdir()
    (model / ".git" / "pack").write_bytes(b"x" * 100)  # skipped: a clone's blobs are not the model
    log = _run_script(model, "model.sig", cache=str(tmp_path))
    result = warmup_pods.judge(_profile({"signature": "model.sig", "publicKey": KEY}), "n1", _succeeded(), log)
    assert result.state == "done" and result.files == 4 and result.cache_error is None
    assert result.bytes == sum(p.stat().st_size for p in model.rglob("*") if p.is_file() and ".git" not in p.parts)
    assert result.check is not None and result.check.verified and result.check.signer
    assert result.check.manifest_sha256 == hashlib.sha256((model / "model.sig").read_bytes()).hexdigest()


def test_a_changed_or_added_file_is_a_mismatch_that_always_stops(tmp_path: pathlib.Path) -> None:
    model = pathlib.Path(shutil.copytree(SIGNED / "model", tmp_path / "model"))
    (model / "extra.safetensors").write_bytes(b"an unlisted shard vLLM would load")
    prof = _profile({"signature": "model.sig", "publicKey": KEY}, onFailure="continue")
    result = warmup_pods.judge(prof, "n1", _succeeded(), _run_script(model, "model.sig"))
    assert result.check is not None and not result.check.verified
    assert "extra.safetensors" in " ".join(result.check.problems)
    stop, warnings = warmup.Warmup(None, prof, {"n1": "p"}, 0.0, results={"n1": result}).failure()  # type: ignore[arg-type]
    assert stop is not None and stop.cls == "weights_mismatch" and warnings == []
    assert "node n1" in stop.message and "No GPU pod was started" in stop.message


def test_a_cache_the_pod_cannot_write_stops_with_the_install_command(tmp_path: pathlib.Path) -> None:
    doc = _profile().model_dump(mode="json", by_alias=True)
    doc["engine"]["compileCache"] = {"hostPath": "/var/lib/deployctl/compile-cache"}
    doc["engine"].pop("fsGroup")
    prof = profiles.Profile.model_validate(doc)
    log = _run_script(tmp_path, digest=False, cache=str(tmp_path / "missing"))
    (tmp_path / "w").write_text("weights")
    result = warmup_pods.judge(
        prof, "n1", _succeeded(), _run_script(tmp_path, digest=False, cache=str(tmp_path / "no"))
    )
    assert log and result.cache_error and "not writable by uid 1000" in result.cache_error
    stop, _ = warmup.Warmup(None, prof, {"n1": "p"}, 0.0, results={"n1": result}).failure()  # type: ignore[arg-type]
    assert stop is not None and stop.cls == "cache_not_writable"
    assert "install -d -o 1000 -g 1000 /var/lib/deployctl/compile-cache" in stop.message


@pytest.mark.parametrize(
    ("pod", "log", "state", "reason"),
    [
        (None, "", "failed", "deleted before it finished"),
        ({"status": {"phase": "Failed", "reason": "DeadlineExceeded"}}, "", "timed_out", "timeoutSeconds (900 s)"),
        (
            {"status": {"phase": "Failed", "containerStatuses": [{"state": {"terminated": {"exitCode": 137}}}]}},
            "",
            "failed",
            "exit code 137",
        ),
        (
            {"status": {"phase": "Pending", "containerStatuses": [{"state": {"waiting": {"reason": "ErrImagePull"}}}]}},
            "",
            "timed_out",
            "still Pending (ErrImagePull",
        ),
        ({"status": {"phase": "Succeeded"}}, "python3: not found\n", "failed", "no warm-up report"),
        (
            {"status": {"phase": "Succeeded"}},
            'deployctl-warmup: {"files": {}, "errors": ["no files under /m"]}',
            "failed",
            "no files",
        ),
    ],
    ids=["deleted", "deadline", "exit-code", "pull-error", "no-python", "empty-directory"],
)
def test_every_way_a_warmup_can_end_is_explained(pod: Any, log: str, state: str, reason: str) -> None:
    result = warmup_pods.judge(_profile(), "n1", pod, log)
    assert result.state == state and result.reason is not None and reason in result.reason, result


def test_a_failed_warmup_stops_or_only_warns_as_on_failure_says() -> None:
    failed = warmup_pods.NodeResult("n1", "failed", "its container ended with exit code 1 (Error)")
    stop, warnings = warmup.Warmup(None, _profile(), {"n1": "p"}, 0.0, results={"n1": failed}).failure()  # type: ignore[arg-type]
    assert stop is not None and stop.cls == "warmup_failed" and warnings == []
    going_on = _profile(onFailure="continue")
    stop, warnings = warmup.Warmup(None, going_on, {"n1": "p"}, 0.0, results={"n1": failed}).failure()  # type: ignore[arg-type]
    assert stop is None and "goes on unwarmed" in warnings[0] and "node n1" in warnings[0]


def test_the_record_keeps_the_warmup_beside_the_time_to_serving_not_in_it() -> None:
    warm = {
        "seconds": 4.2,
        "nodes": [{"node": "n1", "state": "done", "verification": {"verified": True, "manifest": "SHA256SUMS"}}],
    }
    served = time_to_serving.TimeToServing({"rollout": 10.0, "health": 2.0}, warmup=warm).to_json()
    assert served["seconds"] == 12.0 and served["warmup"] == warm
    assert "a warm-up of 1/1 node(s) in 4.2 s (weights verified against SHA256SUMS)" in time_to_serving.summary(served)
    stopped = time_to_serving.TimeToServing({}, warmup=warm).to_json()
    assert stopped["seconds"] is None and stopped["until"] is None  # nothing was served
    assert "warmup" not in time_to_serving.TimeToServing({"rollout": 1.0}).to_json()


def test_a_public_key_that_is_no_p256_or_ed25519_key_is_exit_2() -> None:
    warmup.check_public_key(_profile({"signature": "model.sig", "publicKey": KEY}))
    bad = _profile(
        {"signature": "model.sig", "publicKey": "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----"}
    )
    with pytest.raises(errors.InvalidProfile) as e:
        warmup.check_public_key(bad)
    assert "model.verify.publicKey" in e.value.message


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"rollout": {"warmup": {"enabled": False}}}, "set rollout.warmup.enabled: true"),
        ({"model": {"verify": {"sha256Manifest": "SHA256SUMS", "signature": "model.sig"}}}, "exactly one of"),
        ({"model": {"verify": {"signature": "model.sig"}}}, "signature and publicKey go together"),
        ({"model": {"verify": {"sha256Manifest": "/etc/SHA256SUMS"}}}, "relative to the weights directory"),
        ({"model": {"verify": {"sha256Manifest": "../SHA256SUMS"}}}, "relative to the weights directory"),
        ({"model": {"verify": {"signature": "model.sig", "publicKey": "ssh-ed25519 AAAA"}}}, "PEM public key"),
        ({"rollout": {"warmup": {"enabled": True, "timeoutSeconds": 5}}}, "greater than or equal to 30"),
    ],
    ids=["verify-without-warmup", "both", "no-key", "absolute", "dotdot", "not-pem", "short-timeout"],
)
def test_a_bad_warmup_or_verify_section_is_refused_by_name(change: dict[str, Any], message: str) -> None:
    doc = yaml.safe_load((ROOT / "profiles" / "prod-tp4.yaml").read_text())
    doc["model"]["verify"] = {"sha256Manifest": "SHA256SUMS"}
    doc["rollout"]["warmup"] = {"enabled": True}
    for section, values in change.items():
        doc[section] = {**doc[section], **copy.deepcopy(values)}
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        profiles.Profile.model_validate(doc)


def test_without_the_sections_the_profile_hash_of_older_profiles_holds() -> None:
    doc = yaml.safe_load((ROOT / "profiles" / "prod-tp4.yaml").read_text())
    dumped = profiles.Profile.model_validate(doc).model_dump(mode="json")
    assert "warmup" not in dumped["rollout"] and "verify" not in dumped["model"]


def _warm(prof: profiles.Profile, **results: warmup_pods.NodeResult) -> warmup.Warmup:
    return warmup.Warmup(None, prof, {n: f"p-{n}" for n in results}, 0.0, results=dict(results))  # type: ignore[arg-type]


def _verified(node: str, ok: bool = True) -> warmup_pods.NodeResult:
    check = model_manifest.check_sha256(
        b"%s  a\n" % (("0" * 64) if ok else ("1" * 64)).encode(), {"a": "0" * 64}, name="SHA256SUMS"
    )
    return warmup_pods.NodeResult(node, "done", None, 1.0, 10, 1, None, check)


def test_under_verify_any_failed_warmup_stops_whatever_on_failure_says() -> None:
    prof = _profile({"sha256Manifest": "SHA256SUMS"}, onFailure="continue")
    failed = warmup_pods.NodeResult("n2", "timed_out", "it was still Pending (ErrImagePull: …), past its deadline")
    stop, _ = _warm(prof, n1=_verified("n1"), n2=failed).failure()
    assert stop is not None and stop.cls == "warmup_failed" and "model.verify needs every node checked" in stop.message
    stop, _ = warmup.Warmup(None, prof, {}, 0.0).failure()  # type: ignore[arg-type]
    assert stop is not None and "could check the weights nowhere" in stop.message


def test_after_the_first_write_only_the_nodes_with_new_pods_count_and_must_be_verified() -> None:
    prof = _profile({"sha256Manifest": "SHA256SUMS"})
    failed = warmup_pods.NodeResult("spare", "failed", "its container ended with exit code 1 (Error)")
    stop, warnings = _warm(prof, n1=_verified("n1"), spare=failed).failure(new_pods={"n1"})
    assert stop is None and warnings == []  # the spare node got no new pod
    stop, _ = _warm(prof, n1=_verified("n1")).failure(new_pods={"n1", "late-node"})
    assert stop is not None and stop.cls == "weights_unverified" and "late-node" in stop.message
    stop, _ = _warm(prof, n1=_verified("n1", ok=False)).failure(new_pods={"n1"})
    assert stop is not None and stop.cls == "weights_mismatch" and "GPU pods started from them" in stop.message
    plain = _profile()
    stop, warnings = _warm(plain, n1=warmup_pods.NodeResult("n1", "failed", "x")).failure(new_pods={"n1"})
    assert stop is None and "goes on unwarmed" in warnings[0]  # the revision already passed its gate


def test_a_file_the_pod_could_not_read_is_a_read_error_not_tampering() -> None:
    report = '{"files": {"a": null}, "errors": ["cannot read b.safetensors: Permission denied"], "manifest": null}'
    result = warmup_pods.judge(_profile({"sha256Manifest": "SHA256SUMS"}), "n1", _succeeded(), REPORT + report)
    assert result.state == "failed" and result.check is None and "Permission denied" in (result.reason or "")


@pytest.mark.parametrize(
    "report",
    [
        '{"errors": 5, "files": {}}',
        '{"files": {"a": 1}, "bytes": -4, "seconds": NaN}',
        "[" * 100_000 + "]" * 100_000,
        '{"errors": ["\\u001b[31mred\\ndone\\udce9"], "cache": {"writable": false, "path": 7}}',
    ],
    ids=["errors-not-a-list", "bad-numbers", "deeply-nested", "control-characters"],
)
def test_a_garbled_or_hostile_report_never_raises_and_nothing_raw_reaches_a_message(report: str) -> None:
    result = warmup_pods.judge(_profile(), "n1", _succeeded(), REPORT + report)
    text = f"{result.reason} {result.cache_error} {result.seconds} {result.bytes}"
    assert "\x1b" not in text and "\n" not in text
    assert result.seconds is None or result.seconds >= 0
    assert result.bytes is None or result.bytes >= 0


def test_the_pod_keeps_the_engines_sandbox_and_apparmor_but_no_sidecar() -> None:
    doc = _profile().model_dump(mode="json", by_alias=True)
    doc["placement"]["runtimeClassName"] = "gvisor"
    doc["placement"]["podAnnotations"] = {"container.apparmor.security.beta.kubernetes.io/vllm": "localhost/llm"}
    prof = profiles.Profile.model_validate(doc)
    template = warmup_pods.pod_template(render.render(prof, planner.plan(prof)))
    engine = template["spec"]["containers"][0]["name"]
    doc["placement"]["podAnnotations"] = {f"container.apparmor.security.beta.kubernetes.io/{engine}": "localhost/llm"}
    prof = profiles.Profile.model_validate(doc)
    pod = _pod(prof)
    assert pod["spec"]["runtimeClassName"] == "gvisor"
    annotations = pod["metadata"]["annotations"]
    assert annotations["container.apparmor.security.beta.kubernetes.io/warmup"] == "localhost/llm"
    assert annotations["sidecar.istio.io/inject"] == "false" and annotations["linkerd.io/inject"] == "disabled"
    policy = warmup_pods.network_policy(prof)
    assert policy["spec"] == {
        "podSelector": {"matchLabels": {"deployctl.dev/warmup": "llama3-70b"}},
        "policyTypes": ["Ingress", "Egress"],
    }  # no rule: nothing in, nothing out


def test_two_releases_sharing_a_long_prefix_never_share_a_warmup_pod() -> None:
    a, b = "x" * 45 + "-a", "x" * 45 + "-b"
    assert warmup_pods.pod_name(a, "n1") != warmup_pods.pod_name(b, "n1")


def test_a_sidecar_that_keeps_the_pod_running_does_not_hide_the_warmups_end() -> None:
    pod = {
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {"name": "istio-proxy", "state": {"running": {}}},
                {"name": "warmup", "state": {"terminated": {"exitCode": 0}}},
            ],
        }
    }
    assert warmup_pods.ended(pod) == "Succeeded"


def test_events_that_say_a_volume_will_never_mount_end_the_wait_with_the_reason() -> None:
    attach = [
        {"reason": "FailedAttachVolume", "message": 'Multi-Attach error for volume "pvc-1" Volume is already used'}
    ]
    judged = warmup_pods.volume_trouble(attach, None)
    assert judged is not None and "ReadWriteOnce" in (judged("n1").reason or "")
    missing = [{"reason": "FailedMount", "message": "hostPath type check failed: /var/lib/cc is not a directory"}]
    cache = warmup_pods.volume_trouble(missing, "/var/lib/cc")
    assert cache is not None and cache("n1").cache_error is not None
    weights = warmup_pods.volume_trouble(missing, None)
    assert weights is not None and weights("n1").cache_error is None
    assert warmup_pods.volume_trouble([{"reason": "FailedMount", "message": "timed out, retrying"}], None) is None
