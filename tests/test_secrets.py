"""Secrets stay secret: `$(VAR)` in the rendered args, echoed answers, and where the gate may send the key.

Kubernetes expands ``$(NAME)`` in a container's command and args to the env variable's value
(``$$`` is a literal ``$``); :func:`expand` below is the kubelet's rule (k8s.io/kubernetes
third_party/forked/golang/expansion/expand.go) so the tests can run it on what deployctl renders.
The cluster's own expansion is checked by e2e/test_security.py against the simulator's echo.
"""

from __future__ import annotations

import contextlib
import pathlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import hypothesis
import localserver
import pytest
from hypothesis import strategies as st

from orchestrator import conventions, errors, http
from orchestrator.apply import health, verify
from orchestrator.plan import planner
from orchestrator.profile import gate_endpoint, strictyaml
from orchestrator.profile import model as profile_mod
from orchestrator.render import manifests as render

ROOT = pathlib.Path(__file__).resolve().parent.parent
TOKEN = "hf_" + "PlantedSecretValue" * 2
NAME_WITH_REF = "llama-$(HF_TOKEN)"


def expand(text: str, mapping: Callable[[str], str | None]) -> str:
    """The kubelet's expansion of one command or args string: ``$$`` → ``$``, ``$(NAME)`` → the value
    of NAME when defined (else left as written), any other ``$`` kept."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] != "$" or i + 1 == len(text):
            out.append(text[i])
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
        elif nxt == "(":
            close = text.find(")", i + 2)
            if close < 0:
                out.append("$(")
                i += 2
                continue
            name = text[i + 2 : close]
            value = mapping(name)
            out.append(value if value is not None else f"$({name})")
            i = close + 1
        else:
            out.append("$" + nxt)
            i += 2
    return "".join(out)


def _everything_is_the_token(name: str) -> str:
    return TOKEN


def test_the_expansion_helper_follows_the_kubelets_rules() -> None:
    env = {"A": "1"}.get
    assert expand("$(A)-$$(A)-$(B)-$x-$$-$", env) == "1-$(A)-$(B)-$x-$-$"
    assert expand("$(A", env) == "$(A"


@hypothesis.settings(max_examples=500, deadline=None)
@hypothesis.given(text=st.text(alphabet=st.sampled_from("$()AB_x "), max_size=24) | st.text(max_size=24))
def test_a_literal_arg_reaches_the_container_exactly_as_written(text: str) -> None:
    assert expand(conventions.literal_arg(text), _everything_is_the_token) == text


def test_a_string_without_a_reference_is_left_alone() -> None:
    assert conventions.literal_arg("--served-model-name=llama $HOME a$") == "--served-model-name=llama $HOME a$"


# --- what the renderer emits -------------------------------------------------------------------------


def _profile(path: pathlib.Path, **changes: Any) -> profile_mod.Profile:
    """``path`` with model.name holding a reference to HF_TOKEN, a credentials Secret that defines it,
    and an extra arg with another reference."""
    text = path.read_text()
    doc = strictyaml.parse(text.encode()).data
    doc["model"]["name"] = NAME_WITH_REF
    doc["model"]["credentialsSecret"] = "hf-token"
    doc["engine"]["extraArgs"] = [*(doc["engine"].get("extraArgs") or []), "--disable-log-requests"]
    doc["engine"]["extraArgs"].append("--chat-template=$(HF_TOKEN)$$x")
    doc.update(changes)
    return profile_mod.loads(strictyaml.dump(doc), source=str(path))


def _containers(objects: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    def walk(node: Any) -> Iterator[dict[str, Any]]:
        if isinstance(node, dict):
            yield from node.get("containers") or []
            for value in node.values():
                yield from walk(value)
        elif isinstance(node, list):
            for value in node:
                yield from walk(value)

    for obj in objects:
        yield from walk(obj)


MULTI_NODE = {
    "lws": ROOT / "tests" / "golden" / "lws.profile.yaml",
    "kuberay": ROOT / "profiles" / "llama31-405b-2node.yaml",
}


@pytest.mark.parametrize(
    "path", [ROOT / "profiles" / "dev-tp2.yaml", *MULTI_NODE.values()], ids=["deployment", *MULTI_NODE]
)
def test_no_profile_text_in_the_rendered_command_or_args_expands_to_a_secret(path: pathlib.Path) -> None:
    prof = _profile(path)
    objects = render.render(prof, planner.plan(prof))
    # KubeRay's workers run the operator's `ray start`: only the pods that serve carry a command of ours.
    containers = [c for c in _containers(objects) if c["name"] == "vllm" and (c.get("command") or c.get("args"))]
    assert containers
    for container in containers:
        texts = [*(container.get("command") or []), *(container.get("args") or [])]
        # What the container receives when HF_TOKEN (and every other variable) is defined.
        received = [expand(t, lambda name: TOKEN if name == "HF_TOKEN" else None) for t in texts]
        assert not any(TOKEN in r for r in received), received
        joined = "\n".join(received)
        assert NAME_WITH_REF in joined and "--chat-template=$(HF_TOKEN)$$x" in joined


def test_the_renderers_own_references_still_expand_on_leaderworkerset() -> None:
    prof = _profile(MULTI_NODE["lws"])
    objects = render.render(prof, planner.plan(prof))
    (command,) = {
        tuple(c["command"]) for c in _containers(objects) if c["name"] == "vllm" and "--headless" in c["command"]
    }
    received = [
        expand(t, {"LWS_GROUP_SIZE": "2", "LWS_WORKER_INDEX": "1", "LWS_LEADER_ADDRESS": "leader"}.get) for t in command
    ]
    assert received[received.index("--nnodes") + 1] == "2" and received[received.index("--master-addr") + 1] == "leader"


def test_the_helm_values_carry_the_escaped_args_the_chart_places_as_given() -> None:
    prof = _profile(ROOT / "profiles" / "dev-tp2.yaml")
    values = render.helm_values(prof, planner.plan(prof))
    assert "llama-$$(HF_TOKEN)" in values["server"]["args"]
    assert values["model"]["servedName"] == NAME_WITH_REF  # NOTES.txt only: never expanded


def test_the_health_gate_looks_for_the_name_as_written() -> None:
    prof = _profile(ROOT / "profiles" / "dev-tp2.yaml")
    spec = verify.spec_of(prof, render.render(prof, planner.plan(prof)), timeout=None, endpoint=None, skip_bench=True)
    assert spec.model == NAME_WITH_REF


# --- echoed answers --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        f"invalid key {TOKEN}",
        f'{{"error": "bad", "headers": {{"Authorization": "Bearer {TOKEN}"}}}}',
        f"api_key={TOKEN}",
        f"'api_key': '{TOKEN}'",
        "x" * 150 + TOKEN,  # a secret across the cut: redacted before it, so no prefix survives
    ],
)
def test_an_excerpt_holds_no_credential_and_no_prefix_of_one(body: str) -> None:
    shown = errors.excerpt(body)
    assert TOKEN[:12] not in shown and len(shown) <= errors.EXCERPT_CHARS


def test_an_excerpt_redacts_the_secrets_it_is_given_whatever_their_shape() -> None:
    assert "0123456789abcd" not in errors.excerpt("key was 0123456789abcd!", secrets=["0123456789abcd"])


def test_an_excerpt_is_one_line_without_control_or_separator_characters() -> None:
    shown = errors.excerpt("a\nb\x1b[31mred\x00\u2028c\u2029d\x85e\u202eevil")
    assert shown == "a b [31mred c d e evil"


@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(before=st.text(max_size=400), after=st.text(max_size=50), limit=st.integers(20, 300))
def test_an_excerpt_never_holds_the_given_secret_and_stays_short(before: str, after: str, limit: int) -> None:
    secret = "Zq9" + "v" * 20
    hypothesis.assume(secret[:6] not in before + after)
    shown = errors.excerpt(before + secret + after, limit, secrets=[secret])
    assert secret[:6] not in shown and len(shown) <= limit


class _Echoing(localserver.QuietHandler):
    """A server that answers every /v1 call with the request's headers, and floods /health."""

    def do_GET(self) -> None:
        if self.path == "/health":
            # The client reads what it needs and closes: the rest of the flood has nowhere to go.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.send_json(503, {"detail": "x" * 5_000_000})
        elif self.path == "/v1/models" and "Authorization" in self.headers:
            self.send_json(401, {"error": f"unknown key: {self.headers['Authorization']}"})
        else:
            self.send_json(200, {"data": [{"id": f"llama-{TOKEN}"}]})


@pytest.fixture(scope="module")
def echoing() -> Iterator[str]:
    with localserver.serve(_Echoing) as url:
        yield url


def test_a_flooded_health_answer_gives_a_short_message(echoing: str) -> None:
    result = http.check_health(echoing)
    assert not result.ok and len(result.detail) < 250


def test_an_answer_that_echoes_the_key_does_not_carry_it_into_the_message(echoing: str) -> None:
    key = "sk-gate-key-0123456789"
    with pytest.raises(http.EndpointStatusError) as caught:
        http.served_models(echoing, api_key=key)
    assert key not in caught.value.message and key not in caught.value.body and "401" in caught.value.message


def test_the_health_gate_shows_a_served_name_that_holds_a_token_redacted() -> None:
    with localserver.serve(_Echoing) as url:
        report = health.wait_healthy({"pod/a": url}, "llama", timeout=0.1, path="/v1/models")
    assert not report.ok and "/v1/models lists" in report.explain() and TOKEN not in report.explain()


# --- gate.endpoint ---------------------------------------------------------------------------------

REL, NS = "llama", "team-a"


@pytest.mark.parametrize(
    "url, words",
    [
        ("http://evil.example/steal#", "fragment"),
        ("http://llama.team-a.svc:8000/#x", "fragment"),
        ("http://evil.example/steal?", "query"),
        ("http://user:pw@llama.team-a.svc:8000", "user information"),
        ("http://llama.team-a.svc@evil.example", "user information"),
        ("http://llama.team-a.svc:99999", "port"),
        ("http://llama.team-a.svc\\@evil", "backslash"),
        ("http://llama.team-a.svc:8000 ", "whitespace"),
        ("ftp://llama.team-a.svc", "http://"),
        ("llama.team-a.svc:8000", "http://"),
    ],
)
def test_an_endpoint_with_a_fragment_query_userinfo_or_a_bad_form_is_refused(url: str, words: str) -> None:
    why = gate_endpoint.problem(url)
    assert why is not None and words in why


@pytest.mark.parametrize(
    "url", ["http://llama.team-a.svc:8000", "https://LLAMA.team-a.svc.cluster.local.:8443/prefix/"]
)
def test_the_releases_own_service_is_the_default_target_and_may_get_the_key(url: str) -> None:
    target = gate_endpoint.resolve(url, release=REL, namespace=NS)
    assert target.own and not target.url.endswith("/")


@pytest.mark.parametrize(
    "url",
    [
        "http://infer.internal:8000",
        "http://llama:8000",  # resolves in the caller's namespace: the controller's, not the release's
        "http://llama.team-a:8000",
        "http://llama.team-b.svc:8000",
        "http://llama.team-a.svc.evil.example:8000",
        "http://10.0.0.1:8000",
    ],
)
def test_any_other_host_is_refused_unless_allowed_and_then_gets_no_key(url: str) -> None:
    with pytest.raises(gate_endpoint.Refused) as caught:
        gate_endpoint.resolve(url, release=REL, namespace=NS)
    assert "--allow-gate-host" in caught.value.message and "allowedGateHosts" in caught.value.message
    host = url.split("//")[1].split(":")[0]
    assert not gate_endpoint.resolve(url, release=REL, namespace=NS, allowed_hosts=[host.upper()]).own
    assert not gate_endpoint.resolve(url, release=REL, namespace=NS, typed=True).own


def _with_gate(endpoint: str, key: bool = False) -> profile_mod.Profile:
    doc = strictyaml.parse((ROOT / "profiles" / "dev-tp2.yaml").read_bytes()).data
    doc["metadata"]["name"], doc["metadata"]["namespace"] = REL, NS
    doc["gate"]["endpoint"] = endpoint
    if key:
        doc["gate"]["apiKeySecret"] = {"name": "vllm-api-key"}
    return profile_mod.loads(strictyaml.dump(doc))


def test_a_profile_refuses_an_endpoint_with_a_fragment_at_validation() -> None:
    with pytest.raises(errors.InvalidProfile) as caught:
        _with_gate("http://evil.example/exact/url#")
    assert "gate.endpoint" in caught.value.message and "fragment" in caught.value.message


def test_a_foreign_gate_endpoint_is_refused_before_any_write_with_exit_2() -> None:
    with pytest.raises(errors.InvalidProfile) as caught:
        verify.gate_target(_with_gate("http://infer.internal:8000"), None)
    assert "llama.team-a.svc" in caught.value.message
    assert verify.gate_target(_with_gate("http://infer.internal:8000"), None, ("infer.internal",)) is not None


def test_the_api_key_never_goes_to_a_host_that_is_not_the_releases_own() -> None:
    with pytest.raises(errors.InvalidProfile) as caught:
        verify.gate_target(_with_gate("http://infer.internal:8000", key=True), None, ("infer.internal",))
    assert "sent only to the release's own endpoint" in caught.value.message
    with pytest.raises(errors.UsageError):
        verify.gate_target(_with_gate("http://llama.team-a.svc:8000", key=True), "http://infer.internal:8000")
    own = verify.gate_target(_with_gate("http://llama.team-a.svc:8000", key=True), None)
    assert own is not None and own.own


def test_an_endpoint_typed_on_the_command_line_needs_no_allow_list_but_a_clean_form() -> None:
    prof = _with_gate("http://llama.team-a.svc:8000")
    target = verify.gate_target(prof, "http://127.0.0.1:18000/")
    assert target is not None and target.url == "http://127.0.0.1:18000" and not target.own
    with pytest.raises(errors.UsageError):
        verify.gate_target(prof, "http://127.0.0.1:18000/#")


class _Record:
    """The fields of a stored revision that stored_spec reads."""

    release, namespace, revision = REL, NS, 3

    class model:  # mirrors Record.model
        name = "m"

    def __init__(self, settings: Mapping[str, Any]) -> None:
        self._settings = dict(settings)

    def stored_settings(self) -> dict[str, Any]:
        return self._settings

    def stored_section(self, name: str) -> dict[str, Any]:
        return {}


def test_a_stored_revisions_foreign_endpoint_is_set_aside_for_port_forwards_and_said() -> None:
    forged = _Record({"endpoint": "http://collector.evil:80/x#", "apiKeySecret": {"name": "vllm-api-key"}})
    spec = verify.stored_spec(forged, [], timeout=60, endpoint=None)  # type: ignore[arg-type]
    assert spec.endpoint is None and spec.note is not None and "port-forwards" in spec.note
    assert spec.sends_key  # to the release's own pods, through the port-forwards
    allowed = verify.stored_spec(forged, [], timeout=60, endpoint=None, allowed_hosts=("collector.evil",))  # type: ignore[arg-type]
    assert allowed.endpoint is None  # the fragment is refused whatever the allow-list says
    foreign = _Record({"endpoint": "http://collector.evil:80", "apiKeySecret": {"name": "vllm-api-key"}})
    spec = verify.stored_spec(foreign, [], timeout=60, endpoint=None, allowed_hosts=("collector.evil",))  # type: ignore[arg-type]
    assert spec.endpoint == "http://collector.evil:80" and not spec.sends_key  # allowed, but never the key
    own = verify.stored_spec(_Record({"endpoint": "http://llama.team-a.svc:8000"}), [], timeout=60, endpoint=None)  # type: ignore[arg-type]
    assert own.endpoint == "http://llama.team-a.svc:8000" and own.endpoint_own and own.note is None
