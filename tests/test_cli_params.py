"""The cluster commands' options model: one declaration per option, generated into click, validated by pydantic.

An option's help is the ``--help`` text and its default the flag's; a value the model refuses is a
usage error naming the flag, never a pydantic traceback.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated

import click
import click.testing
import pydantic
import pytest

from orchestrator.cli import app as cli
from orchestrator.cli import params


def options_of(command: click.Command) -> dict[str, click.Option]:
    return {p.name or "": p for p in command.params if isinstance(p, click.Option)}


@pytest.mark.parametrize(
    ("command", "model"),
    [
        (cli.apply, params.Apply),
        (cli.gate_cmd, params.Gate),
        (cli.rollback, params.Rollback),
        (cli.main.commands["diff"], params.Diff),
        (cli.main.commands["status"], params.Release),
        (cli.main.commands["history"], params.Release),
    ],
)
def test_each_field_is_an_option_with_its_description_and_default(
    command: click.Command, model: type[params.CommandOptions]
) -> None:
    options = options_of(command)
    for field in dataclasses.fields(model):
        spec = params.option_of(model, field.name)
        assert spec is not None and options[field.name].help == spec.help
        assert options[field.name].opts == list(spec.decls)
        if spec.default not in (None, False, ()):
            assert options[field.name].default == spec.default and options[field.name].show_default


def test_apply_and_gate_share_their_options_and_apply_adds_the_writes() -> None:
    gate = [f.name for f in dataclasses.fields(params.Gate)]
    apply = [f.name for f in dataclasses.fields(params.Apply)]
    assert apply[: len(gate)] == gate
    assert apply[len(gate) :] == ["no_rollback", "create_namespace", "adopt", "dry_run"]


def test_parse_gives_the_typed_model() -> None:
    opts = params.Apply.parse({"lock_ttl": 90, "verify_keys": ("a.pem",), "dry_run": True})
    assert isinstance(opts, params.Apply)
    assert (opts.lock_ttl, opts.verify_keys, opts.dry_run, opts.no_rollback) == (90, ("a.pem",), True, False)


def test_parse_refuses_an_option_the_model_does_not_have() -> None:
    with pytest.raises(click.BadParameter) as refused:
        params.Gate.parse({"adopt": True})
    assert refused.value.format_message() == "Invalid value for 'adopt': Unexpected keyword argument"


@dataclasses.dataclass(frozen=True)
class _Picky(params.CommandOptions):
    workers: Annotated[int, pydantic.Field(ge=1)] = params.option("-w", "--workers", default=1, help="Workers.").field()


def test_the_command_gets_its_options_parsed_and_a_refused_value_is_a_usage_error_naming_the_flag() -> None:
    got: list[_Picky] = []

    @click.command()
    @params.takes(_Picky)
    def picky(opts: _Picky) -> None:
        got.append(opts)

    assert click.testing.CliRunner().invoke(picky, ["-w", "3"]).exit_code == 0
    assert got == [_Picky(workers=3)]
    result = click.testing.CliRunner().invoke(picky, ["--workers", "0"])
    assert result.exit_code == 2, result.output
    assert "Invalid value for '-w/--workers'" in result.output and "greater than or equal to 1" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_a_refused_value_exits_1_under_deployctl(monkeypatch: pytest.MonkeyPatch) -> None:
    # deployctl's usage errors exit 1 (2 means "invalid profile" to pipelines, docs/cli.md).
    def refuse(given: object) -> params.Apply:
        raise click.BadParameter("no", param_hint="'--lock-ttl'")

    monkeypatch.setattr(params.Apply, "parse", refuse)
    result = click.testing.CliRunner().invoke(cli.main, ["apply", "profiles/prod-tp4.yaml"], prog_name="deployctl")
    assert result.exit_code == 1 and "Invalid value for '--lock-ttl': no" in result.output
