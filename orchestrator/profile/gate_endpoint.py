"""Where the gate may send its requests (``gate.endpoint``), and where the API key may go.

The gate appends its own paths (``/health``, ``/v1/models``, ``/v1/chat/completions``) to the
endpoint, reads the answers into its messages, and sends the key from ``gate.apiKeySecret``. A
profile author, or whoever edits a stored record, chooses the endpoint; so:

* the URL is ``http(s)://host[:port][/prefix]`` and nothing else: no userinfo, no query and no
  fragment, which would make the appended path a query or drop it (``http://any/exact/url#``);
* by default the host is the release's own Service, ``NAME.NAMESPACE.svc`` (or with
  ``.cluster.local``); any other host must be on an allow-list the operator or cluster admin
  owns (``--allow-gate-host``, the policy's ``allowedGateHosts``). An endpoint typed on the
  command line (``--endpoint``) is the operator's own choice and needs no allow-list;
* the API key goes only to the release's own endpoint: its Service, or its pods through port-forwards.

Plain data in and out, on the profile's floor: the profile validates the form, verify decides the host.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
import urllib.parse
from collections.abc import Iterable

FIELD = "gate.endpoint"
# What a cluster's DNS answers for a Service; another cluster domain goes on the allow-list.
_SERVICE_SUFFIXES = ("svc", "svc.cluster.local")
_UNSAFE = re.compile(r"[\s\\\x00-\x1f\x7f-\x9f\u2028\u2029]")
_HOST = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


class Refused(ValueError):
    """The endpoint may not be used; ``message`` says why and what to do instead."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclasses.dataclass(frozen=True)
class Target:
    """An endpoint the gate may use; ``own``: it is the release's own Service, so the API key may go there."""

    url: str
    host: str
    own: bool


def problem(url: str) -> str | None:
    """Why ``url`` can never be a gate endpoint (its form, whatever the host), or None."""
    if _UNSAFE.search(url):
        return f"{url!r} contains whitespace, a backslash or a control character"
    if "#" in url:
        return f"{url!r} has a fragment (#): the paths deployctl appends would be dropped; remove it"
    if "?" in url:
        return f"{url!r} has a query (?): the paths deployctl appends would become part of it; remove it"
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return f"{url!r} must be an http:// or https:// URL, such as http://NAME.NAMESPACE.svc:8000"
    if "@" in parts.netloc:
        return f"{url!r} has user information (user@): credentials never go in the URL; remove it"
    try:
        parts.port  # noqa: B018 - urllib parses the port lazily, and refuses a bad one only here
    except ValueError:
        return f"{url!r} has a port that is not a number from 0 to 65535"
    host = (parts.hostname or "").rstrip(".")
    if not host or not (_HOST.match(host) or _is_ip(host)):
        return f"{url!r} has no valid host name"
    return None


def checked(url: str) -> str:
    """``url`` when it has the form :func:`problem` allows, else the problem as a ValueError (the profile's check)."""
    if (why := problem(url)) is not None:
        raise ValueError(why)
    return url


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def host_names(hosts: Iterable[str]) -> set[str]:
    """Allow-list entries as a URL's host compares with them: trimmed, no trailing dot, lower case."""
    return {h.strip().rstrip(".").lower() for h in hosts if h.strip()}


def own_hosts(release: str, namespace: str) -> tuple[str, ...]:
    """The host names of the release's own Service."""
    return tuple(f"{release}.{namespace}.{suffix}" for suffix in _SERVICE_SUFFIXES)


def resolve(
    url: str,
    *,
    release: str,
    namespace: str,
    allowed_hosts: Iterable[str] = (),
    typed: bool = False,
    source: str = FIELD,
) -> Target:
    """The gate's target for ``url``, or :class:`Refused`. ``typed``: the operator gave it on the command
    line (``--endpoint``), so its host needs no allow-list; the key still goes to the own Service only."""
    why = problem(url)
    if why is not None:
        raise Refused(f"{source}: {why}")
    host = (urllib.parse.urlsplit(url).hostname or "").rstrip(".").lower()
    own = host in own_hosts(release, namespace)
    allowed = host_names(allowed_hosts)
    if not (own or typed or host in allowed):
        service = own_hosts(release, namespace)[0]
        raise Refused(
            f"{source}: {host} is not the release's own Service ({service}) and not on the allow-list of gate "
            f"hosts; point it at http://{service}:PORT, leave it unset (the gate port-forwards to the pods), or "
            f"have the operator allow the host (deployctl --allow-gate-host {host}; the controller: the policy's "
            "allowedGateHosts)"
        )
    return Target(url=url.rstrip("/"), host=host, own=own)


def check_allowed(url: str, allowed_hosts: Iterable[str], source: str, instead: str) -> None:
    """:class:`Refused` unless ``url`` has the form :func:`problem` allows and its host is on the operator's
    allow-list: for another URL a profile makes deployctl query (the canary's Prometheus), which is
    never the release's own Service. ``instead``: what the profile could say rather than allow the host."""
    why = problem(url)
    if why is not None:
        raise Refused(f"{source}: {why}")
    host = (urllib.parse.urlsplit(url).hostname or "").rstrip(".").lower()
    if host not in host_names(allowed_hosts):
        raise Refused(
            f"{source}: {host} is not on the operator's allow-list of hosts deployctl may query for a profile; "
            f"have the operator allow it (deployctl --allow-gate-host {host}; the controller: the policy's "
            f"allowedGateHosts), or {instead}. Nothing was written"
        )


def key_refused(target: Target, release: str, namespace: str, source: str = FIELD) -> str:
    """Why the API key of gate.apiKeySecret is not sent to ``target``."""
    service = own_hosts(release, namespace)[0]
    return (
        f"{source}: {target.host} is not the release's own Service ({service}), and the API key of "
        f"gate.apiKeySecret is sent only to the release's own endpoint; point {source} at http://{service}:PORT "
        "or leave it unset (the gate port-forwards to the pods)"
    )
