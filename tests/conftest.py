"""Shared by every unit test: nothing of the developer's own configuration leaks in."""

from __future__ import annotations

import pathlib

import pytest


@pytest.fixture(autouse=True)
def _no_imported_flag_tables(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    # vLLM flag tables imported with `deployctl engine-flags import` (~/.config/deployctl/flags) would add
    # versions to every "known:" list and check; a test that wants one points DEPLOYCTL_FLAGS_DIR itself.
    monkeypatch.setenv("DEPLOYCTL_FLAGS_DIR", str(tmp_path / "deployctl-flags"))
