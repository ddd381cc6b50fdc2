"""What deployctl's commands share: the group, errors to exit codes, and the options that carry
the kubectl and Helm habits users bring.

One vocabulary for ``-o/--output`` (text, json, yaml), durations written as ``90s``/``10m``/``1h30m``,
the namespace rule (``-n``, else ``DEPLOYCTL_NAMESPACE``, else the kubeconfig context's, else
``default``), a PROFILE argument that reads ``-`` from standard input and completes file paths,
``--set key=value`` overrides, and ``DEPLOYCTL_<COMMAND>_<OPTION>`` environment variables named
after the flag a user types rather than click's parameter name. The cluster options the commands
share (``--kubeconfig``, ``-n``, ``--set``, the signing keys, ...) are declared in
``orchestrator.cli.params``; the commands live in ``orchestrator.cli.app`` and its siblings.
"""

from __future__ import annotations

import difflib
import functools
import gc
import os
import pathlib
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn, TypeAlias, TypeVar, cast

import click

from orchestrator import errors, output, user_files
from orchestrator.errors import ExitCode
from orchestrator.profile import overrides, strictyaml

if TYPE_CHECKING:
    # Types only: at run time these modules are imported by the commands that use them (a fast start).
    from orchestrator.apply import outcome as outcome_mod
    from orchestrator.apply import sequence
    from orchestrator.profile import model as profile_mod

F = TypeVar("F", bound=Callable[..., object])

ENV_PREFIX = "DEPLOYCTL"
NAMESPACE_ENV = "DEPLOYCTL_NAMESPACE"
STDIN = "-"
STDIN_SOURCE = "<stdin>"

# --- the group, errors and outcomes -------------------------------------------------------------------


class _UsageError(click.UsageError):
    exit_code = int(ExitCode.USAGE)


class Group(click.Group):
    """Suggests the closest command for a mistyped one; usage errors exit 1, not click's 2; the
    command list shows each description whole.

    Exit code 2 means "invalid profile" to pipelines (docs/cli.md), so a mistyped option must
    not look like one.
    """

    def make_context(
        self, info_name: str | None, args: list[str], parent: click.Context | None = None, **extra: object
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as e:
            raise _UsageError(e.format_message(), e.ctx) from e

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except click.UsageError as e:
            # format_message, not .message: a missing argument keeps its text there (it was a blank "Error:")
            raise _UsageError(e.format_message(), e.ctx) from e

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name and name not in self.commands and not name.startswith("-"):
            close = difflib.get_close_matches(name, list(self.commands), n=1)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            raise click.UsageError(f"no such command '{name}'.{hint}", ctx)
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # click cuts each description to fit one line and adds "..."; wrap it instead, so that
        # `deployctl --help` says what each command does in full.
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit=10_000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def fail(exc: errors.DeployctlError, fmt: str = "text") -> NoReturn:
    if fmt in ("json", "yaml"):
        click.echo(output.emit({"error": exc.message, "exit_code": int(exc.exit_code)}, fmt))
    click.echo(output.paint("error: ", "red", sys.stderr) + exc.message, err=True)
    sys.exit(int(exc.exit_code))


def handles_errors(fn: F) -> F:
    """Every DeployctlError becomes its message and exit code; nothing else is expected to escape."""

    @functools.wraps(fn)
    def wrapper(*args: object, **kwargs: object) -> object:
        try:
            return fn(*args, **kwargs)
        except errors.DeployctlError as e:
            fmt = kwargs.get("output_format")
            fail(e, fmt if isinstance(fmt, str) else "text")
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)

    return wrapper  # type: ignore[return-value]


def options(
    kubeconfig: str | None, context: str | None, signing_key: str | None = None, verify_keys: Sequence[str] = ()
) -> sequence.Options:
    """The apply sequences' Options for a cluster command (imported late: it pulls in the kubernetes client),
    with the keys of ``--signing-key`` and ``--verify-key`` (docs/security.md#signed-records)."""
    from orchestrator.apply import sequence
    from orchestrator.records import trust as record_trust

    keys = record_trust.load(signing_key, verify_keys)
    return sequence.Options(kubeconfig=kubeconfig, context=context, environ=dict(os.environ), keys=keys)


def finish(outcome: outcome_mod.Outcome, output_format: str) -> None:
    """Print an apply/gate/rollback outcome and exit with its code."""
    if output_format in ("json", "yaml"):
        click.echo(output.emit(outcome.to_json(), output_format))
    else:
        color = "green" if outcome.exit_code == ExitCode.OK else "red"
        click.echo(output.paint(outcome.result.upper(), color) + f": {outcome.message}")
        if outcome.gate:
            click.echo(f"  smoke gate: {outcome.gate.summary()}")
        if outcome.timings:
            phases = ", ".join(f"{k} {v:.1f}s" for k, v in outcome.timings.items())
            click.echo(f"  timings: {phases}")
        for warning in outcome.warnings:
            click.echo(f"  warning: {warning}")
    gc.freeze()  # leave what was allocated so far out of the interpreter's exit collections (~70 ms)
    sys.exit(int(outcome.exit_code))


# --- durations --------------------------------------------------------------------------------------

_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


def parse_duration(text: str) -> float:
    """Seconds in a Go-style duration (``90s``, ``10m``, ``1h30m``, ``250ms``) or a bare number of seconds."""
    value = text.strip()
    try:
        return float(value)
    except ValueError:
        pass
    parts = _DURATION.findall(value)
    if not value or "".join(n + u for n, u in parts) != value:
        raise ValueError(f"{text!r} is not a duration; write it like 90s, 10m or 1h30m, or give a number of seconds")
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)


# click's ParamType is generic from 8.3; the lowest click deployctl supports (8.2) cannot subscript it.
if TYPE_CHECKING:
    _ParamType: TypeAlias = click.ParamType[float, object]
else:
    _ParamType = click.ParamType


class Duration(_ParamType):
    """A click type for every timeout-like option, so ``--timeout 10m`` works wherever a wait is bounded."""

    name = "duration"

    def __init__(self, minimum: float = 0.0, maximum: float | None = None, integer: bool = False) -> None:
        self.minimum = minimum
        self.maximum = maximum
        self.integer = integer  # options the library takes as whole seconds (--lock-ttl)

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "DURATION"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            seconds = float(value)
        else:
            try:
                seconds = parse_duration(str(value))
            except ValueError as e:
                self.fail(str(e), param, ctx)
        # NaN would slip past every comparison below and reach a deadline's arithmetic; no wait here is
        # meant to be endless either.
        if seconds != seconds or abs(seconds) == float("inf"):
            self.fail(f"{value!r} is not a finite duration; give e.g. 90s or 10m", param, ctx)
        if seconds < self.minimum or (self.maximum is not None and seconds > self.maximum):
            upper = f" and at most {_show(self.maximum)}" if self.maximum is not None else ""
            self.fail(f"{value!r} is {_show(seconds)}; give at least {_show(self.minimum)}{upper}", param, ctx)
        if self.integer:
            return round(seconds)
        return seconds


def _show(seconds: float) -> str:
    return f"{seconds:g}s"


# --- -o/--output ------------------------------------------------------------------------------------


class Format(click.Choice[str]):
    """``-o/--output``: the listed formats, hidden deprecated aliases (``table`` for ``text``), and a
    clear message when a value looks like what ``-o`` used to mean on this command (a directory or file).
    """

    def __init__(
        self, choices: Sequence[str], aliases: Mapping[str, str] | None = None, old_meaning: str | None = None
    ) -> None:
        super().__init__(list(choices))
        self.aliases = dict(aliases or {})
        self.old_meaning = old_meaning  # e.g. "write files with --output-dir {value}": -o's meaning before

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> str:
        if isinstance(value, str) and value in self.aliases:
            new = self.aliases[value]
            click.echo(f"warning: --output {value} is deprecated; use --output {new}", err=True)
            return new
        if isinstance(value, str) and value in self.choices:
            return value
        choices = "|".join(str(c) for c in self.choices)
        if self.old_meaning:
            self.fail(f"-o now chooses the format ({choices}); {self.old_meaning.format(value=value)}", param, ctx)
        self.fail(f"{value!r} is not an output format; use one of {choices}", param, ctx)


def output_option(
    choices: Sequence[str] = ("text", "json", "yaml"),
    default: str = "text",
    aliases: Mapping[str, str] | None = None,
    old_meaning: str | None = None,
    help: str | None = None,
) -> Callable[[F], F]:
    if help is None:
        # Said from the choices, so --help never offers a format -o refuses (bench has no yaml).
        machine = "/".join(c for c in choices if c != "text")
        help = f"text for people, {machine} for pipelines." if "text" in choices else f"{machine}."
    return click.option(
        "-o",
        "--output",
        "output_format",
        type=Format(choices, aliases, old_meaning),
        default=default,
        show_default=True,
        help=help,
    )


def renamed_option(old: str, new: str) -> Callable[[F], F]:
    """A hidden ``old`` flag that fails naming its replacement, instead of click's "no such option"."""

    def refuse(ctx: click.Context, param: click.Parameter, value: object) -> None:
        if value is not None:
            raise click.BadParameter(f"{old} was renamed; use {new} {value}", ctx, param)

    return click.option(old, hidden=True, expose_value=False, callback=refuse, envvar=[])


# --- cluster options and the namespace ----------------------------------------------------------------


@dataclass(frozen=True)
class Namespace:
    """The namespace a command works in, and where it came from (for messages)."""

    name: str
    origin: str  # "-n", "DEPLOYCTL_NAMESPACE", "context <name>" or "default"
    explicit: bool  # given on this command (-n or DEPLOYCTL_<COMMAND>_NAMESPACE): contradicting a profile is an error


def resolve_namespace(
    flag: str | None, kubeconfig: str | None, context: str | None, environ: Mapping[str, str] | None = None
) -> Namespace:
    """``-n``, else ``DEPLOYCTL_NAMESPACE``, else the kubeconfig (or ``--context``) context's, else default."""
    env = os.environ if environ is None else environ
    if flag:
        return Namespace(flag, "-n", True)
    if env.get(NAMESPACE_ENV):
        return Namespace(env[NAMESPACE_ENV], NAMESPACE_ENV, False)
    from orchestrator import kube

    found = kube.context_namespace(kubeconfig, context, env)
    if found:
        return Namespace(found[1], f"kubeconfig context {found[0]!r}", False)
    return Namespace("default", "default", False)


# --- PROFILE, stdin and --set -----------------------------------------------------------------------


def profile_argument(required: bool = True) -> Callable[[F], F]:
    """The PROFILE argument, a path (completed as a file by the shell) or ``-`` for standard input;
    ``-f/--filename`` gives the same, as kubectl users type it (``deployctl apply -f profile.yaml``)."""
    path_type = click.Path(dir_okay=True, allow_dash=True)

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: object, **kwargs: object) -> object:
            filename = kwargs.pop("filename", None)
            if filename is not None and kwargs.get("profile_path") is not None:
                raise click.UsageError(
                    f"the profile is given twice ({kwargs['profile_path']} and -f {filename}); give PROFILE or -f"
                )
            if filename is not None:
                kwargs["profile_path"] = filename
            if required and kwargs.get("profile_path") is None:
                raise click.UsageError(
                    "Missing argument 'PROFILE': give a profile file, - to read it from standard input, or -f FILE"
                )
            return fn(*args, **kwargs)

        decorated = click.option(
            "-f",
            "--filename",
            type=path_type,
            metavar="PROFILE",
            help="The profile, kubectl-style: the same as the PROFILE argument (- reads standard input).",
        )(wrapper)
        decorated = click.argument("profile_path", metavar="PROFILE", required=False, type=path_type)(decorated)
        return cast(F, decorated)

    return decorate


@dataclass(frozen=True)
class Loaded:
    """A profile as a command uses it, and the text that records it (the effective profile)."""

    profile: profile_mod.Profile
    text: str  # the file's text, or, when --set or the namespace changed it, the effective profile


def read_profile_bytes(path: str) -> tuple[bytes, str, pathlib.Path | None]:
    """The profile's bytes, the name messages use for it, and the directory relative paths resolve against."""
    if path == STDIN:
        # sys.stdin looked up now: click's CliRunner swaps it in for each invocation.
        # Bounded: `deployctl validate - < /dev/zero` must end (strictyaml refuses what is over the bound).
        return user_files.read_stream(sys.stdin.buffer, "profile", user_files.PROFILE_BYTES), STDIN_SOURCE, None
    p = pathlib.Path(path)
    return user_files.read(p, "profile", user_files.PROFILE_BYTES), str(p), p.resolve().parent


def load_profile(path: str, sets: Sequence[str] = (), namespace: Namespace | None = None) -> Loaded:
    """Read PROFILE (a file or ``-``), apply ``--set`` and the namespace rule, validate.

    The namespace follows kubectl with manifests: the profile's own ``metadata.namespace`` wins over
    the environment and the context; ``-n`` that contradicts it is an error naming both.
    """
    from orchestrator.profile import base as profile_base
    from orchestrator.profile import model as profile_mod

    raw, source, base_dir = read_profile_bytes(path)
    parsed = overrides.parse_all(sets)
    changes: list[str] = [f"--set {s.text}" for s in parsed]
    effective: list[strictyaml.Document] = []

    def hook(doc: strictyaml.Document) -> strictyaml.Document:
        doc = overrides.apply(doc, parsed, functools.partial(profile_base.field_default, profile_mod.Profile))
        if namespace is not None:
            doc = _with_namespace(doc, namespace, source, changes)
        effective.append(doc)
        return doc

    prof = profile_mod.loads(raw, source=source, base_dir=base_dir, transform=hook)
    if changes and effective:
        text = overrides.effective_text(effective[-1].data, source, changes)
    else:
        text = raw.decode("utf-8")
    return Loaded(prof, text)


def _with_namespace(
    doc: strictyaml.Document, namespace: Namespace, source: str, changes: list[str]
) -> strictyaml.Document:
    metadata = doc.data.get("metadata")
    if not isinstance(metadata, dict):
        return doc  # validation names the missing metadata
    own = metadata.get("namespace")
    if own is not None:
        if namespace.explicit and own != namespace.name:
            line = doc.line_of(("metadata", "namespace"))
            where = f" (line {line})" if line else ""
            raise errors.UsageError(
                f"-n {namespace.name} contradicts the profile's metadata.namespace {own}{where} in {source}; "
                f"drop -n, or give -n {own} (the profile's namespace always wins, as with kubectl and a manifest)"
            )
        return doc
    if namespace.name == "default":
        return doc  # the profile's own default: the file's text already says what is deployed
    changes.append(f"metadata.namespace={namespace.name} from {namespace.origin}")
    data = {**doc.data, "metadata": {**metadata, "namespace": namespace.name}}
    origins = {**doc.origins, ("metadata", "namespace"): namespace.origin}
    return strictyaml.Document(data, doc.lines, origins)


# --- DEPLOYCTL_<COMMAND>_<OPTION> ---------------------------------------------------------------------


def walk(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    """Every command under ``group`` with its path of names (``("audit", "verify")``)."""
    for name, cmd in sorted(group.commands.items()):
        yield (*path, name), cmd
        if isinstance(cmd, click.Group):
            yield from walk(cmd, (*path, name))


def env_name(path: Sequence[str], option: click.Option) -> str:
    """``DEPLOYCTL_<COMMAND>_<OPTION>`` from the long flag the user types (``--output-dir`` → ``OUTPUT_DIR``)."""
    longs = [o for o in option.opts if o.startswith("--")]
    flag = (longs[0] if longs else option.opts[0]).lstrip("-")
    return "_".join([ENV_PREFIX, *path, flag]).upper().replace("-", "_")


def click_env_name(path: Sequence[str], option: click.Option) -> str:
    """What click's auto_envvar_prefix alone would read: the Python parameter name, not the flag."""
    return "_".join([ENV_PREFIX, *path, option.name or ""]).upper().replace("-", "_")


def install_envvars(group: click.Group) -> None:
    """Give every option the variable the docs promise, keeping click's own name (``…_OUTPUT_FORMAT``)
    and any variable an option already had (``POD_NAMESPACE``) as later fallbacks."""
    for path, cmd in walk(group):
        for param in cmd.params:
            if not isinstance(param, click.Option) or param.hidden or param.name in (None, "help"):
                continue
            if param.envvar == []:
                continue  # renamed_option: deliberately none
            names = [env_name(path, param), click_env_name(path, param)]
            given = [param.envvar] if isinstance(param.envvar, str) else list(param.envvar or [])
            param.envvar = list(dict.fromkeys(names + given))
