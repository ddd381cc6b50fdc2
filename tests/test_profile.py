"""The profile loader: strict YAML, schema errors that name the field, the line and the fix."""

from __future__ import annotations

import pathlib

import pytest

from orchestrator import errors
from orchestrator.profile import model as profile

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROD = (ROOT / "profiles" / "prod-tp4.yaml").read_text()
DIGEST = "@sha256:" + "a" * 64


def _minimal(**overrides: str) -> str:
    parts = {
        "head": "apiVersion: deployctl/v1\nkind: InferenceProfile\n",
        "metadata": "metadata:\n  name: m\n  namespace: inference\n",
        "model": "model:\n  name: meta-llama/Meta-Llama-3-8B-Instruct\n  architecture: llama-3-8b\n"
        "  source: {pvc: models, path: /models/llama3-8b}\n",
        "engine": f"engine:\n  image: reg.internal/vllm{DIGEST}\n  tensorParallelSize: 1\n  maxModelLen: 4096\n",
        "hardware": "hardware:\n  gpu: A100-80GB\n  gpusPerNode: 4\n",
    }
    parts.update(overrides)
    return "".join(parts.values())


def _error(text: str | bytes) -> str:
    with pytest.raises(errors.InvalidProfile) as info:
        profile.loads(text, source="p.yaml")
    assert info.value.exit_code == errors.ExitCode.INVALID_PROFILE
    return info.value.message


def test_every_example_profile_loads() -> None:
    for path in sorted((ROOT / "profiles").glob("*.yaml")):
        loaded = profile.load(path)
        assert loaded.metadata.name
        assert loaded.source == str(path)


def test_minimal_profile_gets_documented_defaults() -> None:
    p = profile.loads(_minimal())
    assert p.engine.gpuMemoryUtilization == 0.9
    assert p.engine.maxNumSeqs == 256
    assert p.airgap.offline and p.airgap.denyEgress
    assert p.placement.tolerations[0].key == "nvidia.com/gpu"
    assert p.gpus_per_pod == 1 and not p.nvlink_required


def test_tp4_requires_nvlink_by_default_and_profile_may_override() -> None:
    p = profile.loads(_minimal(engine=f"engine:\n  image: r{DIGEST}\n  tensorParallelSize: 4\n  maxModelLen: 4096\n"))
    assert p.nvlink_required and p.gpus_per_pod == 4
    p2 = profile.loads(
        _minimal(
            engine=f"engine:\n  image: r{DIGEST}\n  tensorParallelSize: 4\n  maxModelLen: 4096\n",
            placement="placement:\n  requireNvlink: false\n",
        )
    )
    assert not p2.nvlink_required


def test_spec_hash_is_stable_and_changes_with_content() -> None:
    a, b = profile.loads(PROD), profile.loads(PROD)
    assert a.spec_hash() == b.spec_hash()
    c = profile.loads(PROD.replace("maxNumSeqs: 64", "maxNumSeqs: 32"))
    assert c.spec_hash() != a.spec_hash()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # 1 empty file
        ("", "empty"),
        # 2 only a comment
        ("# nothing\n", "no YAML document"),
        # 3 a list
        ("- a\n- b\n", "is a list"),
        # 4 a scalar
        ("hello\n", "single value"),
        # 5 YAML syntax error, with its line
        ("apiVersion: deployctl/v1\nkind: [x\n", "line"),
        # 6 duplicate key
        (_minimal() + "kind: InferenceProfile\n", "duplicate key 'kind'"),
        # 7 alias bomb
        ("a: &a [1,1,1,1]\nb: &b [*a,*a,*a]\nc: [*b,*b,*b]\n", "aliases"),
        # 8 several documents
        (_minimal() + "---\n" + _minimal(), "several YAML documents"),
        # 9 unknown top-level key, with a suggestion
        (_minimal() + "enigne: {}\n", "did you mean 'engine'"),
        # 10 unknown nested key, with a suggestion
        (
            _minimal(engine=f"engine:\n  image: r{DIGEST}\n  tensorParalelSize: 2\n  maxModelLen: 4096\n"),
            "did you mean 'tensorParallelSize'",
        ),
        # 11 wrong type
        (_minimal(engine=f"engine:\n  image: r{DIGEST}\n  maxModelLen: lots\n"), "engine.maxModelLen (line"),
        # 12 out of range
        (
            _minimal(engine=f"engine:\n  image: r{DIGEST}\n  maxModelLen: 4096\n  gpuMemoryUtilization: 1.5\n"),
            "engine.gpuMemoryUtilization",
        ),
        # 13 unpinned image
        (
            _minimal(engine="engine:\n  image: vllm/vllm-openai:latest\n  maxModelLen: 4096\n"),
            "not pinned by digest",
        ),
        # 14 missing required field
        (_minimal(engine=f"engine:\n  image: r{DIGEST}\n"), "engine.maxModelLen"),
        # 15 unknown architecture with suggestion
        (
            _minimal(model="model:\n  name: x\n  architecture: llama-3-7b\n  source: {pvc: m}\n"),
            "did you mean",
        ),
        # 16 both architecture and config
        (
            _minimal(model="model:\n  name: x\n  architecture: llama-3-8b\n  config: c.json\n  source: {pvc: m}\n"),
            "exactly one of model.architecture",
        ),
        # 17 unknown GPU
        (_minimal(hardware="hardware:\n  gpu: A100-81GB\n"), "unknown GPU"),
        # 18 invalid release name
        (_minimal(metadata="metadata:\n  name: Llama_3\n"), "not a valid release name"),
        # 19 wrong apiVersion
        (_minimal(head="apiVersion: deployctl/v2\nkind: InferenceProfile\n"), "apiVersion"),
        # 20 bad SLO syntax
        (_minimal() + "gate:\n  smoke:\n    slo: {p95_ttft_ms: fast}\n", "is not a condition"),
        # 21 weights path outside the mount
        (
            _minimal(model="model:\n  name: x\n  architecture: llama-3-8b\n  source: {pvc: m, path: /data/x}\n"),
            "must be an absolute path under mountPath",
        ),
        # 22 bad kvCacheDtype
        (
            _minimal(engine=f"engine:\n  image: r{DIGEST}\n  maxModelLen: 4096\n  kvCacheDtype: fp4\n"),
            "engine.kvCacheDtype",
        ),
        # 23 bad egress CIDR
        (_minimal() + "airgap:\n  allowEgressCIDRs: [10.0.0.0/33]\n", "not a CIDR"),
        # 24 negative TP
        (
            _minimal(engine=f"engine:\n  image: r{DIGEST}\n  tensorParallelSize: -2\n  maxModelLen: 4096\n"),
            "engine.tensorParallelSize",
        ),
        # 25 bad endpoint
        (_minimal() + "gate:\n  endpoint: infer.internal:8000\n", "http://"),
        # 26 neither gpu nor memory
        (_minimal(hardware="hardware:\n  gpusPerNode: 4\n"), "give hardware.gpu"),
    ],
)
def test_broken_profile_is_explained(text: str, expected: str) -> None:
    message = _error(text)
    assert expected in message
    assert "Traceback" not in message


def test_binary_garbage_and_huge_files_are_refused_quickly() -> None:
    assert "binary" in _error(b"\x00\x01\x02garbage")
    assert "not UTF-8" in _error(b"\xff\xfe\xfa")
    assert "must be under" in _error(b"a: " + b"x" * (profile.strictyaml.MAX_BYTES + 1))


def test_error_names_the_yaml_line_of_the_field() -> None:
    text = _minimal(engine=f"engine:\n  image: r{DIGEST}\n  maxModelLen: 4096\n  maxNumSeqs: zero\n")
    line = text.splitlines().index("  maxNumSeqs: zero") + 1
    assert f"engine.maxNumSeqs (line {line})" in _error(text)


def test_line_of_maps_fields_to_lines() -> None:
    p = profile.loads(PROD)
    assert p.line_of("engine.tensorParallelSize") == PROD.splitlines().index("  tensorParallelSize: 4") + 1
    # a field the file does not write points at its nearest written parent
    assert p.line_of("engine.pipelineParallelSize") == PROD.splitlines().index("engine:") + 1


def test_missing_file_and_directory_are_usage_errors(tmp_path: pathlib.Path) -> None:
    with pytest.raises(errors.UsageError, match="does not exist"):
        profile.load(tmp_path / "nope.yaml")
    with pytest.raises(errors.UsageError, match="is a directory"):
        profile.load(tmp_path)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ('["--max-num-seq", "8"]', "abbreviation of --max-num-seqs"),
        ('["--enable-chunk-prefill"]', "did you mean --enable-chunked-prefill"),
        ('["--tensor-parallel-size", "2"]', "set by deployctl from engine.tensorParallelSize"),
        ('["--api-key", "sk-123"]', "would put a secret into the profile"),
    ],
)
def test_extra_args_are_checked_against_the_vllm_flag_list(args: str, expected: str) -> None:
    text = _minimal(engine=f"engine:\n  image: r{DIGEST}\n  maxModelLen: 4096\n  extraArgs: {args}\n")
    assert expected in _error(text)


@pytest.mark.parametrize("arg", ["--api-key", "--api_key=sk-123"])
def test_an_api_key_in_extra_args_points_at_the_way_the_guides_give_the_key(arg: str) -> None:
    text = _minimal(engine=f"engine:\n  image: r{DIGEST}\n  maxModelLen: 4096\n  extraArgs: [{arg!r}, sk-123]\n")
    message = _error(text)
    # The guides (docs/airgap.md, profiles/prod-tp4-api-key.yaml): VLLM_API_KEY from a Secret, and the gate told.
    assert "VLLM_API_KEY" in message and "engine.env" in message and "gate.apiKeySecret" in message
    assert "in front of the Service" not in message
    assert pathlib.Path(__file__).parents[1].joinpath("profiles", "prod-tp4-api-key.yaml").is_file()


@pytest.mark.parametrize(
    ("toleration", "expected"),
    [
        ("{effect: NoExecute}", "tolerates every NoExecute taint on any node"),
        ("{}", "tolerates every taint of every effect"),
        ("{operator: Equal}", "must use operator Exists"),
        ("{key: pool, value: a}", "value must be empty"),
    ],
)
def test_a_toleration_that_tolerates_more_than_it_says_is_refused_at_its_line(toleration: str, expected: str) -> None:
    text = _minimal() + f"placement:\n  tolerations:\n  - {toleration}\n"
    message = _error(text)
    line = text.splitlines().index(f"  - {toleration}") + 1
    assert "placement.tolerations.0." in message and f"(line {line})" in message and expected in message


def test_a_keyless_toleration_that_says_exists_tolerates_everything_on_purpose() -> None:
    text = _minimal() + "placement:\n  tolerations:\n  - {operator: Exists, effect: NoExecute}\n"
    (toleration,) = profile.loads(text).placement.tolerations
    assert toleration.key is None and toleration.operator == "Exists"


def test_known_extra_args_pass() -> None:
    text = _minimal(
        engine=f"engine:\n  image: r{DIGEST}\n  maxModelLen: 4096\n"
        '  extraArgs: ["--enable-chunked-prefill", "--max-logprobs", "5"]\n'
    )
    assert profile.loads(text).engine.extraArgs[0] == "--enable-chunked-prefill"


def test_reserved_label_prefixes_are_refused() -> None:
    text = _minimal(metadata="metadata:\n  name: m\n  labels: {app.kubernetes.io/name: x}\n")
    assert "set by deployctl" in _error(text)
    text = _minimal() + "placement:\n  podLabels: {deployctl.dev/release: other}\n"
    assert "set by deployctl" in _error(text)


def test_min_samples_above_requests_is_refused() -> None:
    text = _minimal() + "gate:\n  smoke:\n    requests: 8\n    minSamples: 16\n"
    assert "could never judge" in _error(text)
