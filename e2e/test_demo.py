"""The newcomer's path: `make demo` tells its story on the local cluster, and the pages show what it prints.

The demo (e2e/demo.py) runs once per module, on the session's cluster (it reuses a running cluster
and leaves it running, removing only its namespace), bounded by DEMO_TIMEOUT_S. Its transcript is
then the reference for every cluster command whose output a page shows in a console block.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import deployhelpers
import kubernetes
import localcluster
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import docblocks  # noqa: E402

DEMO_TIMEOUT_S = 480  # about a minute when built; the rest is headroom for a loaded machine


@dataclass
class DemoRun:
    code: int
    output: str
    transcript: str
    directory: Path


@pytest.fixture(scope="module")
def demo(
    cluster: localcluster.Cluster, api_client: kubernetes.client.ApiClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DemoRun]:
    if cluster.state_dir is None:
        pytest.skip("the demo needs the local cluster (its simulators listen on this machine); E2E_KUBECONFIG is set")
    deployhelpers.wait_for_settled_namespaces(api_client)  # its smoke gates judge latency
    directory = tmp_path_factory.mktemp("demo")
    env = {**os.environ, "E2E_CLUSTER_STATE_DIR": str(cluster.state_dir), "DEMO_DIR": str(directory)}
    env.pop("DEMO_KEEP_CLUSTER", None)
    try:
        proc = subprocess.run(
            [sys.executable, str(ROOT / "e2e" / "demo.py")],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=DEMO_TIMEOUT_S,
            env=env,
        )
    except subprocess.TimeoutExpired as e:  # subprocess.run has killed it; its teardown did not run
        pytest.fail(f"the demo ran past {DEMO_TIMEOUT_S} s:\n{(e.output or b'')[-4000:]!r}")
    transcript = directory / "demo.log"
    yield DemoRun(proc.returncode, proc.stdout, transcript.read_text() if transcript.exists() else "", directory)


@pytest.mark.kwok
def test_demo_behaves_as_narrated(demo: DemoRun) -> None:
    assert demo.code == 0, demo.output[-6000:]
    for line in (
        "verdict: FITS",
        "DEPLOYED: revision 1 of llama3-70b is deployed (install)",
        "DEPLOYED: revision 2 of llama3-70b is deployed (upgrade from revision 1)",
        "ROLLED_BACK: revision 3 failed (slo_failed) and was rolled back to revision 2 (now revision 4)",
        "REFUSED: No node can ever host a replica of llama3-70b: it needs 8 GPUs",
        "DEPLOYED: revision 5 of llama3-70b is live: rollback to 1",
        "OK: 5 records, chain intact",
        "steps behaved as narrated",
        "Everything the demo started has been stopped.",
    ):
        assert line in demo.output, f"the demo did not print {line!r}:\n{demo.output[-6000:]}"
    assert demo.transcript and demo.transcript in demo.output, "demo.log is not the transcript of what was shown"
    assert (demo.directory / "audit-export.json").exists()


@pytest.mark.kwok
def test_demo_leaves_no_simulator_and_no_namespace_behind(
    demo: DemoRun, api_client: kubernetes.client.ApiClient
) -> None:
    assert demo.code == 0, demo.output[-6000:]
    for log in sorted(demo.directory.glob("sim-*.log")):
        port = int(log.read_text().split("listening on", 1)[1].split()[0].rsplit(":", 1)[1])
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, f"the simulator of {log.name} still listens on {port}"
    names = {n.metadata.name for n in kubernetes.client.CoreV1Api(api_client).list_namespace().items}
    assert "inference" not in names


@pytest.mark.kwok
@pytest.mark.parametrize(
    "command",
    [c for page in docblocks.pages() for c in docblocks.commands(page) if c.output and not c.offline],
    ids=lambda c: c.where,
)
def test_cluster_output_shown_in_the_docs_is_what_the_demo_prints(demo: DemoRun, command: docblocks.Command) -> None:
    assert demo.code == 0, demo.output[-6000:]
    runs = docblocks.transcript_commands(demo.transcript).get(" ".join(command.words))
    assert runs, f"{command.where}: the demo never runs `{command.text}`; show output the demo prints"
    problems = [docblocks.mismatch(command.output, run, docblocks.volatile) for run in runs]
    assert None in problems, f"{command.where}: `{command.text}`: {problems[-1]}"


@pytest.mark.parametrize(
    "command",
    [c for c in docblocks.commands(ROOT / "README.md") if c.offline],
    ids=lambda c: c.where,
)
def test_readme_offline_commands_run(command: docblocks.Command, tmp_path: Path) -> None:
    result = docblocks.run_offline(command, tmp_path)
    assert result.returncode == command.expected_exit, result.stdout
    if command.output:
        assert docblocks.mismatch(command.output, result.stdout.splitlines()) is None
