"""The command line's pure parts: value parsing, exit statuses, percentiles, output."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from liftbridge_client import errors
from liftbridge_client.cli._commands import cli
from liftbridge_client.cli._connect import ConnectionSettings
from liftbridge_client.cli._exit import ExitStatus, status_for
from liftbridge_client.cli._inputs import split_key
from liftbridge_client.cli._output import counted, iso, message_dict
from liftbridge_client.cli._params import (
    DURATION,
    format_duration,
    parse_duration,
    parse_header,
    parse_positive_duration,
    parse_time_ns,
)
from liftbridge_client.cli._percentiles import percentile, summarize
from liftbridge_client.cli.subscribe import format_message
from liftbridge_client.models import Message


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("1.5s", 1.5),
        ("500ms", 0.5),
        ("30s", 30.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("7d", 604_800.0),
        ("1w", 604_800.0),
        ("2w3d", 1_468_800.0),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "-1", "nan", "5 m", "5x", "m5", "1h-", "1.5.5s", "1y"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


@pytest.mark.parametrize("text", ["7", "1.5", "0.5", "86400"])
def test_a_duration_without_a_unit_is_refused_with_the_fix(text: str) -> None:
    # `--retention-max-age 7` used to mean 7 seconds: a week's data gone in 7 s.
    with pytest.raises(ValueError, match="has no unit") as caught:
        parse_duration(text)
    assert f"{text}s" in str(caught.value)
    assert f"{text}d" in str(caught.value)


def test_positive_durations_and_their_text() -> None:
    assert parse_positive_duration("250ms") == 0.25
    with pytest.raises(ValueError, match="more than 0"):
        parse_positive_duration("0")
    assert [format_duration(s) for s in (0, 0.5, 90, 3600, 604_800, 694_861.5)] == [
        "0s", "500ms", "1m30s", "1h", "1w", "1w1d1h1m1s500ms",
    ]  # fmt: skip
    assert parse_duration(format_duration(694_861.5)) == 694_861.5


@pytest.mark.parametrize(
    "args",
    [
        ["--timeout", "5", "streams", "list"],
        ["streams", "create", "s", "--retention-max-age", "7"],
        ["streams", "create", "s", "--auto-pause-time", "30"],
        ["subscribe", "s", "--since", "10"],
        ["publish", "s", "v", "--ack-wait", "2"],
    ],
)
def test_every_duration_option_refuses_a_bare_number(args: list[str]) -> None:
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert "has no unit" in result.output


def test_every_duration_option_takes_weeks_and_says_its_units_in_help() -> None:
    """Each DURATION option's --help names the units (checked on the click objects)."""
    seen = []
    for path, command in _commands(cli):
        for param in command.params:
            if isinstance(param.type, type(DURATION)) and param.type.name == "duration":
                assert param.type.convert("1w", param, None) == 604_800.0
                seen.append(f"{path} {param.opts[-1]}")
            # A time span given as a plain float (no unit) would slip past the rule.
            assert not isinstance(param.type, click.FloatRange), f"{path} {param.opts}"
            assert "seconds" not in (getattr(param, "help", None) or "").lower(), param.opts
    assert len(seen) == 7, seen
    for args in (["--help"], ["subscribe", "--help"], ["publish", "--help"]):
        out = " ".join(CliRunner().invoke(cli, args).output.split())  # unwrapped
        assert "ms, s, m, h, d, w" in out, args
    create_help = " ".join(CliRunner().invoke(cli, ["streams", "create", "--help"]).output.split())
    assert "Durations need a unit" in create_help


def _commands(group: click.Command, path: str = "") -> list[tuple[str, click.Command]]:
    found = [(path or "liftbridge", group)]
    if isinstance(group, click.Group):
        for name, sub in group.commands.items():
            found += _commands(sub, f"{path} {name}".strip())
    return found


def test_counts_have_the_right_plural() -> None:
    assert counted(1, "message") == "1 message"
    assert counted(0, "message") == "0 messages"
    assert counted(2, "publish", "publishes") == "2 publishes"


def test_times() -> None:
    assert parse_time_ns("1970-01-01T00:00:01Z") == 1_000_000_000
    assert parse_time_ns("1970-01-01T00:00:01") == 1_000_000_000  # no offset: UTC
    assert parse_time_ns("1970-01-01T01:00:01+01:00") == 1_000_000_000
    assert parse_time_ns("1970-01-01T00:00:00.000002Z") == 2000
    assert parse_time_ns("@1.5") == 1_500_000_000
    assert parse_time_ns("@1795438263.682048999") == 1_795_438_263_682_048_999
    for bad in ("yesterday", "@soon", "@inf", "@"):
        with pytest.raises(ValueError, match="time"):
            parse_time_ns(bad)


def test_iso_floors_to_the_microsecond_and_parses_back() -> None:
    ns = 1_795_438_263_682_048_999
    assert iso(ns) == "2026-11-23T12:51:03.682048Z"
    assert parse_time_ns(iso(ns) or "") == ns - 999
    assert iso(0) is None


def test_headers_and_keys() -> None:
    assert parse_header("a=b=c") == ("a", b"b=c")
    assert parse_header("empty=") == ("empty", b"")
    for bad in ("novalue", "=x"):
        with pytest.raises(ValueError, match="name=value"):
            parse_header(bad)
    assert split_key(b"k:v:w", b":") == (b"k", b"v:w")
    assert split_key(b"plain", b":") == (None, b"plain")


@pytest.mark.parametrize(
    ("exc", "status"),
    [
        (errors.InvalidInputError("x"), ExitStatus.USAGE),
        (errors.NoBrokerAvailableError("x"), ExitStatus.UNREACHABLE),
        (errors.UnavailableError("x"), ExitStatus.UNREACHABLE),
        (errors.NotFoundError("x"), ExitStatus.NOT_FOUND),
        (errors.StreamDeletedEnd("x"), ExitStatus.NOT_FOUND),
        (errors.AlreadyExistsError("x"), ExitStatus.ALREADY_EXISTS),
        (errors.AckTimeoutError("x"), ExitStatus.TIMEOUT),
        (errors.DeadlineExceededError("x"), ExitStatus.TIMEOUT),
        (errors.ReadonlyPartitionError("x"), ExitStatus.REFUSED),
        (errors.CursorsDisabledError("x"), ExitStatus.ERROR),
        (errors.FeatureNotSupportedError("x", feature="cursors"), ExitStatus.UNSUPPORTED),
        (OSError("x"), ExitStatus.ERROR),
    ],
)
def test_exit_statuses(exc: BaseException, status: ExitStatus) -> None:
    assert status_for(exc) is status


def test_percentiles() -> None:
    samples = [float(i) for i in range(1, 1001)]
    assert percentile(samples, 50) == 500.0
    assert percentile(samples, 99.9) == 999.0
    assert percentile(samples, 100) == 1000.0
    summary = summarize(list(reversed(samples)))
    assert summary == {
        "min": 1.0,
        "mean": 500.5,
        "p50": 500.0,
        "p95": 950.0,
        "p99": 990.0,
        "p99.9": 999.0,
        "max": 1000.0,
    }
    with pytest.raises(ValueError, match="no samples"):
        percentile([], 50)


def test_message_output_formats() -> None:
    msg = Message(
        "s", 1, 7, b"\xff\x00", key=b"k", timestamp_ns=5_000, headers={"h": b"\xfe", "t": b"v"}
    )
    record = message_dict(msg)
    assert record["key"] == "k"
    assert record["value"] is None
    assert record["value_base64"] == "/wA="
    assert record["headers"] == {"h": {"base64": "/g=="}, "t": "v"}
    assert json.loads(format_message(msg, "json", None)) == record
    assert format_message(msg, "raw", None) == b"\xff\x00"
    line = format_message(msg, "template", "{partition}/{offset} {key} {headers[t]}")
    assert line == b"1/7 k v"


def test_usage_errors_exit_2() -> None:
    runner = CliRunner()
    result = runner.invoke(cli, ["subscribe", "s", "--follow", "--stop-offset", "3"])
    assert result.exit_code == 2
    assert "--follow reads forever" in result.output
    result = runner.invoke(cli, ["streams", "create", "s", "--partitions", "0"])
    assert result.exit_code == 2
    result = runner.invoke(cli, ["--help"])
    assert result.exit_code == 0
    assert "Exit status:" in result.output
    assert isinstance(cli, click.Group)
    assert sorted(cli.commands) == [
        "bench", "cursors", "metadata", "publish", "server", "streams", "subscribe",
    ]  # fmt: skip


def test_the_documented_exit_statuses_are_the_real_ones() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    table = text[text.index("| Status | Meaning |") :].split("\n\n")[0]
    documented = sorted(int(m) for m in re.findall(r"^\| (\d+) \|", table, re.MULTILINE))
    assert documented == sorted(int(s) for s in ExitStatus)
    epilog = cli.epilog or ""
    assert all(f"{int(s)} " in epilog for s in ExitStatus)


def test_without_the_cli_extra_the_command_says_what_to_install() -> None:
    code = (
        "import sys; sys.modules['click'] = None\n"
        "from liftbridge_client.cli import main\n"
        "main(['--help'])\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert result.returncode == 1
    assert "needs the [cli] extra" in result.stderr


def test_connection_settings_repr_hides_nats_credentials() -> None:
    settings = ConnectionSettings(
        brokers=("b:1",), nats_servers=("nats://app:hunter2-SECRET@h:4222",), nats_token="t0k"
    )
    assert "SECRET" not in repr(settings)
    assert "t0k" not in repr(settings)
