"""kubectl and Helm habits against the real control plane: a profile piped to `apply -`, `--set`
overrides, the namespace taken from the kubeconfig context, and the release record (and its YAML
export) showing what the pipeline changed.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import yaml
from deployhelpers import DEPLOYCTL, ReleaseEnv, deployctl, profile


def _kubeconfig_with_namespace(env: ReleaseEnv) -> Path:
    """The cluster's kubeconfig with the test's namespace on its current context, as `kubens` leaves it."""
    config = yaml.safe_load(env.kubeconfig.read_text())
    current = config["current-context"]
    for entry in config["contexts"]:
        if entry["name"] == current:
            entry["context"]["namespace"] = env.namespace
    path = env.tmp / "context-namespace.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def test_piped_profile_with_set_lands_in_the_context_namespace_and_the_record_says_why(env: ReleaseEnv) -> None:
    kubeconfig = _kubeconfig_with_namespace(env)
    doc = profile(env.namespace)
    del doc["metadata"]["namespace"]
    argv = ["apply", "-", "--set", "engine.maxNumSeqs=16", "--timeout", "3m", "-o", "json"]
    proc = subprocess.run(
        [DEPLOYCTL, *argv, "--kubeconfig", str(kubeconfig)],
        input=yaml.safe_dump(doc),
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["namespace"] == env.namespace
    args = env.deployment().spec.template.spec.containers[0].args
    assert args[args.index("--max-num-seqs") + 1] == "16"

    history = deployctl(kubeconfig, "history", "llm", "-o", "json")  # no -n: the context's namespace
    assert history.code == 0, history.stderr
    assert [r["revision"] for r in json.loads(history.stdout)] == [1]

    export = env.tmp / "export.yaml"
    exported = deployctl(kubeconfig, "audit", "export", "llm", "-o", "yaml", "--output-file", str(export))
    assert exported.code == 0, exported.stderr
    recorded = yaml.safe_load(export.read_text())["records"][0]["profile"]
    assert "--set engine.maxNumSeqs=16" in recorded
    assert f"metadata.namespace={env.namespace} from kubeconfig context" in recorded
    assert yaml.safe_load(recorded)["engine"]["maxNumSeqs"] == 16
    verify = deployctl(kubeconfig, "audit", "verify", "--file", str(export), "-o", "json")
    assert verify.code == 0 and json.loads(verify.stdout)["ok"], verify.stdout + verify.stderr


def test_n_that_contradicts_the_profile_is_refused_before_the_cluster_is_touched(env: ReleaseEnv) -> None:
    path = env.tmp / "profile.yaml"
    path.write_text(yaml.safe_dump(profile(env.namespace)))
    result = deployctl(env.kubeconfig, "apply", str(path), "-n", "elsewhere", "--timeout", "1m")
    assert result.code == 1
    assert f"-n elsewhere contradicts the profile's metadata.namespace {env.namespace}" in result.stderr
    assert deployctl(env.kubeconfig, "history", "llm", "-n", env.namespace).code == 1  # nothing recorded
