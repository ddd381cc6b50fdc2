"""The controller's signing key: read from a Secret in its own namespace at start-up."""

from __future__ import annotations

from collections.abc import Callable

from orchestrator import errors
from orchestrator.kube import Kube
from orchestrator.records import trust as record_trust

Reporter = Callable[[str, str], None]


def signing_keys(kube: Kube, namespace: str, secret: str, report: Reporter) -> record_trust.Keys:
    """The controller's key, from its Secret; without the Secret, records are written unsigned
    (and a release whose records are signed is refused, as by the CLI without a key)."""
    try:
        keys = record_trust.from_secret(kube.get, namespace, secret)
    except errors.Forbidden as e:
        raise errors.Forbidden(
            f"{e.message}. The controller reads its signing key from Secret {namespace}/"
            f"{secret} through the Role deployctl-controller-signing-key "
            "(`deployctl render --format controller`)"
        ) from None
    if keys is None:
        report(
            "keys",
            f"warning: no Secret {namespace}/{secret}: release records are written "
            "unsigned (docs/security.md#signed-records)",
        )
        return record_trust.Keys()
    assert keys.signer is not None
    report("keys", f"signing release records with key {keys.signer.keyid[:16]}")
    return keys
