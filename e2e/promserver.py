"""A real Prometheus on loopback, scraping the targets a test names.

The server is built by e2e/cluster/build.sh from github.com/prometheus/prometheus (the module that
also gives promtool), and started with no UI assets, which the HTTP API does not need. Targets come
from file service discovery, so a test can add the pods a rollout creates while it runs: each
target is an address with the labels the Prometheus Operator would give the PodMonitor's series
(``namespace``, ``pod``, and the pod labels it copies, such as ``deployctl_dev_release``).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BINARY = ROOT / ".cache" / "bin" / "prometheus"
HOST = "127.0.0.1"


class Prometheus:
    """``with Prometheus(workdir, scrape_interval="1s") as prom:`` then ``prom.scrape([...])``."""

    def __init__(self, workdir: Path, scrape_interval: str = "1s", bearer: str | None = None) -> None:
        self.workdir, self.scrape_interval, self.bearer = workdir, scrape_interval, bearer
        self.port = _free_port()
        self.targets_file = workdir / "targets.json"
        self.log = workdir / "prometheus.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def __enter__(self) -> Prometheus:
        if not BINARY.exists():
            raise RuntimeError(f"{BINARY} is missing: run `make build` (e2e/cluster/build.sh prometheus)")
        self.scrape([])
        job: dict[str, Any] = {
            "job_name": "pods",
            "scrape_interval": self.scrape_interval,
            "scrape_timeout": self.scrape_interval,
            "file_sd_configs": [{"files": [str(self.targets_file)], "refresh_interval": "1s"}],
        }
        if self.bearer:
            job["authorization"] = {"credentials": self.bearer}
        config = self.workdir / "prometheus.yml"
        config.write_text(json.dumps({"global": {"scrape_interval": self.scrape_interval}, "scrape_configs": [job]}))
        argv = [
            str(BINARY),
            f"--config.file={config}",
            f"--storage.tsdb.path={self.workdir / 'data'}",
            f"--web.listen-address={HOST}:{self.port}",
        ]
        with self.log.open("wb") as log:
            self._proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self._wait_ready(60)
        except BaseException:
            self.__exit__()  # never left running when it did not come up
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()

    def scrape(self, targets: Sequence[tuple[int, Mapping[str, str]]]) -> None:
        """Scrape these (port on loopback, target labels) from now on; written whole, then renamed,
        so Prometheus never reads half a file."""
        groups = [{"targets": [f"{HOST}:{port}"], "labels": dict(labels)} for port, labels in targets]
        partial = self.targets_file.with_suffix(".tmp")
        partial.write_text(json.dumps(groups))
        os.replace(partial, self.targets_file)

    def query(self, promql: str) -> list[dict[str, Any]]:
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=10) as answer:
            result: list[dict[str, Any]] = json.loads(answer.read())["data"]["result"]
        return result

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise RuntimeError(f"prometheus exited {self._proc.returncode}: {self.log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"prometheus not ready after {timeout_s:.0f} s: {self.log.read_text()[-2000:]}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port
