"""What the documentation says deployctl does, checked against what deployctl does.

tests/test_docs.py holds the pages to their links and commands; this module holds their statements
of fact (in the pages and in the profile's Field descriptions, which become the profile reference)
to the code that makes them true:

- what `render -o` does to a directory it rendered into before: the page's before/after listing
  is rendered for real;
- what deployctl's Role and ClusterRole grant: permission tables and sentences, against
  `render.rbac()`;
- profile field paths, profile-shaped YAML blocks and environment variables said to come from a
  Secret: against the profile model and a render of the profile that sets every field;
- "N is vLLM's default": against the default the vLLM flag table of that version records.

The forms each check reads are listed in tests/docblocks.py. Where a sentence once made the docs
wrong, its check is also run on that sentence, so a parser that stops seeing such claims fails.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import os
import pkgutil
import re
import subprocess
import sys
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docblocks
import pytest
import yaml
from pydantic import BaseModel

import orchestrator
from orchestrator import errors
from orchestrator.engines import vllm_flags
from orchestrator.profile import model as profile
from orchestrator.render import chart_values
from orchestrator.render import manifests as render

ROOT = docblocks.ROOT
DEPLOYCTL = str(Path(sys.executable).parent / "deployctl")
PAGES = [page for page in docblocks.pages() if page.exists()]
EVERY_OPTION = ROOT / "tests" / "golden" / "every-option.profile.yaml"
FLAG_TABLES = ROOT / "orchestrator" / "data" / "vllm_flags"
NEGATION = re.compile(r"\b(?:not|no|never|nor|cannot|can't|without)\b")


def _where(page: Path, line: int) -> str:
    return f"{page.relative_to(ROOT)}:{line}"


def _env() -> dict[str, str]:
    # A kubeconfig that does not exist: a command that tried to reach a cluster would fail fast.
    return {**os.environ, "NO_COLOR": "1", "KUBECONFIG": "/nonexistent/kubeconfig"}


def _deployctl(*args: str) -> str:
    result = subprocess.run([DEPLOYCTL, *args], capture_output=True, text=True, timeout=60, env=_env())
    assert result.returncode == 0, f"deployctl {' '.join(args)} exited {result.returncode}:\n{result.stderr}"
    return result.stdout


def _models(root: type[BaseModel]) -> list[type[BaseModel]]:
    """``root`` and every model its fields hold, each once, in field order."""
    seen: list[type[BaseModel]] = []

    def walk(model: type[BaseModel]) -> None:
        if model not in seen:
            seen.append(model)
            for info in model.model_fields.values():
                for sub in _models_in(info.annotation):
                    walk(sub)

    walk(root)
    return seen


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if typing.get_origin(annotation) is dict:
        return []  # a map: its keys are the user's (labels, slo), not fields
    return [model for arg in typing.get_args(annotation) for model in _models_in(arg)]


def _is_map(annotation: Any) -> bool:
    return typing.get_origin(annotation) is dict or any(_is_map(arg) for arg in typing.get_args(annotation))


def descriptions() -> list[tuple[str, str]]:
    """(where, text) of every Field description of the profile and of the Helm chart's values."""
    found = []
    for model in [*_models(profile.Profile), *_models(chart_values.Values)]:
        source = model.__module__.replace(".", "/") + ".py"
        for name, info in model.model_fields.items():
            if info.description:
                found.append((f"{source}: {model.__name__}.{name}", info.description))
    return found


def statements() -> list[tuple[str, str]]:
    """(where, sentence) of the running text of every page and every Field description."""
    found = [(_where(page, line), text) for page in PAGES for line, text in docblocks.sentences(page)]
    found += [(where, text) for where, description in descriptions() for text in docblocks.split_sentences(description)]
    return found


STATEMENTS = statements()


# --- what `render -o` does to a directory ----------------------------------------------------------

_LISTING = re.compile(r"^out/ from (?P<profile>\S+)\s+(?P<after>out/ after (?P<field>[\w.]+): (?P<value>.+?))\s*$")
_RENDERED_FILE = re.compile(r"^\d{2}-[a-z]+-[a-z0-9-]+\.yaml$")


@dataclass
class Listing:
    where: str
    profile: str
    field: str
    value: Any
    before: list[str]
    after: list[str]


def listings() -> list[Listing]:
    """Blocks headed `out/ from PROFILE   out/ after FIELD: VALUE`: a directory before and after."""
    found = []
    for page in PAGES:
        for block in docblocks.blocks(page):
            match = _LISTING.match(block.lines[0]) if block.lines else None
            if match is None:
                continue
            column = match.start("after")
            before = [line[:column].strip() for line in block.lines[1:] if line[:column].strip()]
            after = [line[column:].strip() for line in block.lines[1:] if line[column:].strip()]
            value = yaml.safe_load(match["value"])
            found.append(Listing(_where(page, block.line), match["profile"], match["field"], value, before, after))
    return found


LISTINGS = listings()


def test_the_gitops_page_shows_what_rendering_into_the_same_directory_does() -> None:
    assert any(listing.where.startswith("docs/gitops.md") for listing in LISTINGS), (
        "docs/gitops.md shows no `out/ from PROFILE   out/ after FIELD: VALUE` listing of what `render -o` "
        "does to the files of a directory it rendered into before"
    )


@pytest.mark.parametrize("listing", LISTINGS, ids=lambda listing: listing.where)
def test_rendering_into_the_same_directory_leaves_the_files_the_page_lists(listing: Listing, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    for name in listing.before:
        if not _RENDERED_FILE.match(name):
            (out / name).write_text("# the user's own file\n")
    _deployctl("render", str(ROOT / listing.profile), "--output-dir", str(out))
    files = sorted(p.name for p in out.iterdir())
    assert files == listing.before, f"{listing.where}: rendering {listing.profile} leaves {files}"

    data = yaml.safe_load((ROOT / listing.profile).read_text())
    *parents, leaf = listing.field.split(".")
    node = data
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = listing.value
    variant = tmp_path / "variant.yaml"
    variant.write_text(yaml.safe_dump(data))
    _deployctl("render", str(variant), "--output-dir", str(out))
    files = sorted(p.name for p in out.iterdir())
    assert files == listing.after, (
        f"{listing.where}: rendering again with {listing.field}: {listing.value} leaves {files}"
    )


# --- what deployctl's Role grants -----------------------------------------------------------------

_ROLE = re.compile(r"\bdeployctl's (?:own )?(?P<kind>ClusterRole|Role)\b")
_VERBS = {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
# `get`, `list` and `watch` on `configmaps` (verbs and resource as RBAC spells them)
_SPAN_GRANT = re.compile(
    r"(?P<negation>\b(?:not|no|never|nor|without)\s+)?"
    r"(?P<verbs>`[a-z]+`(?:(?:,\s*|\s+)(?:(?:and|or|nor)\s+)?`[a-z]+`)*)\s+on\s+`(?P<resource>[a-z]+(?:/[a-z]+)?)`"
)
# delete ConfigMaps (a verb, then a kind in words)
_WORD_GRANT = re.compile(
    r"(?P<negation>\b(?:not|no|never|nor|cannot|can't)\s+(?:\w+\s+)?)?"
    r"\b(?P<verb>get|list|watch|create|update|patch|delete)(?:e?s)?\s+(?P<kind>[A-Za-z]+)\b"
)


@functools.cache
def grants() -> frozenset[tuple[str, str, str]]:
    """(Role or ClusterRole, resource, verb) for everything `deployctl render --format rbac` grants."""
    return frozenset(
        (obj["kind"], resource, verb)
        for obj in render.rbac("inference")
        if obj["kind"] in ("Role", "ClusterRole")
        for rule in obj["rules"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    )


def _resource(word: str) -> str | None:
    """The RBAC resource a kind in words names (ConfigMaps → configmaps), if deployctl's RBAC knows it."""
    known = {resource for _, resource, _ in grants()} | {"secrets"}
    word = word.lower()
    for plural in (word, word + "s", word[:-1] + "ies"):
        if plural in known:
            return plural
    return None


@dataclass(frozen=True)
class Permission:
    where: str
    role: str
    resource: str
    verb: str
    granted: bool  # False: the sentence says the role does not grant it
    text: str


def permission_claims(where: str, sentence: str) -> list[Permission]:
    """What a sentence naming deployctl's Role (or ClusterRole) says it grants or does not grant."""
    subject = _ROLE.search(sentence)
    if subject is None:
        return []
    role = subject["kind"]
    claims = []
    for match in _SPAN_GRANT.finditer(sentence):
        verbs = [verb for verb in re.findall(r"`([a-z]+)`", match["verbs"]) if verb in _VERBS]
        claims += [Permission(where, role, match["resource"], v, not match["negation"], sentence) for v in verbs]
    for match in _WORD_GRANT.finditer(sentence):
        resource = _resource(match["kind"])
        if resource is not None:
            claims.append(Permission(where, role, resource, match["verb"], not match["negation"], sentence))
    return claims


def permission_problem(claim: Permission) -> str | None:
    has = (claim.role, claim.resource, claim.verb) in grants()
    if has == claim.granted:
        return None
    says = "grants" if claim.granted else "does not grant"
    return (
        f"{claim.where}: says deployctl's {claim.role} {says} {claim.verb} on {claim.resource}, "
        f"render.rbac() {'does' if has else 'does not'}: {claim.text}"
    )


def _spans(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


PERMISSION_TABLES = [
    table for page in PAGES for table in docblocks.tables(page) if {"role", "resources", "verbs"} <= set(table.header)
]


def test_a_page_tables_what_deployctls_rbac_grants() -> None:
    assert PERMISSION_TABLES, "no page has a `| role | resources | verbs |` table of deployctl's RBAC"


@pytest.mark.parametrize("table", PERMISSION_TABLES, ids=lambda table: _where(table.page, table.line))
def test_a_permission_table_is_exactly_what_render_rbac_grants(table: docblocks.Table) -> None:
    role, resources, verbs = (table.header.index(column) for column in ("role", "resources", "verbs"))
    documented = {
        (row[role], resource, verb)
        for row in table.rows
        for resource in _spans(row[resources])
        for verb in _spans(row[verbs])
    }
    extra, missing = sorted(documented - grants()), sorted(grants() - documented)
    assert not extra and not missing, (
        f"{_where(table.page, table.line)}: the table grants {extra} that render.rbac() does not, "
        f"and leaves out {missing} that it grants"
    )


def test_every_sentence_about_deployctls_role_says_what_render_rbac_grants() -> None:
    claims = [claim for where, text in STATEMENTS for claim in permission_claims(where, text)]
    assert claims, "no sentence names a verb and a resource for deployctl's Role: has the parser gone blind?"
    problems = [problem for claim in claims if (problem := permission_problem(claim))]
    assert not problems, "\n".join(problems)


def test_the_sentence_that_gave_deployctls_role_configmap_deletion_is_caught() -> None:
    old = (
        "RBAC cannot restrict ConfigMap deletion by label, so limit who may delete ConfigMaps in release "
        "namespaces — deployctl's own Role (`deployctl render profiles/prod-tp4.yaml --format rbac`) "
        "includes that verb today."
    )
    claims = permission_claims("docs/airgap.md (before)", old)
    assert [(c.role, c.resource, c.verb, c.granted) for c in claims] == [("Role", "configmaps", "delete", True)]
    assert permission_problem(claims[0]) is not None
    fixed = "deployctl's own Role grants `create` on `configmaps` but not `delete` or `patch` on `configmaps`."
    assert {(c.verb, c.granted) for c in permission_claims("", fixed)} == {
        ("create", True),
        ("delete", False),
        ("patch", False),
    }


# --- profile fields, and what a profile can put into the pods ------------------------------------

_TOP_LEVEL = tuple(profile.Profile.model_fields)
_FIELD_PATH = re.compile(rf"(?<![\w./-])(?:{'|'.join(_TOP_LEVEL)})(?:\.[A-Za-z_]\w*)+")
_FILE_SUFFIXES = {"md", "py", "json", "yaml", "yml", "log", "j2", "txt", "toml", "sh", "tpl"}
# A Kubernetes API group is a domain: `monitoring.coreos.com` is the Prometheus Operator's, not a field.
_API_GROUP_SUFFIXES = {"com", "io", "dev", "org"}
# Fields of a Kubernetes object's metadata that pages name (`metadata.generation` of a Deployment).
_OBJECT_METADATA = {"generation", "uid", "resourceVersion", "annotations", "creationTimestamp", "ownerReferences"}
_ENV_VAR = re.compile(r"`(?P<name>[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)(?:=[^`]*)?`")
_SECRET = re.compile(r"\bSecrets?\b")


def field_problem(path: str) -> str | None:
    """None when ``path`` (``engine.maxModelLen``) is a field of a profile, else what is wrong with it."""
    models: list[type[BaseModel]] = [profile.Profile]
    parts = path.split(".")
    for depth, part in enumerate(parts):
        fields = {name: info for model in models for name, info in model.model_fields.items()}
        if part not in fields:
            parent = ".".join(parts[:depth]) or "a profile"
            return f"{parent} has no field {part!r} (it has {', '.join(sorted(fields))})"
        annotation = fields[part].annotation
        models = _models_in(annotation)
        if not models:
            if depth + 1 < len(parts) and not _is_map(annotation):
                return f"{'.'.join(parts[: depth + 1])} is a value, it has no fields"
            return None
    return None


def _names_something_else(path: str) -> bool:
    """Whether a dotted name is a file (`gate.json`), a module's attribute (`gate.evaluate`), an API
    group (`monitoring.coreos.com`) or a Kubernetes object's metadata (`metadata.generation`) rather
    than a profile field."""
    head, second = path.split(".")[:2]
    last = path.rsplit(".", 1)[1]
    if last in _FILE_SUFFIXES | _API_GROUP_SUFFIXES or (head == "metadata" and second in _OBJECT_METADATA):
        return True
    if importlib.util.find_spec(f"orchestrator.{head}") is not None and _is_module(f"orchestrator.{path}"):
        return True  # a module named relative to the package (`gate.verdict` is orchestrator/gate/verdict.py)
    for name in _modules_called(head):
        # a package's own submodules aside: `gate.endpoint` is a profile field, not gate/endpoint.py
        if hasattr(importlib.import_module(name), second) and f"{name}.{second}" not in sys.modules:
            return True
    return False


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a parent of the name is a module, not a package
        return False


@functools.cache
def _modules_called(head: str) -> tuple[str, ...]:
    """The orchestrator modules a page may mean by ``head``: the module or package of that name, and the
    modules of a package of that name (`gate.evaluate` is in gate/verdict.py)."""
    names = [m.name for m in pkgutil.walk_packages(orchestrator.__path__, "orchestrator.")]
    return tuple(n for n in names if head in n.split(".")[-2:])


def field_paths() -> list[tuple[str, str]]:
    """(where, path) of every dotted profile path in the pages' prose (tables too) and in descriptions."""
    found = [
        (_where(page, line), match.group())
        for page in PAGES
        for line, text in docblocks.prose(page)
        for match in _FIELD_PATH.finditer(text)
    ]
    found += [(where, match.group()) for where, text in descriptions() for match in _FIELD_PATH.finditer(text)]
    return [(where, path) for where, path in found if not _names_something_else(path)]


def _key_paths(node: Any, prefix: str = "") -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            yield path
            yield from _key_paths(value, path)
    elif isinstance(node, list):
        for item in node:
            yield from _key_paths(item, prefix)


def profile_blocks() -> list[tuple[str, dict[str, Any]]]:
    """(where, document) of every YAML block document that is a profile or a piece of one."""
    found = []
    for page in PAGES:
        for block in docblocks.blocks(page):
            if block.lang not in ("yaml", "yml"):
                continue
            for doc in yaml.safe_load_all("\n".join(block.lines)):
                if (
                    isinstance(doc, dict)
                    and doc
                    and set(doc) <= set(_TOP_LEVEL)
                    and doc.get("kind", profile.KIND) == profile.KIND
                ):
                    found.append((_where(page, block.line), doc))
    return found


def test_every_profile_field_path_the_docs_name_exists() -> None:
    paths = field_paths()
    assert len(paths) >= 30, f"only {len(paths)} profile field paths found in the docs: has the pattern gone blind?"
    problems = [f"{where}: {path}: {problem}" for where, path in paths if (problem := field_problem(path))]
    assert not problems, "\n".join(problems)


def test_every_profile_shaped_yaml_block_in_the_docs_fits_the_profile_model() -> None:
    problems = []
    for where, doc in profile_blocks():
        if "apiVersion" in doc and "kind" in doc:  # a whole profile: it must load
            try:
                profile.loads(yaml.safe_dump(doc), source=where)
            except errors.InvalidProfile as e:
                problems.append(str(e))
        else:
            problems += [f"{where}: {path}: {p}" for path in _key_paths(doc) if (p := field_problem(path))]
    assert not problems, "\n".join(problems)


def test_field_paths_are_resolved_against_the_model() -> None:
    assert field_problem("model.source.pvc") is None  # either kind of weights source
    assert field_problem("placement.tolerations.effect") is None  # the items of a list
    assert field_problem("gate.smoke.slo.p95_ttft_ms") is None  # a map's own keys
    assert field_problem("engine.apiKeySecret") is not None
    assert field_problem("engine.port.number") is not None
    assert _names_something_else("gate.json") and _names_something_else("gate.evaluate")
    assert not _names_something_else("gate.endpont")


@dataclass(frozen=True)
class SecretEnv:
    where: str
    name: str
    from_secret: bool  # False: the clause says it does not come from a Secret
    text: str


def secret_env_claims(where: str, sentence: str) -> list[SecretEnv]:
    """Environment variables a clause that names a Secret says come (or do not come) from one."""
    found = []
    for clause in docblocks.clauses(sentence):
        if _SECRET.search(clause):
            for match in _ENV_VAR.finditer(clause):
                negated = NEGATION.search(clause[: match.start()]) is not None
                found.append(SecretEnv(where, match["name"], not negated, clause))
    return found


@functools.cache
def secret_env() -> frozenset[str]:
    """Environment variables a profile can fill from a Secret: those the every-field profile's pods get so."""
    names = set()
    for obj in yaml.safe_load_all(_deployctl("render", str(EVERY_OPTION))):
        if obj and obj["kind"] == "Deployment":
            for container in obj["spec"]["template"]["spec"]["containers"]:
                env = container.get("env", [])
                names |= {e["name"] for e in env if "secretKeyRef" in e.get("valueFrom", {})}
    return frozenset(names)


def secret_env_problem(claim: SecretEnv) -> str | None:
    can = claim.name in secret_env()
    if can == claim.from_secret:
        return None
    if claim.from_secret:
        return (
            f"{claim.where}: `{claim.name}` from a Secret, but no profile field puts it into the pods "
            f"(a profile fills only {sorted(secret_env())} from Secrets): {claim.text}"
        )
    return f"{claim.where}: says `{claim.name}` does not come from a Secret, but a profile can set it so: {claim.text}"


def test_every_environment_variable_the_docs_take_from_a_secret_is_one_a_profile_sets() -> None:
    claims = [claim for where, text in STATEMENTS for claim in secret_env_claims(where, text)]
    assert claims, "no clause names a Secret and an environment variable: has the parser gone blind?"
    problems = [problem for claim in claims if (problem := secret_env_problem(claim))]
    assert not problems, "\n".join(problems)


def test_a_sentence_taking_a_variable_no_profile_fills_from_a_secret_is_caught() -> None:
    old = (
        "`--api-key` in `engine.extraArgs` is refused (it would put a secret into the profile and the records: "
        "set `VLLM_API_KEY` from a Secret instead); only a fixed list of CI variables is recorded."
    )
    claims = secret_env_claims("docs/airgap.md (before)", old)
    assert [(c.name, c.from_secret) for c in claims] == [("VLLM_API_KEY", True)]
    # Once wrong, now true: engine.env takes VLLM_API_KEY from a Secret (the every-field profile does).
    assert secret_env_problem(claims[0]) is None
    assert field_problem("engine.extraArgs") is None and field_problem("engine.env.valueFrom.secretKeyRef") is None
    (other,) = secret_env_claims("docs/x.md", "set `NCCL_SOCKET_IFNAME` from a Secret instead")
    assert secret_env_problem(other) is not None


# --- vLLM's defaults ------------------------------------------------------------------------------

_NUMBER = r"-?\d+(?:\.\d+)?"
_DEFAULT_CLAIMS = (
    re.compile(rf"(?P<value>{_NUMBER})\s+is\s+vLLM's\s+(?:own\s+)?default\b"),
    re.compile(
        r"\bvLLM's\s+(?:own\s+)?default\s+(?:`?(?!(?:is|of)\b)(?P<name>[\w-]+)`?\s+)?"
        rf"(?:is\s+|of\s+|:\s*)?(?P<value>{_NUMBER})\b"
    ),
    re.compile(
        r"\bvLLM(?:\s+\d+(?:\.\d+)*)?\s+defaults\s+(?:`?(?!to\b)(?P<name>[\w-]+)`?\s+)?"
        rf"to\s+(?P<value>{_NUMBER})\b"
    ),
)
_FLAG = re.compile(r"`(--[a-z0-9][a-z0-9-]*)")
_VERSION = re.compile(r"\bvLLM (\d+\.\d+(?:\.\d+)?)\b")
# Claims known to be wrong in text this change may not edit; strict, so the fix has to remove the entry.
KNOWN_WRONG: dict[str, str] = {}


@dataclass(frozen=True)
class DefaultClaim:
    where: str
    flag: str | None
    value: str
    version: str
    text: str


def _flags_of(field: str) -> list[str]:
    """The flags deployctl sets from a profile field (gpuMemoryUtilization), its own spelling first."""
    flags = [flag for flag, source in vllm_flags.reserved_flags().items() if source.endswith(f".{field}")]
    spelled = "--" + re.sub(r"(?<!^)(?=[A-Z])", "-", field).lower()  # gpuMemoryUtilization → --gpu-memory-…
    return sorted(flags, key=lambda flag: flag != spelled)


def _version_named(sentence: str) -> str:
    """The vLLM version a sentence names ("vLLM 0.19" → 0.19.0), else the profile's default one."""
    for named in _VERSION.findall(sentence):
        for version in vllm_flags.known_versions():
            if version == named or version.startswith(named + "."):
                return version
    return profile.DEFAULT_VLLM_VERSION


def default_claims(where: str, sentence: str) -> list[DefaultClaim]:
    """Every "N is vLLM's default" (or "vLLM's default X is N", "vLLM defaults to N") in a sentence.

    The flag is the one the claim names, else the first `--flag` of the sentence, else the one set
    from the field the claim names or (in a Field description) describes.
    """
    found = []
    for pattern in _DEFAULT_CLAIMS:
        for match in pattern.finditer(sentence):
            name = match.groupdict().get("name")
            if name and name.startswith("--"):
                flags = [name]
            else:
                flags = _FLAG.findall(sentence) or _flags_of(name or where.rsplit(".", 1)[-1])
            found.append(
                DefaultClaim(where, flags[0] if flags else None, match["value"], _version_named(sentence), sentence)
            )
    return found


def default_problem(claim: DefaultClaim) -> str | None:
    path = FLAG_TABLES / f"{claim.version}.json"
    table = json.loads(path.read_text())
    says = f"{claim.where}: says {claim.value} is vLLM {claim.version}'s default"
    if claim.flag is None:
        return f"{says}, but names no flag (write it as `--flag`), so it cannot be checked: {claim.text}"
    if claim.flag not in table["flags"]:
        return f"{says} for {claim.flag}, which is not a vLLM {claim.version} flag ({path.relative_to(ROOT)})"
    defaults = table.get("defaults")
    if defaults is None:
        return (
            f"{says} for {claim.flag}, but {path.relative_to(ROOT)} records no defaults, so the claim cannot be "
            "checked: record them in scripts/gen_vllm_flags.py, or give deployctl's own reason for the value"
        )
    if claim.flag not in defaults:
        return f"{says} for {claim.flag}, which {path.relative_to(ROOT)} records no default for"
    recorded = defaults[claim.flag]
    if isinstance(recorded, (int, float)) and not isinstance(recorded, bool):
        same = float(claim.value) == float(recorded)
    else:
        same = str(recorded) == claim.value
    return None if same else f"{says} for {claim.flag}; {path.relative_to(ROOT)} records {recorded}"


DEFAULT_CLAIMS = [claim for where, text in STATEMENTS for claim in default_claims(where, text)]


@pytest.mark.parametrize(
    "claim",
    [
        pytest.param(c, marks=pytest.mark.xfail(strict=True, reason=KNOWN_WRONG[c.where]))
        if c.where in KNOWN_WRONG
        else c
        for c in DEFAULT_CLAIMS
    ],
    ids=lambda claim: claim.where,
)
def test_a_documented_vllm_default_is_the_one_the_flag_table_records(claim: DefaultClaim) -> None:
    problem = default_problem(claim)
    assert problem is None, problem


def test_every_known_wrong_default_claim_is_still_made() -> None:
    gone = sorted(set(KNOWN_WRONG) - {claim.where for claim in DEFAULT_CLAIMS})
    assert not gone, f"no longer claimed, so remove them from KNOWN_WRONG: {gone}"


def test_the_description_that_called_0_9_vllms_default_is_caught() -> None:
    old = "Share of each GPU's memory vLLM may use (`--gpu-memory-utilization`); 0.9 is vLLM's default."
    claims = default_claims("orchestrator/profile/model.py: EngineSpec.gpuMemoryUtilization (before)", old)
    assert [(c.flag, c.value, c.version) for c in claims] == [("--gpu-memory-utilization", "0.9", "0.33.0")]
    assert default_problem(claims[0]) is not None
    comment = "At vLLM's default gpuMemoryUtilization 0.9 the KV cache has no room at all."
    assert [(c.flag, c.value) for c in default_claims("profiles/x.yaml", comment)] == [
        ("--gpu-memory-utilization", "0.9")
    ]


# --- upgrading deployctl itself (docs/upgrading.md) ------------------------------------------------

UPGRADING = ROOT / "docs" / "upgrading.md"
OLD_CRD = ROOT / "e2e" / "fixtures" / "upgrade" / "v0.1.0" / "crd.yaml"  # what 0.1.0 rendered


def _versions_table() -> dict[str, dict[str, str]]:
    """docs/upgrading.md's table of versions: deployctl version → its columns."""
    (table,) = [t for t in docblocks.tables(UPGRADING) if t.header[:2] == ["deployctl", "record format written"]]
    return {row[0]: dict(zip(table.header, row, strict=True)) for row in table.rows}


def test_the_upgrading_table_gives_this_versions_record_formats_crd_and_chart() -> None:
    from orchestrator.controller import crd
    from orchestrator.records import releases

    row = _versions_table()[orchestrator.__version__]
    assert row["record format written"] == str(releases.RECORD_FORMAT)
    assert row["record formats read"] == ", ".join(str(f) for f in releases.RECORD_FORMATS_READ)
    assert row["crd"] == f"{crd.GROUP}/{crd.VERSION}"
    assert row["chart"].startswith(f"{render.CHART_NAME} {orchestrator.__version__} ")


def test_the_upgrading_table_gives_0_1_0s_crd_and_that_it_wrote_the_first_record_format() -> None:
    old = yaml.safe_load(OLD_CRD.read_text(encoding="utf-8"))
    row = _versions_table()["0.1.0"]
    assert row["crd"] == " ".join(f"{old['spec']['group']}/{v['name']}" for v in old["spec"]["versions"])
    assert (row["record format written"], row["record formats read"]) == ("1", "1")


def test_the_page_that_calls_the_crd_unchanged_since_0_1_0_is_right() -> None:
    from click.testing import CliRunner

    from orchestrator.cli import app as cli

    text = " ".join(UPGRADING.read_text(encoding="utf-8").split())
    assert "differs from 0.1.0's in descriptions only" in text, "the page no longer says how the CRD changed"
    said = (
        "it adds `model.measured`, `engine.loadFormat`, `engine.loadStreamer`, `engine.skipMemoryProfiling`, "
        "`engine.compileCache`, `model.verify`, `rollout.warmup`, `rollout.canary`, `monitoring.alerts` and "
        "`monitoring.dashboard`, "
        "the `model.weightsDtype` values "
        "`mxfp4` and `nvfp4`, and the new catalog keys"
    )
    assert said in text, "the page no longer says what the unreleased CRD adds"
    rendered = yaml.safe_load(CliRunner().invoke(cli.main, ["render", "--format", "crd"]).stdout)
    old = yaml.safe_load(OLD_CRD.read_text(encoding="utf-8"))
    model = "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/model/properties"
    engine = "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/engine/properties"
    documented = {
        f"{engine}/loadFormat",
        f"{engine}/loadStreamer",
        f"{engine}/skipMemoryProfiling",
        f"{engine}/compileCache",
        f"{model}/verify",
        "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/rollout/properties/warmup",
        "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/rollout/properties/canary",
        "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/monitoring/properties/alerts",
        "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/monitoring/properties/dashboard",
        "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/monitoring/x-kubernetes-validations",
        f"{model}/measured",
        f"{model}/weightsDtype/enum",
        f"{model}/architecture/x-kubernetes-validations/0/rule",
        f"{model}/architecture/x-kubernetes-validations/0/message",
    }
    assert _differences(_without_descriptions(old), _without_descriptions(rendered)) == documented, (
        "docs/upgrading.md says what the CRD changed since 0.1.0 beyond descriptions, and it changed something "
        "else: say what changed and what a downgrade does"
    )
    assert rendered != old, "the CRD is byte for byte 0.1.0's again: the page can say so"


def _differences(old: Any, new: Any, path: str = "") -> set[str]:
    """The paths where ``new`` differs from ``old``: a key added or removed, a value or list changed."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: set[str] = set()
        for key in old.keys() | new.keys():
            if key not in old or key not in new:
                out.add(f"{path}/{key}")
            else:
                out |= _differences(old[key], new[key], f"{path}/{key}")
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return set().union(*(_differences(a, b, f"{path}/{i}") for i, (a, b) in enumerate(zip(old, new, strict=True))))
    return set() if old == new else {path}


def _without_descriptions(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _without_descriptions(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [_without_descriptions(v) for v in node]
    return node
