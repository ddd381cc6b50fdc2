"""Writing a release record: what a new revision is (``Draft``), how it ended (``NewRecord``), and ``append``.

``append`` numbers the record (the last revision + 1, chained to its stored hash), signs it when
the draft carries a signer, and creates its ConfigMap; the API server refuses a second object
with the same name, so two writers can never both get revision N. ``actor`` says who acted.
What a record holds and how it is stored is ``orchestrator.records.releases``.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping

from orchestrator import errors
from orchestrator.profile.model import Profile
from orchestrator.records import attestation, encoding, releases, signing

# A lock (Lease) serialises writers of one release, so a lost race is rare; a few retries cover
# a writer that bypassed the lock without spinning forever against a broken store.
APPEND_ATTEMPTS = 5

# CI variables that say which job acted. An allow-list, never a prefix match: CI_JOB_TOKEN and
# GITHUB_TOKEN sit right next to these and must never reach a record.
CI_VARIABLES = (
    "CI",
    "GITHUB_RUN_ID",
    "GITHUB_REPOSITORY",
    "GITHUB_ACTOR",
    "CI_JOB_ID",
    "CI_PROJECT_PATH",
    "GITLAB_USER_LOGIN",
    "BUILD_ID",
    "JOB_NAME",
)
_CI_VALUE_LIMIT = 200


@dataclasses.dataclass(frozen=True)
class Draft:
    """What a new revision is, for its record: everything but the outcome."""

    release: str
    namespace: str
    manifests: bytes
    profile_text: str
    plan: encoding.JsonObject | None
    model: releases.ModelRef
    image: str
    profile_hash: str
    actor: encoding.JsonObject
    signer: signing.Signer | None = None  # signs the record (None: written unsigned, with a warning)
    canary: encoding.JsonObject | None = None  # the canary's steps and evidence (format 5), once they ran

    @classmethod
    def of_profile(
        cls,
        profile: Profile,
        plan: encoding.JsonObject,
        manifests: bytes,
        profile_text: str,
        actor: encoding.JsonObject,
        signer: signing.Signer | None = None,
    ) -> Draft:
        """A new revision of ``profile``'s release with these manifests, planned as ``plan``."""
        return cls(
            profile.metadata.name,
            profile.metadata.namespace,
            manifests,
            profile_text,
            plan,
            releases.ModelRef(name=profile.model.name, revision=profile.model.revision),
            profile.engine.image,
            profile.spec_hash(),
            actor,
            signer,
        )

    @classmethod
    def of(cls, record: releases.Record, actor: encoding.JsonObject, signer: signing.Signer | None = None) -> Draft:
        """A new revision with the stored bytes of ``record`` (a rollback), by ``actor``."""
        following = cls.following(record, actor, signer, manifests=record.manifests, profile_text=record.profile)
        return dataclasses.replace(following, plan=record.plan)

    @classmethod
    def following(
        cls,
        base: releases.Record,
        actor: encoding.JsonObject,
        signer: signing.Signer | None,
        *,
        manifests: bytes,
        profile_text: str,
    ) -> Draft:
        """A revision that plans nothing of its own (an uninstall, a trust step, a rollback): it keeps
        ``base``'s release, model, image and profile hash, with these manifests and profile text."""
        return cls(
            base.release,
            base.namespace,
            manifests,
            profile_text,
            None,
            base.model,
            base.image,
            base.profile_hash,
            actor,
            signer,
        )

    def record(
        self,
        kube: releases.Cluster,
        *,
        outcome: releases.Outcome,
        description: str,
        gate: encoding.JsonObject | None = None,
        failure: dict[str, str] | None = None,
        observed: list[encoding.JsonObject] | None = None,
        rollback_of: int | None = None,
        time_to_serving: encoding.JsonObject | None = None,
    ) -> releases.Record:
        """Append this revision's record, ended as ``outcome`` (``append``)."""
        new = NewRecord(
            self, outcome, description, gate, failure, rollback_of, observed, time_to_serving=time_to_serving
        )
        return append(kube, new)


@dataclasses.dataclass(frozen=True)
class NewRecord:
    """A record to append: the revision (``draft``), how it ended, and what only some records hold."""

    draft: Draft
    outcome: releases.Outcome
    description: str
    gate: encoding.JsonObject | None = None  # GateReport.to_json()
    failure: dict[str, str] | None = None  # {"class": ..., "message": ...}
    rollback_of: int | None = None
    observed: list[encoding.JsonObject] | None = None  # startup_log.Observation.to_json() per new pod
    deleted: list[str] | None = None  # an uninstall's objects, as "Kind/name"
    trust: Mapping[str, object] | None = None  # a trust step's {"up_to": N, "head": hash} (trust.TrustBody)
    time_to_serving: encoding.JsonObject | None = None  # TimeToServing.to_json(): format 4

    def body(self, revision: int, timestamp: str, prev_hash: str) -> encoding.JsonObject:
        """The ``record.json`` of this record as revision ``revision`` after the record hashed ``prev_hash``."""
        draft = self.draft
        body: encoding.JsonObject = {
            "release": draft.release,
            "namespace": draft.namespace,
            "revision": revision,
            "outcome": self.outcome,
            "description": self.description,
            "timestamp": timestamp,
            "actor": draft.actor,
            "model": draft.model.model_dump(),
            "image": draft.image,
            "profile_hash": draft.profile_hash,
            "profile": draft.profile_text,
            "plan": draft.plan,
            "gate": self.gate,
            "failure": self.failure,
            "rollback_of": self.rollback_of,
            "manifests_sha256": encoding.sha256(draft.manifests),
            "prev_hash": prev_hash,
            "format": releases.RECORD_FORMAT,
        }
        # Left out when None, as the model leaves them out (releases.Record.body), so older hashes stay.
        optional = {
            "observed": self.observed,
            "deleted": self.deleted,
            "trust": self.trust,
            "time_to_serving": self.time_to_serving,
            "canary": draft.canary,
        }
        body.update({key: value for key, value in optional.items() if value is not None})
        return body


def append(kube: releases.Cluster, new: NewRecord, *, now: datetime.datetime | None = None) -> releases.Record:
    """Store ``new`` as the next revision of its release and return it, signed by its draft's signer when given.

    The next number is the last one + 1 and ``prev_hash`` is the last record's stored hash (so an
    earlier edit that did not update the chain stays visible). If another writer took that number
    first, the API server answers Conflict and we re-read and try the next one.
    """
    draft = new.draft
    release, namespace = draft.release, draft.namespace
    timestamp = (now or datetime.datetime.now(datetime.timezone.utc)).astimezone(datetime.timezone.utc)
    for _ in range(APPEND_ATTEMPTS):
        history = releases.load_history(kube, release, namespace)
        last = history[-1] if history else None
        revision = last.revision + 1 if last else 1
        body = new.body(revision, timestamp.strftime("%Y-%m-%dT%H:%M:%SZ"), last.hash if last else "")
        try:
            envelope = attestation.sign(body, draft.manifests, draft.signer) if draft.signer is not None else None
            digest = encoding.sha256(encoding.canonical_json(body))
            record = releases.record_from_body(body, hash=digest, manifests=draft.manifests, envelope=envelope)
        except (TypeError, ValueError) as e:  # ValueError: pydantic's, or canonical_json's for NaN
            raise errors.UsageError(
                f"cannot record revision {revision} of {release!r}: {e}. "
                "The plan, gate report and actor must be plain JSON objects (no NaN, no other types)"
            ) from e
        try:
            kube.create(releases.to_configmap(record))
        except errors.Conflict:
            name = releases.record_name(release, record.revision)
            if kube.get("ConfigMap", name, namespace) is not None and record.revision not in {
                r.revision for r in releases.load_history(kube, release, namespace)
            }:
                # Not a race: an object holds the name without the record labels, so every retry
                # would meet it again.
                raise errors.AuditFailed(
                    f"ConfigMap {name} in namespace {namespace!r} exists but is not a record of release "
                    f"{release!r} (its labels were changed or removed); inspect it with kubectl before "
                    "deploying"
                ) from None
            continue
        return record
    raise errors.Conflict(
        f"could not store a record for release {release!r} in namespace {namespace!r}: another writer took "
        f"the next revision {APPEND_ATTEMPTS} times in a row. Is a deployctl running without the "
        "release lock?"
    )


def actor(kube_user: str, env: Mapping[str, str]) -> encoding.JsonObject:
    """Who acted: the user the API server authenticated, and the CI job when there is one."""
    ci = {name: env[name][:_CI_VALUE_LIMIT] for name in CI_VARIABLES if env.get(name)}
    return {"user": kube_user, "ci": ci}
