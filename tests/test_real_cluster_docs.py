"""docs/real-cluster.md holds together, and its loader works, without a cluster.

e2e/test_real_cluster_guide.py runs the page's blocks on the local control plane; what it cannot
check is here: that the profile the page ends with is the one its steps built (every profile
fragment it shows is in it, and it names the claim and Secrets the steps made), that the loader
Job and the Argo CD gate Job of docs/gitops.md meet Pod Security `restricted` field by field, and
that the loader's script resumes an interrupted download and refetches a corrupt one (run here
with wget against a range-serving HTTP server on 127.0.0.1, since no container runs under kwok).
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import docblocks
import pytest
import yaml
from click.testing import CliRunner

from orchestrator.cli import app as cli

GUIDE = docblocks.DOCS / "real-cluster.md"
BLOCKS = docblocks.blocks(GUIDE)


def _saved(name: str) -> Any:
    found = [b for b in BLOCKS if b.file == name]
    assert len(found) == 1, f"docs/real-cluster.md saves {name} {len(found)} times"
    return yaml.safe_load(found[0].text)


def _bash() -> str:
    return "\n".join(b.text for b in BLOCKS if b.lang == "bash" and not b.illustrative)


PROFILE = _saved("llama3-70b.yaml")
CLAIM = _saved("weights-claim.yaml")
LOADER = _saved("weights-loader.yaml")


def _contains(whole: Any, part: Any) -> bool:
    if isinstance(part, dict):
        return isinstance(whole, dict) and all(k in whole and _contains(whole[k], v) for k, v in part.items())
    return bool(whole == part)


def test_every_block_of_the_guide_is_run_saved_or_marked_illustrative() -> None:
    problems = []
    for block in BLOCKS:
        where = f"docs/real-cluster.md:{block.line}"
        if block.marker and not (block.file or block.illustrative):
            problems.append(f"{where}: unknown marker {block.marker!r}")
        if block.lang in ("yaml", "yml") and not (block.file or block.illustrative):
            doc = yaml.safe_load(block.text)
            if "kind" in doc:
                problems.append(f"{where}: a whole object that is neither saved (file=) nor illustrative")
        if block.file and not re.search(rf"(-f |deployctl \w+ ){re.escape(block.file)}\b", _bash()):
            problems.append(f"{where}: {block.file} is saved but no command uses it")
    assert not problems, "\n".join(problems)


def test_every_profile_fragment_the_guide_shows_is_in_the_profile_it_ends_with() -> None:
    fragments = [
        (b.line, yaml.safe_load(b.text))
        for b in BLOCKS
        if b.lang == "yaml" and not b.file and not b.illustrative and "kind" not in b.text
    ]
    assert len(fragments) >= 3, "the guide's profile fragments were not found"
    missing = [f"line {line}: {doc}" for line, doc in fragments if not _contains(PROFILE, doc)]
    assert not missing, "the final profile lacks what earlier steps added:\n" + "\n".join(missing)


def test_the_final_profile_names_what_the_earlier_steps_created() -> None:
    bash = _bash()
    assert PROFILE["model"]["source"]["pvc"] == CLAIM["metadata"]["name"]
    assert "kubectl apply -f weights-claim.yaml" in bash
    for secret in PROFILE["engine"]["imagePullSecrets"]:
        assert re.search(rf"create secret docker-registry {secret}\b", bash), secret
    key = PROFILE["gate"]["apiKeySecret"]["name"]
    assert re.search(rf"create secret generic {key}\b", bash)
    assert PROFILE["engine"]["env"][0]["valueFrom"]["secretKeyRef"]["name"] == key
    namespaces = {PROFILE["metadata"]["namespace"], CLAIM["metadata"]["namespace"], LOADER["metadata"]["namespace"]}
    assert namespaces == {"inference"} and "kubectl create namespace inference" in bash
    # The loader fills the directory the pods read, through the claim they mount.
    pod = LOADER["spec"]["template"]["spec"]
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    mount = pod["containers"][0]["volumeMounts"][0]
    assert pod["volumes"][0]["persistentVolumeClaim"] == {"claimName": CLAIM["metadata"]["name"]}
    assert env["DEST"] == PROFILE["model"]["source"]["path"] and env["DEST"].startswith(mount["mountPath"] + "/")
    assert not mount.get("readOnly")


def test_the_final_profile_renders_and_mounts_the_claim_read_only(tmp_path: Path) -> None:
    path = tmp_path / "llama3-70b.yaml"
    path.write_text(next(b for b in BLOCKS if b.file == "llama3-70b.yaml").text)
    result = CliRunner().invoke(cli.main, ["render", str(path), "-o", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    objects = json.loads(result.stdout)["items"]
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    spec = deployment["spec"]["template"]["spec"]
    claim = next(v for v in spec["volumes"] if "persistentVolumeClaim" in v)
    assert claim["persistentVolumeClaim"] == {"claimName": CLAIM["metadata"]["name"], "readOnly": True}
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    # The loader writes as the uid and gid the serving pods run as, so they can read its files.
    loader = LOADER["spec"]["template"]["spec"]["securityContext"]
    serving = spec["securityContext"]
    assert (loader["runAsUser"], loader["runAsGroup"]) == (serving["runAsUser"], serving["runAsGroup"])
    assert loader["fsGroup"] == PROFILE["engine"]["fsGroup"]


def restricted_problems(pod: dict[str, Any]) -> list[str]:
    """What Pod Security `restricted` refuses in a pod spec (the checks that concern these Jobs)."""
    problems = []
    security = pod.get("securityContext") or {}
    allowed_volumes = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim"}
    allowed_volumes |= {"projected", "secret"}
    for volume in pod.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= allowed_volumes:
            problems.append(f"volume {volume['name']}: {sorted(kinds)}")
    for container in [*pod.get("initContainers", []), *pod["containers"]]:
        own = container.get("securityContext") or {}
        name = container["name"]
        if own.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{name}: allowPrivilegeEscalation must be false")
        if (own.get("capabilities") or {}).get("drop") != ["ALL"]:
            problems.append(f"{name}: capabilities must drop ALL")
        if not own.get("runAsNonRoot", security.get("runAsNonRoot")):
            problems.append(f"{name}: runAsNonRoot must be true")
        if own.get("runAsUser", security.get("runAsUser")) == 0:
            problems.append(f"{name}: runs as uid 0")
        seccomp = (own.get("seccompProfile") or security.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{name}: seccompProfile must be RuntimeDefault")
    return problems


def test_restricted_check_catches_a_root_pod() -> None:
    assert len(restricted_problems({"containers": [{"name": "c"}], "volumes": [{"name": "h", "hostPath": {}}]})) == 5


def test_the_loader_job_meets_pod_security_restricted() -> None:
    assert restricted_problems(LOADER["spec"]["template"]["spec"]) == []


def _argocd_gate_job() -> dict[str, Any]:
    for block in docblocks.blocks(docblocks.DOCS / "gitops.md"):
        if block.lang == "yaml" and "argocd.argoproj.io/hook: PostSync" in block.text:
            doc: dict[str, Any] = yaml.safe_load(block.text)
            return doc
    raise AssertionError("docs/gitops.md shows no Argo CD PostSync Job")


def test_the_argocd_gate_job_meets_pod_security_restricted() -> None:
    job = _argocd_gate_job()
    assert job["kind"] == "Job"
    assert restricted_problems(job["spec"]["template"]["spec"]) == []


# --- the loader's script, run ---------------------------------------------------------------


class _RangeHandler(http.server.SimpleHTTPRequestHandler):
    """Serves a directory with range requests (as nginx does), and can cut a response short."""

    cut_after: ClassVar[dict[str, int]] = {}
    requests: ClassVar[list[tuple[str, str | None]]] = []

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.requests.append((self.path, self.headers.get("Range")))
        path = Path(self.translate_path(self.path))
        if not path.is_file():
            self.send_error(404)
            return
        data = path.read_bytes()
        start = 0
        if found := re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or ""):
            start = int(found.group(1))
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(data) - start))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        body = data[start:]
        cut = self.cut_after.pop(self.path.rsplit("/", 1)[-1], None)
        self.wfile.write(body if cut is None else body[:cut])
        if cut is not None:
            self.close_connection = True
            self.wfile.flush()
            self.connection.shutdown(2)


@pytest.fixture
def weights_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """(URL of the model directory, the directory) on a server on 127.0.0.1."""
    source = tmp_path / "served" / "llama3-70b"
    (source / "tokenizer").mkdir(parents=True)
    (source / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    (source / "model-00001-of-00002.safetensors").write_bytes(os.urandom(300_000))
    (source / "model-00002-of-00002.safetensors").write_bytes(os.urandom(200_000))
    (source / "tokenizer" / "tokenizer.json").write_text("{}")
    (source / ".cache").mkdir()
    (source / ".cache" / "download.lock").write_text("the download tool's own")
    manifest = next(b for b in BLOCKS if any("SHA256SUMS" in line and "find" in line for line in b.lines))
    subprocess.run(["bash", "-c", "set -euo pipefail\n" + manifest.text], cwd=source.parent, check=True)
    _RangeHandler.requests = []
    handler = lambda *a: _RangeHandler(*a, directory=str(tmp_path / "served"))  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/llama3-70b", source
    server.shutdown()
    server.server_close()


def run_loader(url: str, dest: Path) -> subprocess.CompletedProcess[str]:
    """The loader Job's command, as its container runs it, with its DEST and SOURCE_URL.

    busybox's wget (the image's) gives up on a dropped connection; GNU wget would retry within
    the same run, so a wgetrc tells it to try once, and the Job's next try is what resumes.
    """
    command = LOADER["spec"]["template"]["spec"]["containers"][0]["command"]
    wgetrc = dest.parent.parent / "wgetrc"
    wgetrc.write_text("tries = 1\n")
    return subprocess.run(
        command,
        env={"PATH": os.environ["PATH"], "SOURCE_URL": url, "DEST": str(dest), "WGETRC": str(wgetrc)},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.skipif(shutil.which("wget") is None, reason="the loader's script needs wget (busybox's in the image)")
def test_the_loader_resumes_an_interrupted_download_and_refetches_a_corrupt_one(
    weights_server: tuple[str, Path], tmp_path: Path
) -> None:
    url, source = weights_server
    dest = tmp_path / "claim" / "llama3-70b"
    listed = (source / "SHA256SUMS").read_text().splitlines()
    assert len(listed) == 4 and not any(".cache" in line for line in listed), "hidden files are left out"

    # The connection drops 100 kB into the first shard: that try fails, after config.json is verified.
    _RangeHandler.cut_after["model-00001-of-00002.safetensors"] = 100_000
    first = run_loader(url, dest)
    assert first.returncode != 0 and "verified config.json" in first.stdout, first.stdout + first.stderr
    partial = dest / "model-00001-of-00002.safetensors.part"
    assert 0 < partial.stat().st_size < 300_000

    # The next try asks only for the rest of that shard, and never again for config.json.
    size = partial.stat().st_size
    _RangeHandler.requests.clear()
    second = run_loader(url, dest)
    assert second.returncode == 0, second.stdout + second.stderr
    assert second.stdout.strip().splitlines()[-1] == "all 4 files verified"
    asked = dict(_RangeHandler.requests)
    assert asked["/llama3-70b/model-00001-of-00002.safetensors"] == f"bytes={size}-"
    assert "/llama3-70b/config.json" not in asked
    for line in listed:
        name = line.split(maxsplit=1)[1]
        assert (dest / name).read_bytes() == (source / name).read_bytes()
    assert not list(dest.rglob("*.part"))

    # A third run fetches nothing but the list: a check of the claim costs no copy.
    _RangeHandler.requests.clear()
    assert run_loader(url, dest).returncode == 0
    assert [p for p, _ in _RangeHandler.requests] == ["/llama3-70b/SHA256SUMS"]

    # A corrupt download is deleted, the try fails, and the next one fetches the file anew.
    (dest / ".verified").write_text("")
    (dest / "config.json").unlink()
    (source / "config.json").write_text('{"architectures": ["tampered"]}')
    corrupt = run_loader(url, dest)
    assert corrupt.returncode != 0 and "checksum mismatch: config.json" in corrupt.stderr
    assert not (dest / "config.json.part").exists() and not (dest / "config.json").exists()
