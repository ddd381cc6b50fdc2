"""The weights on a volume against the manifest kept with the model: a sha256sum file or a model signature.

The model-signing fixtures in tests/data/model_signing are real: signed by the model-signing 1.1.1
CLI (and its Python API, for the shards signature) with a TEST key, as its README says. Statements it
would not write (another predicateType, another hash) are signed here with the same TEST key, through
deployctl's own signing module, so that each refusal is the one under test and not a bad signature.
"""

from __future__ import annotations

import base64
import hashlib
import json
import pathlib
from collections.abc import Callable

import hypothesis
import pytest
from hypothesis import strategies as st

from orchestrator.records import model_manifest, signing

DATA = pathlib.Path(__file__).resolve().parent / "data"
FIXTURES = DATA / "model_signing"
MODEL = FIXTURES / "model"
MODEL_KEY = FIXTURES / "TEST-ONLY-model-key.pem"  # ECDSA P-256
MODEL_PUB = (FIXTURES / "TEST-ONLY-model-key.pub").read_bytes()
OTHER_PUB = (DATA / "keys" / "TEST-ONLY-other-key.pub").read_bytes()  # ECDSA P-256, not the signer
ED25519_KEY = DATA / "keys" / "TEST-ONLY-signing-key.pem"
SIGNATURE = (MODEL / "model.sig").read_bytes()
SHARDS_SIGNATURE = (FIXTURES / "model-shards.sig").read_bytes()
# Bytes that must never reach a message: a manifest that is not one may hold anything.
SECRET = "hunter2-do-not-echo"


def keyid(pem: bytes) -> str:
    return next(iter(signing.public_keys_from_pem(pem, "test").keys))


_VOLUME = {
    p.relative_to(MODEL).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in MODEL.rglob("*") if p.is_file()
}


def volume() -> dict[str, str]:
    """What the warm-up reports for the fixture model: every file, model.sig included."""
    return dict(_VOLUME)


def sums(entries: dict[str, str], mark: str = " ") -> bytes:
    return "".join(f"{digest} {mark}{path}\n" for path, digest in entries.items()).encode()


def weights() -> dict[str, str]:
    return {k: v for k, v in volume().items() if k != "model.sig"}


def statement(bundle: bytes = SIGNATURE) -> dict[str, object]:
    result: dict[str, object] = json.loads(base64.b64decode(json.loads(bundle)["dsseEnvelope"]["payload"]))
    return result


def resign(
    edit: Callable[[dict[str, object]], object], key: pathlib.Path = MODEL_KEY, payload_type: str = signing.PAYLOAD_TYPE
) -> bytes:
    """The real bundle with its Statement changed by ``edit`` and signed again with a TEST key."""
    bundle = json.loads(SIGNATURE)
    changed = statement()
    edit(changed)
    payload = json.dumps(changed).encode()
    sig = signing.signer_from_pem(key.read_bytes(), str(key)).sign(signing.pae(payload_type, payload))
    bundle["dsseEnvelope"] = {
        "payload": base64.b64encode(payload).decode(),
        "payloadType": payload_type,
        "signatures": [{"sig": base64.b64encode(sig).decode(), "keyid": ""}],
    }
    return json.dumps(bundle).encode()


def predicate(s: dict[str, object]) -> dict[str, object]:
    found = s["predicate"]
    assert isinstance(found, dict)
    return found


def failed(check: model_manifest.WeightsCheck, *words: str) -> str:
    """The check's problems as one text, after asserting it failed and names each of ``words``."""
    assert not check.verified, check
    text = "; ".join(check.problems)
    for word in words:
        assert word in text, (word, text)
    assert text in check.explain()
    return text


# --- SHA256SUMS ----------------------------------------------------------------------------------


def test_sha256sum_output_of_the_model_directory_verifies() -> None:
    manifest = b"# made by sha256sum\n\n" + sums({f"./{k}": v.upper() for k, v in weights().items()}, mark="*")
    check = model_manifest.check_sha256(manifest, {**weights(), "SHA256SUMS": "0" * 64})
    assert check.verified and check.problems == ()
    assert check.files == 3 and check.signer is None
    assert check.manifest_sha256 == hashlib.sha256(manifest).hexdigest()
    assert check.to_json() == {
        "verified": True,
        "method": "sha256",
        "manifest": "SHA256SUMS",
        "manifest_sha256": check.manifest_sha256,
        "signer": None,
        "files": 3,
        "problems": [],
    }
    assert "match SHA256SUMS" in check.explain() and "3 files" in check.explain()


def test_sha256_changed_file_fails_naming_it_and_both_digests() -> None:
    listed = weights()
    on_volume = {**listed, "model.safetensors": "ab" * 32}
    text = failed(
        model_manifest.check_sha256(sums(listed), on_volume),
        "model.safetensors",
        "ab" * 32,
        listed["model.safetensors"],
    )
    assert "config.json" not in text


def test_sha256_file_missing_from_the_volume_fails() -> None:
    on_volume = {k: v for k, v in weights().items() if k != "tokenizer/vocab.txt"}
    failed(model_manifest.check_sha256(sums(weights()), on_volume), "tokenizer/vocab.txt", "not on the volume")


def test_sha256_extra_weights_file_is_as_bad_as_a_changed_one() -> None:
    on_volume = {**weights(), "model-00002-of-00002.safetensors": "cd" * 32}
    failed(model_manifest.check_sha256(sums(weights()), on_volume), "model-00002-of-00002.safetensors", "not in")


def test_sha256_manifest_listing_itself_and_ignored_folders_are_left_out() -> None:
    # `sha256sum * > SHA256SUMS` lists SHA256SUMS with the digest of an empty file.
    listed = {**weights(), "SHA256SUMS": hashlib.sha256(b"").hexdigest(), ".cache/x": "ee" * 32}
    on_volume = {**weights(), "SHA256SUMS": "11" * 32, ".cache/huggingface/lock": "22" * 32}
    check = model_manifest.check_sha256(sums(listed), on_volume, ignore={".cache"})
    assert check.verified and check.files == 3


@pytest.mark.parametrize(
    ("line", "words"),
    [
        (f"{SECRET}\n", ["line 2", "sha256sum"]),
        ("d41d8cd98f00b204e9800998ecf8427e  config.json\n", ["line 2", "another digest than sha256"]),
        (f"SHA512 (config.json) = {'ab' * 64}\n", ["line 2", "another digest than sha256"]),
        (f"{'ab' * 32}\tconfig.json\n", ["line 2", "sha256sum"]),
    ],
)
def test_sha256_bad_lines_fail_by_number_without_echoing_them(line: str, words: list[str]) -> None:
    manifest = sums({"a": "00" * 32}) + line.encode()
    text = failed(model_manifest.check_sha256(manifest, {"a": "00" * 32}), *words)
    assert SECRET not in text


@pytest.mark.parametrize("path", ["/etc/passwd", "../outside", "a/../../b", "./..", "."])
def test_sha256_absolute_and_dotdot_paths_are_refused(path: str) -> None:
    failed(model_manifest.check_sha256(sums({path: "00" * 32}), {}), "line 1", "absolute path or one with '..'")


def test_sha256_escaped_and_tagged_lines_are_read_as_sha256sum_writes_them() -> None:
    manifest = (
        f"\\{'aa' * 32}  new\\nline\\\\name\n"  # sha256sum's escape of a name with a newline and a backslash
        f"SHA256 (tag form.bin) = {'bb' * 32}\r\n"  # sha256sum --tag, from a CRLF editor
    ).encode()
    check = model_manifest.check_sha256(manifest, {"new\nline\\name": "aa" * 32, "tag form.bin": "bb" * 32})
    assert check.verified and check.files == 2
    failed(model_manifest.check_sha256(f"\\{'aa' * 32}  bad\\q\n".encode(), {}), "escape")


@pytest.mark.parametrize(
    ("manifest", "words"),
    [
        (None, ["no SHA256SUMS", "none to check"]),
        (b"", ["lists no file"]),
        (b"# only a comment\n", ["lists no file"]),
        (b"\xff\xfe" + SECRET.encode(), ["not UTF-8"]),
        (b"0" * (model_manifest.MANIFEST_MAX_BYTES + 1), ["more than the 16,777,216"]),
        (sums({"a": "00" * 32}) + sums({"./a": "11" * 32}), ["listed twice"]),
    ],
)
def test_sha256_unusable_manifest_fails_saying_why(manifest: bytes | None, words: list[str]) -> None:
    check = model_manifest.check_sha256(manifest, {"a": "00" * 32})
    assert SECRET not in failed(check, *words)
    assert check.manifest_sha256 == (None if manifest is None else hashlib.sha256(manifest).hexdigest())


def test_sha256_bad_warm_up_report_fails() -> None:
    report = {"a": "not-a-digest", "/abs": "00" * 32, "b": "11" * 32}
    failed(model_manifest.check_sha256(sums({"b": "11" * 32}), report), "a: the warm-up", "'/abs'")


def test_problems_are_capped_with_a_count_of_the_rest() -> None:
    on_volume = {f"extra-{i}.bin": "00" * 32 for i in range(8)}
    check = model_manifest.check_sha256(sums({"a": "11" * 32}), {**on_volume, "a": "11" * 32})
    assert len(check.problems) == model_manifest.MAX_PROBLEMS + 1
    assert check.problems[-1] == "and 3 more"


def test_names_in_messages_lose_control_characters() -> None:
    text = failed(model_manifest.check_sha256(sums({"a": "11" * 32}), {"a": "11" * 32, "x\x1b[2Jy": "00" * 32}))
    assert "\x1b" not in text and "x\\x1b[2Jy" in text


def test_a_check_is_verified_exactly_when_it_has_no_problems() -> None:
    with pytest.raises(ValueError):
        model_manifest.WeightsCheck(True, "sha256", "SHA256SUMS", None, None, 0, ("a problem",))
    with pytest.raises(ValueError):
        model_manifest.WeightsCheck(False, "sha256", "SHA256SUMS", None, None, 0, ())


def test_programmer_errors_raise() -> None:
    with pytest.raises(TypeError):
        model_manifest.check_sha256("text, not bytes", {})  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        model_manifest.check_sha256(b"", {}, ignore=".cache")


# --- model-signing -------------------------------------------------------------------------------


def test_real_model_signing_signature_verifies_with_its_public_key() -> None:
    check = model_manifest.check_signature(SIGNATURE, MODEL_PUB, volume())
    assert check.verified, check.problems
    assert check.method == "model-signing" and check.files == 3
    assert check.signer == keyid(MODEL_PUB)
    assert check.manifest_sha256 == hashlib.sha256(SIGNATURE).hexdigest()
    assert check.to_json()["signer"] == check.signer and "signed by key" in check.explain()


def test_model_signing_ignores_the_paths_the_signature_ignored() -> None:
    # model_signing sign records .git, .gitattributes ... as ignored; its verify skips them, and so do we.
    on_volume = {**volume(), ".gitattributes": "00" * 32, ".git/HEAD": "11" * 32}
    assert model_manifest.check_signature(SIGNATURE, MODEL_PUB, on_volume).verified


def test_model_signing_another_public_key_fails_naming_the_expected_keyid() -> None:
    check = model_manifest.check_signature(SIGNATURE, OTHER_PUB, volume(), key_source="profile weights.publicKey")
    failed(check, "does not verify", keyid(OTHER_PUB), "profile weights.publicKey")
    assert check.signer is None and check.files == 0
    # The bundle's hint (sha256 of the signer's PEM text) helps find the key it was signed with.
    assert hashlib.sha256(MODEL_PUB).hexdigest() in check.problems[0]


def test_model_signing_changed_file_fails_naming_it() -> None:
    on_volume = {**volume(), "config.json": "ab" * 32}
    check = model_manifest.check_signature(SIGNATURE, MODEL_PUB, on_volume)
    failed(check, "config.json", "ab" * 32)
    assert check.signer == keyid(MODEL_PUB)  # the signature was good; the volume is not


def test_model_signing_missing_and_extra_files_fail() -> None:
    on_volume = {k: v for k, v in volume().items() if k != "model.safetensors"}
    on_volume["model-extra.safetensors"] = "cd" * 32
    failed(
        model_manifest.check_signature(SIGNATURE, MODEL_PUB, on_volume),
        "model.safetensors: listed",
        "model-extra.safetensors: on the volume",
    )


def test_model_signing_tampered_payload_fails_the_signature() -> None:
    bundle = json.loads(SIGNATURE)
    changed = statement()
    predicate(changed)["resources"][0]["digest"] = "ab" * 32  # type: ignore[index]
    bundle["dsseEnvelope"]["payload"] = base64.b64encode(json.dumps(changed).encode()).decode()
    check = model_manifest.check_signature(json.dumps(bundle).encode(), MODEL_PUB, volume())
    failed(check, "does not verify", keyid(MODEL_PUB))


def test_model_signing_keyid_is_not_needed() -> None:
    bundle = json.loads(SIGNATURE)
    del bundle["dsseEnvelope"]["signatures"][0]["keyid"]
    assert model_manifest.check_signature(json.dumps(bundle).encode(), MODEL_PUB, volume()).verified


def test_statement_signed_here_verifies_as_the_real_one_does() -> None:
    # The refusals below use statements signed here: this proves such a statement passes when unchanged.
    assert model_manifest.check_signature(resign(lambda s: None), MODEL_PUB, volume()).verified


def test_ed25519_signature_verifies_with_its_key() -> None:
    pub = signing.public_pem(signing.signer_from_pem(ED25519_KEY.read_bytes(), "test").public)
    check = model_manifest.check_signature(resign(lambda s: None, key=ED25519_KEY), pub, volume())
    assert check.verified and check.signer == keyid(pub)


def _set(path: str, value: object) -> Callable[[dict[str, object]], None]:
    def edit(s: dict[str, object]) -> None:
        *parents, last = path.split(".")
        target: object = s
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]  # type: ignore[index]
        target[int(last) if isinstance(target, list) else last] = value  # type: ignore[index]

    return edit


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (_set("predicateType", "https://example.com/other/v1"), ["predicateType", model_manifest.PREDICATE_TYPE]),
        (_set("predicateType", "https://model_signing/Digests/v0.1"), ["model-signing 0.2"]),
        (_set("_type", "https://in-toto.io/Statement/v0.1"), ["not an in-toto Statement"]),
        (_set("predicate.serialization.hash_type", "blake2b"), ["another hash than sha256", "warm-up computes sha256"]),
        (_set("predicate.serialization.method", "tensors"), ["method is not 'files'"]),
        (_set("predicate.resources.0.algorithm", "blake3"), ["config.json", "another hash than sha256"]),
        (_set("predicate.resources.0.name", "/etc/passwd"), ["signed resource 1 is not a path inside"]),
        (_set("predicate.resources.0.name", "../config.json"), ["signed resource 1 is not a path inside"]),
        (_set("predicate.resources.0.digest", "ab" * 32), ["subject digest", "not made by model-signing"]),
        (_set("subject.0.digest.sha256", "ab" * 32), ["subject digest"]),
        (_set("predicate", None), ["no predicate"]),
        (_set("predicate.resources", {}), ["lists no resources"]),
    ],
)
def test_model_signing_statement_deployctl_cannot_check_is_refused(
    edit: Callable[[dict[str, object]], None], words: list[str]
) -> None:
    failed(model_manifest.check_signature(resign(edit), MODEL_PUB, volume()), *words)


def test_model_signing_wrong_payload_type_fails() -> None:
    bundle = resign(lambda s: None, payload_type="application/json")
    failed(model_manifest.check_signature(bundle, MODEL_PUB, volume()), "payloadType")


def test_model_signing_shards_signature_is_refused_saying_files_is_what_deployctl_checks() -> None:
    failed(model_manifest.check_signature(SHARDS_SIGNATURE, MODEL_PUB, volume()), "'shards'", "'files'")


@pytest.mark.parametrize(
    ("bundle", "key", "words"),
    [
        (None, MODEL_PUB, ["no model.sig"]),
        (SECRET.encode(), MODEL_PUB, ["not JSON"]),
        (b"[" * 200_000, MODEL_PUB, ["not JSON"]),
        (json.dumps({"mediaType": SECRET}).encode(), MODEL_PUB, ["not a Sigstore bundle"]),
        (SIGNATURE, b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", ["not a PEM public key"]),
        (SIGNATURE, b"", ["holds no PEM public key"]),
    ],
)
def test_model_signing_unusable_input_fails_saying_why(bundle: bytes | None, key: bytes, words: list[str]) -> None:
    assert SECRET not in failed(model_manifest.check_signature(bundle, key, volume()), *words)


# --- hostile input never raises ------------------------------------------------------------------

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)
_NAMES = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
_HEX = st.text("0123456789abcdefABCDEF", min_size=60, max_size=66)


@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(data=st.binary(max_size=2000))
def test_arbitrary_bytes_as_manifest_never_raise(data: bytes) -> None:
    assert not model_manifest.check_signature(data, MODEL_PUB, volume()).verified
    check = model_manifest.check_sha256(data, volume())
    assert check.verified == (not check.problems)


@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(lines=st.lists(st.tuples(_HEX, st.sampled_from(["  ", " *", "\t", " "]), _NAMES), max_size=8))
def test_arbitrary_sha256sum_like_lines_never_raise(lines: list[tuple[str, str, str]]) -> None:
    manifest = "\n".join(f"{digest}{sep}{name}" for digest, sep, name in lines).encode()
    model_manifest.check_sha256(manifest, {name: digest for digest, _, name in lines})


@hypothesis.settings(max_examples=200, deadline=None)
@hypothesis.given(
    where=st.sampled_from(["predicate", "predicate.serialization", "predicate.resources", "subject"]), value=_JSON
)
def test_arbitrary_json_in_a_signed_statement_never_raises(where: str, value: object) -> None:
    check = model_manifest.check_signature(resign(_set(where, value)), MODEL_PUB, volume())
    assert check.verified == (not check.problems)


@hypothesis.settings(max_examples=200, deadline=None)
@hypothesis.given(envelope=_JSON, report=st.dictionaries(_NAMES, _NAMES | _HEX, max_size=6))
def test_arbitrary_envelope_and_warm_up_report_never_raise(envelope: object, report: dict[str, str]) -> None:
    bundle = json.dumps({"dsseEnvelope": envelope}).encode()
    assert not model_manifest.check_signature(bundle, MODEL_PUB, report).verified
    model_manifest.check_sha256(sums(report), report)


@hypothesis.settings(max_examples=100, deadline=None)
@hypothesis.given(sig=st.binary(max_size=140))
def test_arbitrary_signature_bytes_never_raise(sig: bytes) -> None:
    bundle = json.loads(SIGNATURE)
    bundle["dsseEnvelope"]["signatures"] = [{"sig": base64.b64encode(sig).decode()}]
    assert not model_manifest.check_signature(json.dumps(bundle).encode(), MODEL_PUB, volume()).verified
