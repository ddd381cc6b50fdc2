"""The options the cluster commands share, declared once as pydantic fields and generated into click.

Each option is one annotated field: its description is the ``--help`` text, its default the flag's
default, and a :class:`Flag` says what click needs besides (the flag names, a click type, an
environment variable). A command's model lists its fields in ``--help`` order; :func:`click_options`
turns a model into click options, and :meth:`CommandOptions.parse` validates what click parsed, a
pydantic ``ValidationError`` becoming a usage error that names the flag (guidellm's
``utils/click_pydantic.py`` does the same).
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Annotated, TypeVar

import click
import pydantic

from orchestrator.cli import options as cli_options

if TYPE_CHECKING:
    from orchestrator.apply import pipeline

F = TypeVar("F", bound=Callable[..., object])
M = TypeVar("M", bound="CommandOptions")


@dataclasses.dataclass(frozen=True)
class Flag:
    """What a field cannot say about its click option: the flag names and how click parses the value."""

    decls: tuple[str, ...]
    type: object = None  # a click type or Python type; None: a string (or a switch, for a bool field)
    metavar: str | None = None
    envvar: str | None = None  # a variable besides DEPLOYCTL_<COMMAND>_<OPTION> (cli_options.install_envvars)


def flag(*decls: str, type: object = None, metavar: str | None = None, envvar: str | None = None) -> Flag:
    return Flag(decls, type, metavar, envvar)


class CommandOptions(pydantic.BaseModel):
    """A command's options, as click parsed them; a field is named like click's parameter."""

    # defer_build: the validators are built on first use, not when `deployctl --help` imports the module.
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True, defer_build=True)

    @classmethod
    def parse(cls: type[M], given: Mapping[str, object]) -> M:
        """The model of what click parsed; a value the model refuses is a usage error naming its flag."""
        try:
            return cls.model_validate(dict(given))
        except pydantic.ValidationError as e:
            problem = e.errors()[0]
            name = str(problem["loc"][0]) if problem["loc"] else ""
            field = cls.model_fields.get(name)
            hint = "/".join(_flag_of(field).decls) if field is not None else name
            raise click.BadParameter(problem["msg"], param_hint=f"'{hint}'") from e


def _flag_of(field: pydantic.fields.FieldInfo) -> Flag:
    found = [m for m in field.metadata if isinstance(m, Flag)]
    if not found:
        raise TypeError("every CommandOptions field is Annotated with a Flag")
    return found[0]


def click_options(model: type[CommandOptions]) -> Callable[[F], F]:
    """The decorator adding ``model``'s fields as click options, in the model's order."""

    def decorate(fn: F) -> F:
        for name, field in reversed(model.model_fields.items()):
            fn = _click_option(name, field)(fn)
        return fn

    return decorate


def _click_option(name: str, field: pydantic.fields.FieldInfo) -> Callable[[F], F]:
    spec = _flag_of(field)
    option = functools.partial(
        click.option,
        *spec.decls,
        name,
        help=field.description,
        is_flag=True if field.annotation is bool else None,
        multiple=typing.get_origin(field.annotation) is tuple,
        type=spec.type,
        metavar=spec.metavar,
        envvar=spec.envvar,
    )
    if field.default in (None, False, ()):
        return option()  # click's own "no default": None, False or () as the option is
    return option(default=field.default, show_default=True)


# --- the options, each declared once --------------------------------------------------------------

NAMESPACE_HELP = "Namespace (default: $DEPLOYCTL_NAMESPACE, else the context's, else default)."
PROFILE_NAMESPACE_HELP = "Namespace when the profile has no metadata.namespace (see docs/cli.md)."
LOCK_TTL = cli_options.Duration(5, 3600, integer=True)
DEFAULT_LOCK_TTL = 60

Kubeconfig = Annotated[
    str | None,
    flag("--kubeconfig", type=click.Path(dir_okay=False)),
    pydantic.Field(description="kubeconfig file (default: $KUBECONFIG)."),
]
Context = Annotated[
    str | None, flag("--context"), pydantic.Field(description="kubeconfig context (default: the current one).")
]
Namespace = Annotated[str | None, flag("-n", "--namespace"), pydantic.Field(description=NAMESPACE_HELP)]
ProfileNamespace = Annotated[str | None, flag("-n", "--namespace"), pydantic.Field(description=PROFILE_NAMESPACE_HELP)]
SigningKey = Annotated[
    str | None,
    flag("--signing-key", type=click.Path(dir_okay=False), envvar="DEPLOYCTL_SIGNING_KEY"),
    pydantic.Field(
        description="Private key (PEM, from `deployctl keygen`) that signs new release records; records are then "
        "checked against it."
    ),
]
VerifyKeys = Annotated[
    tuple[str, ...],
    flag("--verify-key", type=click.Path(dir_okay=False), envvar="DEPLOYCTL_VERIFY_KEY"),
    pydantic.Field(
        description="A public key (PEM) whose signatures on release records are trusted; repeatable. "
        "The signing key's own public key is always trusted."
    ),
]
Sets = Annotated[
    tuple[str, ...],
    flag("--set", metavar="KEY=VALUE"),
    pydantic.Field(
        description="Override a profile field before validation, e.g. --set engine.maxNumSeqs=32 (repeatable; VALUE "
        "is read as YAML: quote it to force a string). [N] indexes the effective list, defaults included: "
        "--set placement.tolerations[1].key=dedicated adds a toleration after the default nvidia.com/gpu one; "
        "[0] of a list the profile does not write is refused; replace a list whole with "
        "--set 'placement.tolerations=[{key: dedicated, operator: Exists}]'."
    ),
]
AllowGateHosts = Annotated[
    tuple[str, ...],
    flag("--allow-gate-host", metavar="HOST"),
    pydantic.Field(
        description="A host that the profile's (or a stored revision's) gate.endpoint may name besides the "
        "release's own Service (repeatable). The API key of gate.apiKeySecret goes to the release's own Service only."
    ),
]
Endpoint = Annotated[
    str | None,
    flag("--endpoint"),
    pydantic.Field(description="Reach the server here instead of port-forwarding to each pod."),
]
Timeout = Annotated[
    float | None,
    flag("--timeout", type=cli_options.Duration(1)),
    pydantic.Field(
        description="Overall rollout deadline: 90s, 10m, 1h30m or seconds (default: rollout.progressDeadlineSeconds)."
    ),
]
LockTtl = Annotated[
    int,
    flag("--lock-ttl", type=LOCK_TTL),
    pydantic.Field(description="How long before a lock left by a killed deployctl may be taken over (60, 90s, 5m)."),
]


class Cluster(CommandOptions):
    """Which cluster: ``--kubeconfig`` and ``--context``."""

    kubeconfig: Kubeconfig = None
    context: Context = None


class Signing(CommandOptions):
    """The keys of signed release records: ``--signing-key`` and ``--verify-key``."""

    signing_key: SigningKey = None
    verify_keys: VerifyKeys = ()


class Gate(CommandOptions):
    """`deployctl gate`: the options it shares with apply, which adds its own after them."""

    signing_key: SigningKey = None
    verify_keys: VerifyKeys = ()
    kubeconfig: Kubeconfig = None
    context: Context = None
    allow_gate_hosts: AllowGateHosts = ()
    endpoint: Endpoint = None
    skip_bench: Annotated[
        bool, flag("--skip-bench"), pydantic.Field(description="Skip the smoke benchmark; gate on /health only.")
    ] = False
    sets: Sets = ()
    namespace: ProfileNamespace = None
    timeout: Timeout = None
    lock_ttl: LockTtl = DEFAULT_LOCK_TTL

    def pipeline_options(self) -> pipeline.Options:
        base = cli_options.options(self.kubeconfig, self.context, self.signing_key, self.verify_keys)
        return dataclasses.replace(
            base,
            endpoint=self.endpoint,
            allowed_gate_hosts=self.allow_gate_hosts,
            skip_bench=self.skip_bench,
            timeout=self.timeout,
            lock_ttl=self.lock_ttl,
        )


class Apply(Gate):
    """`deployctl apply`: gate's options, then what only a write does."""

    no_rollback: Annotated[
        bool, flag("--no-rollback"), pydantic.Field(description="Leave a failed revision in place for debugging.")
    ] = False
    create_namespace: Annotated[
        bool, flag("--create-namespace"), pydantic.Field(description="Create the profile's namespace if it is missing.")
    ] = False
    adopt: Annotated[
        bool,
        flag("--adopt"),
        pydantic.Field(
            description="Take over existing objects named like the release but without its label (recorded); "
            "check them first."
        ),
    ] = False
    dry_run: Annotated[
        bool,
        flag("--dry-run"),
        pydantic.Field(
            description="Plan, preflight and a server-side dry-run apply: say what would happen, write nothing."
        ),
    ] = False

    def pipeline_options(self) -> pipeline.Options:
        return dataclasses.replace(
            super().pipeline_options(),
            rollback=not self.no_rollback,
            create_namespace=self.create_namespace,
            adopt=self.adopt,
            dry_run=self.dry_run,
        )


class Rollback(CommandOptions):
    """`deployctl rollback`: which revision, where, and how its rollout is watched and gated."""

    namespace: Namespace = None
    to: Annotated[
        int | None,
        flag("--to", type=int),
        pydantic.Field(description="Revision to restore (default: the last good one before the live one)."),
    ] = None
    kubeconfig: Kubeconfig = None
    context: Context = None
    endpoint: Endpoint = None
    allow_gate_hosts: AllowGateHosts = ()
    timeout: Annotated[
        float | None,
        flag("--timeout", type=cli_options.Duration(1)),
        pydantic.Field(description="Rollout deadline: 90s, 10m, 1h30m or seconds."),
    ] = None
    lock_ttl: Annotated[int, flag("--lock-ttl", type=LOCK_TTL)] = DEFAULT_LOCK_TTL
    signing_key: SigningKey = None
    verify_keys: VerifyKeys = ()

    def pipeline_options(self) -> pipeline.Options:
        base = cli_options.options(self.kubeconfig, self.context, self.signing_key, self.verify_keys)
        return dataclasses.replace(
            base,
            endpoint=self.endpoint,
            allowed_gate_hosts=self.allow_gate_hosts,
            timeout=self.timeout,
            lock_ttl=self.lock_ttl,
        )


class Diff(CommandOptions):
    """`deployctl diff`: the profile's overrides and namespace, and the cluster."""

    sets: Sets = ()
    namespace: ProfileNamespace = None
    kubeconfig: Kubeconfig = None
    context: Context = None


class Release(CommandOptions):
    """`deployctl status` and `history`: where the release lives."""

    namespace: Namespace = None
    kubeconfig: Kubeconfig = None
    context: Context = None

    def resolved_namespace(self) -> str:
        return cli_options.resolve_namespace(self.namespace, self.kubeconfig, self.context).name


def connection(opts: Diff | Release) -> pipeline.Options:
    """The pipeline's Options of a read-only command: the cluster, no keys."""
    return cli_options.options(opts.kubeconfig, opts.context)


# The shared options of the commands whose other options are written by hand.
cluster_options = click_options(Cluster)
signing_options = click_options(Signing)


def field_option(model: type[CommandOptions], name: str) -> Callable[[F], F]:
    """One field of ``model`` as a click option."""
    return _click_option(name, model.model_fields[name])


set_option = field_option(Diff, "sets")
allow_gate_host_option = field_option(Rollback, "allow_gate_hosts")


def namespace_option(help: str = NAMESPACE_HELP) -> Callable[[F], F]:
    """``-n/--namespace`` with the help a command gives it (where the namespace is looked for differs)."""
    return click.option("-n", "--namespace", default=None, help=help)
