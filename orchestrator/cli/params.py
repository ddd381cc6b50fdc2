"""The options the cluster commands share, each declared once, generated into click and validated
by pydantic.

An :class:`Option` holds what a user sees of one option: its flag names, default and ``--help``
text, and how click parses it. A command's options are a frozen dataclass whose fields are such
options, in ``--help`` order (apply adds its own to gate's); :func:`takes` adds the class's click
options to a command and hands the command one typed object, which :meth:`CommandOptions.parse`
validates with pydantic, a ``ValidationError`` becoming a usage error that names the flag
(guidellm's ``utils/click_pydantic.py`` does the same). The classes are stdlib dataclasses, not pydantic
models: `deployctl --help` builds every command's options at start-up, and importing pydantic then
would cost about as much as the rest of its imports together; pydantic is imported when a command
parses its options.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, ClassVar, Generic, TypeAlias, TypeVar

import click

from orchestrator.cli import options as cli_options

if TYPE_CHECKING:
    from orchestrator.apply import sequence

F = TypeVar("F", bound=Callable[..., object])
M = TypeVar("M", bound="CommandOptions")
T = TypeVar("T")

_OPTION = "deployctl.option"  # the key of a field's Option in its metadata


@dataclasses.dataclass(frozen=True)
class Option(Generic[T]):
    """One option: its flag names, default and help, and how click parses it.

    A bool default makes a switch and a tuple default a repeatable option; any other default but
    None is shown in ``--help``.
    """

    decls: tuple[str, ...]
    default: T
    help: str | None = None
    type: object = None  # a click type or Python type; None: a string
    metavar: str | None = None
    envvar: str | None = None  # a variable besides DEPLOYCTL_<COMMAND>_<OPTION> (cli_options.install_envvars)

    def field(self) -> T:
        """This option as a field of a command's options class."""
        default: T = dataclasses.field(default=self.default, metadata={_OPTION: self})
        return default

    def click_option(self, name: str) -> Callable[[F], F]:
        option = functools.partial(
            click.option,
            *self.decls,
            name,
            help=self.help,
            is_flag=True if isinstance(self.default, bool) else None,
            multiple=isinstance(self.default, tuple),
            type=self.type,
            metavar=self.metavar,
            envvar=self.envvar,
        )
        if self.default is None or self.default is False or self.default == ():
            return option()  # click's own "no default": None, False or () as the option is
        return option(default=self.default, show_default=True)


def option(
    *decls: str,
    default: T,
    help: str | None = None,
    type: object = None,
    metavar: str | None = None,
    envvar: str | None = None,
) -> Option[T]:
    return Option(decls, default, help, type, metavar, envvar)


@dataclasses.dataclass(frozen=True)
class CommandOptions:
    """A command's options as click parsed them; each field is an :class:`Option`, named like click's parameter."""

    # pydantic's config for a stdlib dataclass, as a plain dict so that pydantic is not imported to say it.
    __pydantic_config__: ClassVar[dict[str, str]] = {"extra": "forbid"}

    @classmethod
    def parse(cls: type[M], given: Mapping[str, object]) -> M:
        """The options click parsed, validated; a value refused is a usage error naming its flag."""
        import pydantic  # late: --help never validates

        try:
            return pydantic.TypeAdapter(cls).validate_python(dict(given))
        except pydantic.ValidationError as e:
            problem = e.errors()[0]
            name = str(problem["loc"][0]) if problem["loc"] else ""
            spec = option_of(cls, name)
            hint = "/".join(spec.decls) if spec is not None else name
            raise click.BadParameter(problem["msg"], param_hint=f"'{hint}'") from e


def option_of(model: type[CommandOptions], name: str) -> Option[object] | None:
    """The Option of ``model``'s field ``name``, or None when it has no such field."""
    for field in dataclasses.fields(model):
        if field.name == name:
            spec = field.metadata[_OPTION]
            assert isinstance(spec, Option)
            return spec
    return None


def click_options(model: type[CommandOptions]) -> Callable[[F], F]:
    """The decorator adding ``model``'s fields as click options, in the model's order."""

    def decorate(fn: F) -> F:
        for field in reversed(dataclasses.fields(model)):
            fn = field.metadata[_OPTION].click_option(field.name)(fn)
        return fn

    return decorate


def takes(model: type[CommandOptions]) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """The decorator adding ``model``'s options to a command, which gets them parsed as ``opts``."""

    def decorate(fn: Callable[..., None]) -> Callable[..., None]:
        names = [field.name for field in dataclasses.fields(model)]

        @functools.wraps(fn)
        def wrapper(*args: object, **kwargs: object) -> None:
            given = {name: kwargs.pop(name) for name in names}
            fn(*args, opts=model.parse(given), **kwargs)

        return click_options(model)(wrapper)

    return decorate


Decorator: TypeAlias = Callable[[Callable[..., None]], Callable[..., None]]


def command_over(model: type[CommandOptions], argument: Decorator, output: Decorator | None = None) -> Decorator:
    """Everything a command over an options model carries, stacked in one place: its argument (a
    profile path or a release name), ``model``'s options, ``-o`` and the one-paragraph error handling."""
    output_decorator = output or cli_options.output_option()

    def decorate(fn: Callable[..., None]) -> Callable[..., None]:
        return argument(takes(model)(output_decorator(cli_options.handles_errors(fn))))

    return decorate


RELEASE_NAME = click.argument("name")


# --- the options, each declared once --------------------------------------------------------------

VERIFY_KEY_HELP = (
    "A public key (PEM) whose signatures on release records are trusted; repeatable. "
    "The signing key's own public key is always trusted."
)
NAMESPACE_HELP = "Namespace (default: $DEPLOYCTL_NAMESPACE, else the context's, else default)."
LOCK_TTL = cli_options.Duration(5, 3600, integer=True)
DEFAULT_LOCK_TTL = 60

KUBECONFIG = option(
    "--kubeconfig", default=None, type=click.Path(dir_okay=False), help="kubeconfig file (default: $KUBECONFIG)."
)
CONTEXT = option("--context", default=None, help="kubeconfig context (default: the current one).")
NAMESPACE = option("-n", "--namespace", default=None, help=NAMESPACE_HELP)
PROFILE_NAMESPACE = option(
    "-n", "--namespace", default=None, help="Namespace when the profile has no metadata.namespace (see docs/cli.md)."
)
KEY_FILE = click.Path(dir_okay=False)
SIGNING_KEY = option(
    "--signing-key",
    default=None,
    type=KEY_FILE,
    envvar="DEPLOYCTL_SIGNING_KEY",
    help="Private key (PEM, from `deployctl keygen`) that signs new release records; records are then "
    "checked against it.",
)
VERIFY_KEYS: Option[tuple[str, ...]] = option(
    "--verify-key", default=(), type=KEY_FILE, envvar="DEPLOYCTL_VERIFY_KEY", help=VERIFY_KEY_HELP
)
SETS: Option[tuple[str, ...]] = option(
    "--set",
    default=(),
    metavar="KEY=VALUE",
    help="Override a profile field before validation, e.g. --set engine.maxNumSeqs=32 (repeatable; VALUE "
    "is read as YAML: quote it to force a string). [N] indexes the effective list, defaults included: "
    "--set placement.tolerations[1].key=dedicated adds a toleration after the default nvidia.com/gpu one; "
    "[0] of a list the profile does not write is refused; replace a list whole with "
    "--set 'placement.tolerations=[{key: dedicated, operator: Exists}]'.",
)
ALLOW_GATE_HOSTS: Option[tuple[str, ...]] = option(
    "--allow-gate-host",
    default=(),
    metavar="HOST",
    help="A host that the profile's (or a stored revision's) gate.endpoint may name besides the "
    "release's own Service, and that rollout.canary.metrics.prometheusUrl may name (repeatable). The API key of "
    "gate.apiKeySecret goes to the release's own Service only.",
)
ENDPOINT = option("--endpoint", default=None, help="Reach the server here instead of port-forwarding to each pod.")
TIMEOUT: Option[float | None] = option(
    "--timeout",
    default=None,
    type=cli_options.Duration(1),
    help="Overall rollout deadline: 90s, 10m, 1h30m or seconds (default: rollout.progressDeadlineSeconds).",
)
LOCK_TTL_OPTION = option(
    "--lock-ttl",
    default=DEFAULT_LOCK_TTL,
    type=LOCK_TTL,
    help="How long before a lock left by a killed deployctl may be taken over (60, 90s, 5m).",
)


@dataclasses.dataclass(frozen=True)
class Cluster(CommandOptions):
    """Which cluster: ``--kubeconfig`` and ``--context``."""

    kubeconfig: str | None = KUBECONFIG.field()
    context: str | None = CONTEXT.field()


@dataclasses.dataclass(frozen=True)
class Signing(CommandOptions):
    """The keys of signed release records: ``--signing-key`` and ``--verify-key``."""

    signing_key: str | None = SIGNING_KEY.field()
    verify_keys: tuple[str, ...] = VERIFY_KEYS.field()


@dataclasses.dataclass(frozen=True)
class Gate(CommandOptions):
    """`deployctl gate`: the options it shares with apply, which adds its own after them."""

    signing_key: str | None = SIGNING_KEY.field()
    verify_keys: tuple[str, ...] = VERIFY_KEYS.field()
    kubeconfig: str | None = KUBECONFIG.field()
    context: str | None = CONTEXT.field()
    allow_gate_hosts: tuple[str, ...] = ALLOW_GATE_HOSTS.field()
    endpoint: str | None = ENDPOINT.field()
    skip_bench: bool = option(
        "--skip-bench", default=False, help="Skip the smoke benchmark; gate on /health only."
    ).field()
    sets: tuple[str, ...] = SETS.field()
    namespace: str | None = PROFILE_NAMESPACE.field()
    timeout: float | None = TIMEOUT.field()
    lock_ttl: int = LOCK_TTL_OPTION.field()

    def pipeline_options(self) -> sequence.Options:
        return dataclasses.replace(_watching(self), skip_bench=self.skip_bench)


@dataclasses.dataclass(frozen=True)
class Apply(Gate):
    """`deployctl apply`: gate's options, then what only a write does."""

    no_rollback: bool = option(
        "--no-rollback", default=False, help="Leave a failed revision in place for debugging."
    ).field()
    create_namespace: bool = option(
        "--create-namespace", default=False, help="Create the profile's namespace if it is missing."
    ).field()
    adopt: bool = option(
        "--adopt",
        default=False,
        help="Take over existing objects named like the release but without its label (recorded); check them first.",
    ).field()
    dry_run: bool = option(
        "--dry-run",
        default=False,
        help="Plan, preflight and a server-side dry-run apply: say what would happen, write nothing.",
    ).field()

    def pipeline_options(self) -> sequence.Options:
        return dataclasses.replace(
            super().pipeline_options(),
            rollback=not self.no_rollback,
            create_namespace=self.create_namespace,
            adopt=self.adopt,
            dry_run=self.dry_run,
        )


@dataclasses.dataclass(frozen=True)
class Rollback(CommandOptions):
    """`deployctl rollback`: which revision, where, and how its rollout is watched and gated."""

    namespace: str | None = NAMESPACE.field()
    to: int | None = option(
        "--to", default=None, type=int, help="Revision to restore (default: the last good one before the live one)."
    ).field()
    kubeconfig: str | None = KUBECONFIG.field()
    context: str | None = CONTEXT.field()
    endpoint: str | None = ENDPOINT.field()
    allow_gate_hosts: tuple[str, ...] = ALLOW_GATE_HOSTS.field()
    timeout: float | None = option(
        "--timeout", default=None, type=cli_options.Duration(1), help="Rollout deadline: 90s, 10m, 1h30m or seconds."
    ).field()
    lock_ttl: int = option("--lock-ttl", default=DEFAULT_LOCK_TTL, type=LOCK_TTL).field()
    signing_key: str | None = SIGNING_KEY.field()
    verify_keys: tuple[str, ...] = VERIFY_KEYS.field()

    def pipeline_options(self) -> sequence.Options:
        return _watching(self)


def _watching(opts: Gate | Rollback) -> sequence.Options:
    """The apply sequences' Options of a command that watches and gates a rollout under the release lock."""
    base = cli_options.options(opts.kubeconfig, opts.context, opts.signing_key, opts.verify_keys)
    return dataclasses.replace(
        base,
        endpoint=opts.endpoint,
        allowed_gate_hosts=opts.allow_gate_hosts,
        timeout=opts.timeout,
        lock_ttl=opts.lock_ttl,
    )


@dataclasses.dataclass(frozen=True)
class Diff(CommandOptions):
    """`deployctl diff`: the profile's overrides and namespace, and the cluster."""

    sets: tuple[str, ...] = SETS.field()
    namespace: str | None = PROFILE_NAMESPACE.field()
    kubeconfig: str | None = KUBECONFIG.field()
    context: str | None = CONTEXT.field()


@dataclasses.dataclass(frozen=True)
class Release(CommandOptions):
    """`deployctl status` and `history`: where the release lives."""

    namespace: str | None = NAMESPACE.field()
    kubeconfig: str | None = KUBECONFIG.field()
    context: str | None = CONTEXT.field()

    def resolved_namespace(self) -> str:
        return cli_options.resolve_namespace(self.namespace, self.kubeconfig, self.context).name


def load(opts: Gate | Diff, profile_path: str) -> cli_options.Loaded:
    """PROFILE with ``--set``, in the namespace ``-n`` (or the environment, or the context) gives."""
    where = cli_options.resolve_namespace(opts.namespace, opts.kubeconfig, opts.context)
    return cli_options.load_profile(profile_path, opts.sets, where)


def connection(opts: Diff | Release) -> sequence.Options:
    """The apply sequences' Options of a read-only command: the cluster, no keys."""
    return cli_options.options(opts.kubeconfig, opts.context)


# The shared options of the commands whose other options are written by hand.
cluster_options = click_options(Cluster)
signing_options = click_options(Signing)
set_option = SETS.click_option("sets")
allow_gate_host_option = ALLOW_GATE_HOSTS.click_option("allow_gate_hosts")


def namespace_option(help: str = NAMESPACE_HELP) -> Callable[[F], F]:
    """``-n/--namespace`` with the help a command gives it (where the namespace is looked for differs)."""
    return click.option("-n", "--namespace", default=None, help=help)
