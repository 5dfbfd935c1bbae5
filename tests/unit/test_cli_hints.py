"""The command line says why in its own terms: flags, never the API's keywords.

Empty reads explained (`why_empty`), and the usage errors caught before connecting.
"""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from liftbridge_client.cli._commands import cli
from liftbridge_client.cli._empty import Request, why_empty
from liftbridge_client.cli._exit import ExitStatus

NEWEST_NS = 1_795_438_263_682_048_999  # 2026-11-23T12:51:03.682048Z


def test_an_empty_partition_read_from_its_start_says_so_and_succeeds() -> None:
    message, status = why_empty(Request("s", 1), -1, None)
    assert message == "no messages: partition 1 of stream s is empty (-f waits for new ones)"
    assert status is ExitStatus.OK


def test_an_offset_in_an_empty_partition_cannot_come() -> None:
    message, status = why_empty(Request("s", 0, offset=0), -1, None)
    assert "is empty" in message
    assert status is ExitStatus.NO_MESSAGES


def test_an_offset_past_the_end_names_the_newest_offset() -> None:
    message, status = why_empty(Request("s", 0, offset=99), 41, NEWEST_NS)
    assert message == (
        "no messages: --offset 99 is past the end (the newest message of partition 0 of "
        "stream s is offset 41, from 2026-11-23T12:51:03.682048Z; -f waits for it)"
    )
    assert status is ExitStatus.NO_MESSAGES


def test_a_time_after_the_newest_message_names_both_times() -> None:
    message, status = why_empty(Request("s", 0, time_ns=NEWEST_NS + 10**9), 41, NEWEST_NS)
    assert message.startswith("no messages at or after --time 2026-11-23T12:51:04.682048Z:")
    assert message.endswith("is offset 41, from 2026-11-23T12:51:03.682048Z")
    assert status is ExitStatus.NO_MESSAGES


def test_since_is_said_with_its_unit() -> None:
    message, status = why_empty(Request("s", 0, since=600.0), 3, NEWEST_NS)
    assert message.startswith("no messages in the last 10m (--since):")
    assert status is ExitStatus.NO_MESSAGES


def test_a_stop_time_before_anything_is_explained() -> None:
    message, status = why_empty(Request("s", 2, stop_time_ns=NEWEST_NS), 3, None)
    assert "--stop-time 2026-11-23T12:51:03.682048Z" in message
    assert "partition 2 of stream s is offset 3" in message
    assert status is ExitStatus.NO_MESSAGES


@pytest.mark.parametrize(
    ("args", "says"),
    [
        # Without -f it would stop at the newest message, before any new one: never output.
        (["subscribe", "s", "--new-only"], "add -f (--follow)"),
        (["subscribe", "s", "--new-only", "-n", "1"], "add -f (--follow)"),
        (["subscribe", "s", "--offset", "5", "--stop-offset", "2"], "--stop-offset 2 is before"),
        (["publish", "s", "v", "-t", "nats"], "-t nats needs a NATS server: give --nats URL"),
        (["bench", "-t", "nats"], "-t nats needs a NATS server"),
    ],
)
def test_requests_that_cannot_succeed_are_usage_errors_before_connecting(
    args: list[str], says: str
) -> None:
    # No server listens on this port: the command must fail before trying it.
    result = CliRunner(env={"LIFTBRIDGE_NATS_URL": None}).invoke(
        cli, ["-b", "127.0.0.1:1", "--timeout", "100ms", *args]
    )
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert says in text
    assert not re.search(r"\w+=(True|\[|Transport)", text), text  # no API keywords


def test_new_only_with_follow_or_a_stop_is_accepted() -> None:
    # Past the usage checks it connects, and fails there (nothing listens): status 3.
    for extra in (["-f"], ["--stop-offset", "9"]):
        result = CliRunner().invoke(
            cli, ["-b", "127.0.0.1:1", "--timeout", "200ms", "subscribe", "s", "--new-only", *extra]
        )
        assert result.exit_code == int(ExitStatus.UNREACHABLE), result.output


def test_pause_and_readonly_say_which_partitions() -> None:
    from liftbridge_client.cli.streams import _which

    assert _which("s", ()) == "stream s"
    assert _which("s", (1,)) == "partition 1 of stream s"
    assert _which("s", (2, 0, 2)) == "partitions 0, 2 of stream s"


def test_an_unsupported_feature_is_named_by_its_command_line_flags() -> None:
    from liftbridge_client import errors
    from liftbridge_client.cli._app import error_line

    exc = errors.FeatureNotSupportedError(
        "stop_positions is not supported by broker n1: needs v1.4.0", feature="stop_positions"
    )
    assert error_line(exc) == (
        "FeatureNotSupportedError: subscribe without -f (and --stop-offset, --stop-time) "
        "needs a newer server: stop_positions is not supported by broker n1: needs v1.4.0"
    )
    assert error_line(errors.NotFoundError("no such stream: s")) == (
        "NotFoundError: no such stream: s"
    )


def test_the_feature_flags_table_names_real_features() -> None:
    from liftbridge_client.cli._app import _FEATURE_FLAGS
    from liftbridge_client.features import FEATURE_MAP

    assert set(_FEATURE_FLAGS) <= {spec.name for spec in FEATURE_MAP}


def test_a_bad_duration_from_the_environment_names_the_variable() -> None:
    result = CliRunner(env={"LIFTBRIDGE_TIMEOUT": "5"}).invoke(cli, ["streams", "list"])
    assert result.exit_code == 2
    assert "'5' has no unit: write 5s" in result.output
    assert "(from $LIFTBRIDGE_TIMEOUT)" in result.output
