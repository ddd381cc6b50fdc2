"""Run deployctl's local test cluster: a real control plane with kwok-simulated GPU nodes.

    python e2e/cluster/localcluster.py up       # start, or reuse a healthy running cluster
    python e2e/cluster/localcluster.py status   # exit 0 when healthy
    python e2e/cluster/localcluster.py down     # stop every process, wipe the etcd data

etcd, kube-apiserver, kube-controller-manager and kube-scheduler are the upstream binaries
that e2e/cluster/build.sh builds into .cache/bin, as are KubeRay's ray-operator and Flux's
source-controller and kustomize-controller (their CRDs come from their Go modules); kwok
plays the kubelet of the nodes in nodes.yaml, driven by the stage files of its own Go module
plus sim-stages.yaml. Everything listens on 127.0.0.1 only. State (PKI, kubeconfigs, etcd
data, Flux's artifacts, pids) lives under the state directory, default .cache/cluster;
component logs under its logs/ and are kept after a failure (the previous run's move to
logs.prev/). The admin kubeconfig is <state>/kubeconfig.

Ports are fixed so a reused cluster is found again, and chosen outside the usual defaults and
the Linux ephemeral range; override them with DEPLOYCTL_CLUSTER_{ETCD,ETCD_PEER,APISERVER,
KWOK,CONTROLLER_MANAGER,SCHEDULER,RAY_OPERATOR_METRICS,RAY_OPERATOR_PROBE,
SOURCE_CONTROLLER_METRICS,SOURCE_CONTROLLER_HEALTH,SOURCE_CONTROLLER_STORAGE,
KUSTOMIZE_CONTROLLER_METRICS,KUSTOMIZE_CONTROLLER_HEALTH}_PORT.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import logging
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import bootstrap
import components
import pki

# Re-exported for callers of this module: the error it raises, where the binaries are.
ClusterError = components.ClusterError
BIN_DIR = components.BIN_DIR
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 10.0
# Flux's controllers: they read their kubeconfig from KUBECONFIG (components.flux_env).
FLUX = ("source-controller", "kustomize-controller")

log = logging.getLogger("localcluster")


@dataclass(frozen=True)
class Cluster:
    """A cluster the e2e tests talk to. state_dir is None for one this module did not start."""

    kubeconfig: Path
    state_dir: Path | None = None

    @property
    def logs_dir(self) -> Path | None:
        return self.state_dir / "logs" if self.state_dir else None


def up(state_dir: str | Path = ".cache/cluster") -> Cluster:
    """Start the cluster, or return the running one when it is healthy.

    A recorded cluster that is unhealthy (a process died, ports changed, or it was started
    by an older version of this module without one of components.COMPONENTS) is stopped and
    started afresh, with empty etcd data. Returns once every node is Ready and schedulable.
    """
    layout = components.Layout(_resolve(state_dir))
    layout.state.mkdir(parents=True, exist_ok=True)
    ports = components.Ports.from_env()
    with _locked(layout):
        state = _read_state(layout)
        if state and state["ports"] == asdict(ports):
            api = bootstrap.Api(layout, ports)
            if not _problems(state, api):
                # Re-applied so edits to nodes.yaml or the stage files take effect on reuse.
                bootstrap.apply_simulation(api, bootstrap.kwok_module_dir())
                log.info("reusing the running cluster (kubeconfig %s)", layout.kubeconfig)
                return Cluster(layout.kubeconfig, layout.state)
        if state:
            log.info("stopping the previous cluster: it is not healthy or its ports changed")
            _stop(layout, state)
        return _start(layout, ports)


def down(state_dir: str | Path = ".cache/cluster") -> None:
    """Stop every process of the cluster and wipe its etcd data; PKI and logs stay."""
    layout = components.Layout(_resolve(state_dir))
    if not layout.state.exists():
        return
    with _locked(layout):
        state = _read_state(layout)
        if state:
            _stop(layout, state)


def status(state_dir: str | Path = ".cache/cluster") -> list[str]:
    """What is wrong with the recorded cluster; empty when it is up and healthy."""
    layout = components.Layout(_resolve(state_dir))
    state = _read_state(layout)
    if not state:
        return [f"no cluster recorded in {layout.state}"]
    return _problems(state, bootstrap.Api(layout, components.Ports(**state["ports"])))


# --- fault injection ----------------------------------------------------------------------

# Components a fault test may stop and start again while the rest keep running. etcd holds
# the data (a restart would need the same data dir and gains nothing), and kwok's simulated
# pods would lose their state.
RESTARTABLE = (
    *("kube-apiserver", "kube-controller-manager", "kube-scheduler", "ray-operator"),
    *("source-controller", "kustomize-controller"),
)


def stop_component(name: str, state_dir: str | Path = ".cache/cluster", *, crash: bool = False) -> None:
    """Stop one component of the running cluster, leaving the rest up.

    For fault tests: an API server restarted mid-watch, a controller-manager that is down.
    By default as `down` stops it (SIGTERM, SIGKILL after STOP_TIMEOUT_S; kube-apiserver drains
    for those 10 s); with `crash`, SIGKILL at once, as the OOM killer would. `start_component`
    brings it back; `up` also restarts it (the cluster counts as unhealthy).
    """
    layout, state = _running(name, state_dir)
    bin_dir = Path(state["bin_dir"])
    with _locked(layout):
        pid = state["processes"].get(name, -1)
        if crash and _alive(pid, str(bin_dir / name)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        _terminate({name: pid}, bin_dir)  # waits for the process to be gone either way
        log.info("stopped %s", name)


def start_component(name: str, state_dir: str | Path = ".cache/cluster") -> None:
    """Start a component `stop_component` stopped, with its original flags; wait until it is healthy."""
    layout, state = _running(name, state_dir)
    ports = components.Ports(**state["ports"])
    with _locked(layout):
        procs: dict[str, int] = dict(state["processes"])
        if _alive(procs.get(name, -1), str(Path(state["bin_dir"]) / name)):
            return
        certs = layout.pki  # as generated by `up`; regenerating would invalidate every kubeconfig
        argv = {
            "kube-apiserver": lambda: components.apiserver_args(layout, certs, ports),
            "kube-controller-manager": lambda: components.controller_manager_args(layout, certs, ports),
            "kube-scheduler": lambda: components.scheduler_args(layout, ports),
            "ray-operator": lambda: components.ray_operator_args(layout, ports),
            "source-controller": lambda: components.source_controller_args(layout, ports),
            "kustomize-controller": lambda: components.kustomize_controller_args(layout, ports),
        }[name]()
        env = components.flux_env(layout, name) if name in FLUX else None
        procs[name] = _spawn(layout, name, argv, env)
        _write_state(layout, ports, procs)
        ready = {
            "kube-apiserver": lambda: bootstrap.Api(layout, ports).ok("/readyz"),
            "kube-controller-manager": lambda: _healthz(ports.controller_manager),
            "kube-scheduler": lambda: _healthz(ports.scheduler),
            "ray-operator": lambda: _ray_operator_ready(ports),
            "source-controller": lambda: _source_controller_ready(ports),
            "kustomize-controller": lambda: _kustomize_controller_ready(ports),
        }[name]
        _wait(name, ready, layout, {name: procs[name]})


def _running(name: str, state_dir: str | Path) -> tuple[components.Layout, dict[str, Any]]:
    if name not in RESTARTABLE:
        raise ClusterError(f"{name} cannot be stopped on its own; restartable: {', '.join(RESTARTABLE)}")
    layout = components.Layout(_resolve(state_dir))
    state = _read_state(layout)
    if not state:
        raise ClusterError(f"no cluster recorded in {layout.state}; run `up` first")
    return layout, state


# --- starting -----------------------------------------------------------------------------


def _start(layout: components.Layout, ports: components.Ports) -> Cluster:
    t0 = time.monotonic()
    _build()
    _check_ports_free(ports)
    if layout.logs.exists():
        shutil.rmtree(layout.state / "logs.prev", ignore_errors=True)
        layout.logs.rename(layout.state / "logs.prev")
    layout.logs.mkdir()
    shutil.rmtree(layout.etcd_data, ignore_errors=True)
    certs = pki.ensure(layout.pki.dir)
    components.write_kubeconfigs(layout, certs, ports)
    components.write_kwok_config(layout, certs, ports)
    kwok_module, kuberay_module = bootstrap.kwok_module_dir(), bootstrap.kuberay_module_dir()
    flux_modules = bootstrap.flux_module_dirs()
    # Artifacts of a previous cluster's sources: their objects went with its etcd data.
    shutil.rmtree(layout.flux_storage, ignore_errors=True)
    layout.flux_storage.mkdir()
    api = bootstrap.Api(layout, ports)
    procs: dict[str, int] = {}

    def launch(name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        procs[name] = _spawn(layout, name, argv, env)
        # Recorded after every start, so a failure part-way leaves `down` able to clean up.
        _write_state(layout, ports, procs)

    def wait(what: str, ready: Callable[[], bool]) -> None:
        _wait(what, ready, layout, procs)

    try:
        launch("etcd", components.etcd_args(layout, ports))
        wait("etcd", lambda: _http_ok(f"http://127.0.0.1:{ports.etcd}/health"))
        launch("kube-apiserver", components.apiserver_args(layout, certs, ports))
        wait("kube-apiserver", lambda: api.ok("/readyz"))
        crds = bootstrap.apply_crds(api, kwok_module)
        wait("kwok CRDs established", lambda: bootstrap.crds_established(api, crds))
        bootstrap.apply_simulation(api, kwok_module)
        launch("kube-controller-manager", components.controller_manager_args(layout, certs, ports))
        launch("kube-scheduler", components.scheduler_args(layout, ports))
        launch("kwok", components.kwok_args(layout), components.kwok_env(layout))
        # KubeRay's CRDs (3 MB, 2-3 s to apply and establish) while the controller manager
        # readies the nodes; ray-operator needs them served before its controllers start.
        ray_crds = bootstrap.apply_kuberay_crds(api, kuberay_module)
        wait("KubeRay CRDs established", lambda: bootstrap.crds_established(api, ray_crds))
        launch("ray-operator", components.ray_operator_args(layout, ports))
        # Flux's CRDs likewise, before its controllers start.
        flux_crds = bootstrap.apply_flux_crds(api, flux_modules)
        wait("Flux CRDs established", lambda: bootstrap.crds_established(api, flux_crds))
        for name, args in (
            ("source-controller", components.source_controller_args),
            ("kustomize-controller", components.kustomize_controller_args),
        ):
            launch(name, args(layout, ports), components.flux_env(layout, name))
        wait("kube-controller-manager", lambda: _healthz(ports.controller_manager))
        wait("kube-scheduler", lambda: _healthz(ports.scheduler))
        wait("ray-operator", lambda: _ray_operator_ready(ports))
        wait("source-controller", lambda: _source_controller_ready(ports))
        wait("kustomize-controller", lambda: _kustomize_controller_ready(ports))
        wait("nodes Ready", lambda: not bootstrap.unready_nodes(api))
    except BaseException:
        log.error("cluster start failed; logs are in %s", layout.logs)
        raise
    log.info("cluster up in %.1f s; export KUBECONFIG=%s", time.monotonic() - t0, layout.kubeconfig)
    return Cluster(layout.kubeconfig, layout.state)


def _build() -> None:
    """Build or refresh the binaries; build.sh costs a few hashes when nothing changed."""
    tools = [*components.COMPONENTS, "kubectl"]
    result = subprocess.run(["bash", str(components.HERE / "build.sh"), *tools], check=False)
    if result.returncode != 0:
        raise ClusterError(f"e2e/cluster/build.sh failed (exit {result.returncode}); see its output above")


def _check_ports_free(ports: components.Ports) -> None:
    for name, port in asdict(ports).items():
        with socket.socket() as s:
            # As the servers do, so a port with connections in TIME_WAIT still counts as free.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                env = f"DEPLOYCTL_CLUSTER_{name.upper()}_PORT"
                raise ClusterError(f"port {port} ({name}) on 127.0.0.1 is in use; free it or set {env}") from None


def _wait(what: str, ready: Callable[[], bool], layout: components.Layout, procs: dict[str, int]) -> None:
    """Poll `ready`; fail at once, with the log's tail, when a started process dies."""
    t0 = time.monotonic()
    while not ready():
        for name, pid in procs.items():
            if not _alive(pid, str(BIN_DIR / name)):
                raise ClusterError(f"{name} exited while waiting for {what}:\n{_tail(layout, name)}")
        if time.monotonic() - t0 > START_TIMEOUT_S:
            raise ClusterError(f"{what} not ready after {START_TIMEOUT_S:.0f} s; logs are in {layout.logs}")
        time.sleep(0.2)
    log.info("%s ready (%.1f s)", what, time.monotonic() - t0)


def _tail(layout: components.Layout, name: str, lines: int = 20) -> str:
    path = layout.logs / f"{name}.log"
    text = path.read_text(errors="replace").splitlines()[-lines:] if path.exists() else []
    return "\n".join(["  " + line for line in text] + [f"(full log: {path})"])


def _http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, context=context, timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:  # refused while starting, or an HTTP error status
        return False


def _healthz(port: int) -> bool:
    """The health endpoint of kube-controller-manager or kube-scheduler. They serve it with a
    self-signed certificate, and only the status code matters here."""
    insecure = ssl.create_default_context()
    insecure.check_hostname, insecure.verify_mode = False, ssl.CERT_NONE
    return _http_ok(f"https://127.0.0.1:{port}/healthz", insecure)


def _ray_operator_ready(ports: components.Ports) -> bool:
    """ray-operator's readiness probe (plain HTTP). It answers once the manager runs; its
    controllers list their objects when their caches sync, so nothing created before is missed."""
    return _http_ok(f"http://127.0.0.1:{ports.ray_operator_probe}/readyz")


def _source_controller_ready(ports: components.Ports) -> bool:
    """source-controller's readiness probe, and its artifact server (started once the manager
    runs; kustomize-controller downloads every revision from it)."""
    return _http_ok(f"http://127.0.0.1:{ports.source_controller_health}/readyz") and _listening(
        ports.source_controller_storage
    )


def _kustomize_controller_ready(ports: components.Ports) -> bool:
    return _http_ok(f"http://127.0.0.1:{ports.kustomize_controller_health}/readyz")


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def _problems(state: dict[str, Any], api: bootstrap.Api) -> list[str]:
    bin_dir = Path(state["bin_dir"])
    # A cluster recorded before a component joined COMPONENTS lacks it: "not running", restarted.
    dead = [n for n in components.COMPONENTS if not _alive(state["processes"].get(n, -1), str(bin_dir / n))]
    if dead:
        return [f"not running: {', '.join(dead)}"]
    if not api.ok("/readyz"):
        return ["kube-apiserver is not ready"]
    ports = components.Ports(**state["ports"])
    for name, ready in (
        ("ray-operator", _ray_operator_ready),
        ("source-controller", _source_controller_ready),
        ("kustomize-controller", _kustomize_controller_ready),
    ):
        if not ready(ports):
            return [f"{name} is not ready"]
    try:
        unready = bootstrap.unready_nodes(api)
    except (ClusterError, OSError) as e:  # the API server went away since /readyz
        return [str(e)]
    return [f"nodes not Ready: {', '.join(unready)}"] if unready else []


# --- processes ----------------------------------------------------------------------------

# Children started by this Python process, kept so they are reaped (not left as zombies).
_children: dict[int, subprocess.Popen[bytes]] = {}


def _spawn(layout: components.Layout, name: str, argv: list[str], env: dict[str, str] | None) -> int:
    with (layout.logs / f"{name}.log").open("ab") as logfile:
        # A session of its own, so `down` can signal the whole process group, and Ctrl-C in
        # the terminal that ran `up` does not reach it.
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=logfile,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=layout.state,
            env={**os.environ, **(env or {})},
        )
    _children[proc.pid] = proc
    log.info("started %s (pid %d)", name, proc.pid)
    return proc.pid


def _alive(pid: int, exe: str) -> bool:
    """True when pid runs `exe` and is not a zombie (pids are recycled; zombies are dead)."""
    child = _children.get(pid)
    if child is not None:
        # Our own child: ask it. Between fork and exec /proc shows the parent's command line,
        # which would read as "exited" for a process that is only starting.
        return child.poll() is None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0].decode()
    except (FileNotFoundError, ProcessLookupError):
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    return state != "Z" and argv0 == exe


def _stop(layout: components.Layout, state: dict[str, Any]) -> None:
    procs: dict[str, int] = state["processes"]
    bin_dir = Path(state["bin_dir"])
    # In waves, each waited for: the API server's clients, then the API server, then etcd.
    # An API server whose etcd is gone hangs on its way out instead of stopping in a second.
    waves: tuple[tuple[str, ...], ...] = (
        ("kwok", "kube-scheduler", "kube-controller-manager", "ray-operator", *FLUX),
        ("kube-apiserver",),
        ("etcd",),
    )
    for wave in waves:
        _terminate({n: procs[n] for n in wave if n in procs}, bin_dir)
    left = [f"{n} (pid {pid})" for n, pid in procs.items() if _alive(pid, str(bin_dir / n))]
    if left:
        raise ClusterError(f"could not stop {', '.join(left)}; state kept in {layout.state_file}")
    layout.state_file.unlink(missing_ok=True)
    shutil.rmtree(layout.etcd_data, ignore_errors=True)
    log.info("cluster stopped; logs kept in %s", layout.logs)


def _terminate(procs: dict[str, int], bin_dir: Path) -> None:
    """SIGTERM each process group, SIGKILL what is still there after STOP_TIMEOUT_S."""

    def running() -> dict[str, int]:
        _reap()
        return {n: pid for n, pid in procs.items() if _alive(pid, str(bin_dir / n))}

    for pid in running().values():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while running() and time.monotonic() < deadline:
        time.sleep(0.05)
    for name, pid in running().items():
        log.warning("%s (pid %d) ignored SIGTERM for %.0f s; killing it", name, pid, STOP_TIMEOUT_S)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + 2
    while running() and time.monotonic() < deadline:
        time.sleep(0.05)


def _reap() -> None:
    for pid, proc in list(_children.items()):
        if proc.poll() is not None:
            del _children[pid]


# --- state --------------------------------------------------------------------------------


def _read_state(layout: components.Layout) -> dict[str, Any] | None:
    try:
        state: dict[str, Any] = json.loads(layout.state_file.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return state


def _write_state(layout: components.Layout, ports: components.Ports, procs: dict[str, int]) -> None:
    # bin_dir is kept so `down` recognises the processes even if DEPLOYCTL_BIN changed since.
    state = {"ports": asdict(ports), "bin_dir": str(BIN_DIR), "processes": procs}
    tmp = layout.state_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2))
    tmp.replace(layout.state_file)


@contextlib.contextmanager
def _locked(layout: components.Layout) -> Iterator[None]:
    """Serialise up/down across processes (two test sessions starting at once)."""
    with (layout.state / ".lock").open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _resolve(state_dir: str | Path) -> Path:
    path = Path(state_dir)
    return path if path.is_absolute() else components.ROOT / path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("command", choices=["up", "down", "status"])
    parser.add_argument("--state-dir", default=".cache/cluster", help="relative to the repository root")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    try:
        if args.command == "up":
            print(up(args.state_dir).kubeconfig)
        elif args.command == "down":
            down(args.state_dir)
        else:
            problems = status(args.state_dir)
            print("\n".join(problems) if problems else "healthy")
            return 1 if problems else 0
    except ClusterError as e:
        print(f"localcluster: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
