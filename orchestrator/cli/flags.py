"""`deployctl engine-flags`: the vLLM flag tables `validate` checks engine.extraArgs against.

`import` adds a vLLM version offline, from the text `vllm serve --help=all` prints inside the user's
own image (orchestrator/engines/vllm_help.py parses it); `list` says which versions have a table and where
each comes from. ``orchestrator.cli`` adds the group.
"""

from __future__ import annotations

import pathlib
import re
import sys

import click

from orchestrator import errors, output
from orchestrator.cli import options as cli_options

_VERSION = re.compile(r"^\d+(\.\d+){1,3}([.+-][0-9A-Za-z.+-]+)?$")


@click.group("engine-flags")
def engine_flags() -> None:
    """The vLLM flag tables that engine.extraArgs is checked against: list them, or import one offline."""


@engine_flags.command("import")
@click.argument("help_file", metavar="HELP_FILE", default="-", type=click.Path(dir_okay=False, allow_dash=True))
@click.option(
    "--vllm-version",
    "version",
    required=True,
    help="The vLLM version the help text is of (engine.vllmVersion), e.g. 0.34.0.",
)
@cli_options.handles_errors
def import_(help_file: str, version: str) -> None:
    """Write the flag table of a vLLM version from the output of `vllm serve --help=all`, run in the
    image that serves it (no network needed), so a profile with that engine.vllmVersion validates its
    extraArgs. HELP_FILE: the saved output, or - (the default) for standard input. The table goes to
    $DEPLOYCTL_FLAGS_DIR/vllm/VERSION.json (default ~/.config/deployctl/flags). It checks flag names,
    switches, the number of values and choices; the help text has no value types, so those are not
    checked."""
    from orchestrator.engines import vllm_flags, vllm_help

    if not _VERSION.match(version):
        raise errors.UsageError(f"--vllm-version {version!r} is not a vLLM version such as 0.34.0")
    if version in vllm_flags.shipped_versions():
        raise errors.UsageError(
            f"deployctl ships the table of vLLM {version}, read from vLLM's own parser, and uses it; "
            "an imported one would not be read. Import only versions deployctl lacks"
        )
    text = _read(help_file)
    try:
        doc = vllm_help.parse(text, version)
    except vllm_help.HelpProblem as e:
        source = "standard input" if help_file == "-" else help_file
        raise errors.UsageError(f"{source}: {e}") from e
    target = vllm_flags.user_dir() / "vllm" / f"{version}.json"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(vllm_help.dumps(doc), encoding="utf-8")
    except OSError as e:
        raise errors.UsageError(
            f"cannot write {target}: {e.strerror}; set {vllm_flags.FLAGS_DIR_ENV} to a writable directory"
        ) from e
    switches = sum(1 for o in doc["options"] if o["switch"])
    click.echo(
        f"wrote {target}: vLLM {version}, {len(doc['flags'])} option strings, {len(doc['options'])} options "
        f"({switches} switches, {sum(1 for o in doc['options'] if o.get('choices'))} with choices); value types "
        "are not in the help text and are not checked"
    )


@engine_flags.command("list")
@cli_options.output_option()
@cli_options.handles_errors
def list_(output_format: str) -> None:
    """The vLLM versions with a flag table: shipped with deployctl, or imported."""
    from orchestrator.engines import vllm_flags

    shipped = set(vllm_flags.shipped_versions())
    rows = [
        {
            "engine": "vllm",
            "version": v,
            "source": "shipped" if v in shipped else str(vllm_flags.user_dir() / "vllm" / f"{v}.json"),
        }
        for v in vllm_flags.known_versions()
    ]
    if output_format != "text":
        click.echo(output.emit(rows, output_format))
        return
    click.echo(output.table(["ENGINE", "VERSION", "SOURCE"], [[r["engine"], r["version"], r["source"]] for r in rows]))


def _read(path: str) -> str:
    try:
        raw = sys.stdin.buffer.read() if path == "-" else pathlib.Path(path).read_bytes()
    except OSError as e:
        raise errors.UsageError(f"cannot read {path}: {e.strerror}") from e
    text = raw.decode("utf-8", errors="replace")
    if not text.strip():
        raise errors.UsageError(
            "the help text is empty; run `vllm serve --help=all > help.txt` in the image and pass help.txt"
        )
    return text
