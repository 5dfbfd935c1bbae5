"""The `liftbridge` command, run as a subprocess against real servers.

Each test runs the installed console script the way a user does (connection from the
LIFTBRIDGE_* environment variables) and checks what it printed, often by parsing
its --json output, and its exit status.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from liftbridge_client.testing import (
    Deployment,
    ServerTLS,
    SingleNode,
    StreamName,
    StreamNames,
    free_ports,
    make_pki,
)

pytestmark = pytest.mark.integration

LIFTBRIDGE = Path(sys.executable).with_name("liftbridge")
TIMEOUT = 60


def run_cli(
    deployment: Deployment,
    *args: str,
    stdin: str | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    environ = dict(
        os.environ,
        LIFTBRIDGE_ADDRS=",".join(deployment.addresses),
        LIFTBRIDGE_NATS_URL=deployment.nats_url,
    )
    environ.pop("TRACEPARENT", None)  # a CI tracer's would change what publish sends
    environ.update(env or {})
    return subprocess.run(
        [str(LIFTBRIDGE), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=environ,
        timeout=TIMEOUT,
        check=False,
    )


Cli = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def cli(liftbridge_server: Deployment) -> Cli:
    """Runs the command; asserts the exit status (``status=``, 0 by default)."""

    def call(*args: str, status: int = 0, **kw: Any) -> subprocess.CompletedProcess[str]:
        result = run_cli(liftbridge_server, *args, **kw)
        assert result.returncode == status, (
            f"liftbridge {' '.join(args)} exited {result.returncode}, expected {status}\n"
            f"stdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-3000:]}"
        )
        return result

    return call


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def test_console_script_is_installed() -> None:
    assert LIFTBRIDGE.exists(), f"{LIFTBRIDGE} missing: the [project.scripts] entry point"


def test_streams_create_list_pause_readonly_delete(cli: Cli, unique_stream: StreamName) -> None:
    name, subject = unique_stream
    cli(
        "streams", "create", name, "--subject", subject, "--partitions", "2",
        "--retention-max-age", "1h", "--segment-max-bytes", "1048576", "--compact",
        "--auto-pause-time", "10m", "--no-encryption",
    )  # fmt: skip
    cli("streams", "create", name, "--subject", subject, "--partitions", "2", "--exist-ok")
    other = cli("streams", "create", name, "--subject", "other", "--exist-ok", status=5)
    assert other.stderr == (
        f"error: AlreadyExistsError: stream '{name}' exists with subject '{subject}', not "
        "'other'; 2 partitions, not 1\n"
    )
    taken = cli("streams", "create", name, "--subject", subject, status=5)
    assert taken.stderr.startswith("error: AlreadyExistsError:")
    assert "Traceback" not in taken.stderr

    listed = {s["name"]: s for s in json.loads(cli("streams", "list", "--json").stdout)}
    assert listed[name]["subject"] == subject
    assert [p["partition"] for p in listed[name]["partitions"]] == [0, 1]
    assert name in cli("streams", "list").stdout  # the table

    cli("streams", "pause", name, "-p", "1")
    cli("streams", "readonly", name, "-p", "0")
    parts = json.loads(cli("metadata", name, "--json").stdout)["streams"][0]["partitions"]
    assert [(p["paused"], p["readonly"]) for p in parts] == [(False, True), (True, False)]
    refused = cli("publish", name, "x", "-p", "0", "--transport", "grpc", status=7)
    assert "ReadonlyPartitionError" in refused.stderr
    cli("streams", "readonly", name, "-p", "0", "--off")
    cli("publish", name, "x", "-p", "0", "--transport", "grpc")

    cli("streams", "delete", name)
    assert name not in {s["name"] for s in json.loads(cli("streams", "list", "--json").stdout)}
    gone = cli("streams", "delete", name, status=4)
    assert gone.stderr.startswith("error: NotFoundError:")


def test_publish_partitioners_key_round_robin_and_zero(cli: Cli, unique_stream: StreamName) -> None:
    """--partitioner: the key's CRC-32 by default (foo -> 2 of 3), and zero always 0."""
    name, subject = unique_stream
    cli("streams", "create", name, "--subject", subject, "--partitions", "3")
    by_key = json.loads(cli("publish", name, "v", "-k", "foo", "--json").stdout)
    assert list(by_key["partitions"]) == ["2"]
    zero = json.loads(
        cli("publish", name, "v", "-k", "foo", "--partitioner", "zero", "--json").stdout
    )
    assert list(zero["partitions"]) == ["0"]
    rr = cli("publish", name, "a", "b", "c", "--partitioner", "round-robin", "--json").stdout
    assert sorted(json.loads(rr)["partitions"]) == ["0", "1", "2"]


def test_publish_10k_stdin_lines_and_read_them_back(cli: Cli, unique_stream: StreamName) -> None:
    name, subject = unique_stream
    cli("streams", "create", name, "--subject", subject)
    lines = [f"line {i} {uuid.uuid4().hex}" for i in range(10_000)]
    summary = json.loads(cli("publish", name, "--json", stdin="\n".join(lines) + "\n").stdout)
    assert summary["published"] == 10_000
    assert summary["partitions"] == {"0": {"first_offset": 0, "last_offset": 9999}}

    # Default: from the oldest to the newest message at start, then exit.
    raw = cli("subscribe", name).stdout
    assert raw.splitlines() == lines

    records = json_lines(cli("subscribe", name, "--json", "--offset", "9990").stdout)
    assert [r["offset"] for r in records] == list(range(9990, 10_000))
    assert [r["value"] for r in records] == lines[9990:]
    assert all(r["stream"] == name and r["partition"] == 0 for r in records)
    assert all(r["timestamp"].endswith("Z") and r["timestamp_ns"] > 0 for r in records)


def test_subscribe_stop_positions_and_formats(cli: Cli, unique_stream: StreamName) -> None:
    name, subject = unique_stream
    cli("streams", "create", name, "--subject", subject)
    cli("publish", name, *[f"v{i}" for i in range(20)], "--transport", "nats")
    cli("publish", name, "-K", ":", "-H", "trace=abc", "-H", "empty=", stdin="k1:hello\nworld\n")

    stopped = cli(
        "subscribe", name, "--offset", "5", "--stop-offset", "9", "-t", "{offset}={value}"
    )
    assert stopped.stdout.splitlines() == [f"{i}=v{i}" for i in range(5, 10)]
    assert cli("subscribe", name, "-n", "3").stdout.splitlines() == ["v0", "v1", "v2"]
    assert cli("subscribe", name, "--latest").stdout.splitlines() == ["world"]

    keyed = json_lines(cli("subscribe", name, "--offset", "20", "-o", "json").stdout)
    assert [(r["key"], r["value"]) for r in keyed] == [("k1", "hello"), ("", "world")]
    # The publisher's headers only: the server's subject and reply are fields, not repeated.
    assert [r["headers"] for r in keyed] == [{"empty": "", "trace": "abc"}] * 2
    assert "reply_subject" not in keyed[0]

    # By time: from the first keyed message's timestamp (a later process published it).
    since_keyed = cli("subscribe", name, "--time", keyed[0]["timestamp"]).stdout
    assert since_keyed.splitlines() == ["hello", "world"]
    ns = keyed[1]["timestamp_ns"]
    at_unix = f"@{ns // 10**9}.{ns % 10**9:09d}"
    assert cli("subscribe", name, "--time", at_unix).stdout.splitlines() == ["world"]
    # Ten minutes back covers all of them.
    assert len(cli("subscribe", name, "--since", "10m").stdout.splitlines()) == 22

    bad = cli("subscribe", name, "--latest", "--offset", "1", status=2)
    assert "choose one start position" in bad.stderr
    missing = cli("subscribe", name + "-missing", status=4)
    assert missing.stderr.startswith("error: NotFoundError:")


def test_subscribe_never_ends_silently(cli: Cli, unique_stream: StreamName) -> None:
    """Nothing printed: stderr says why; a position no message meets exits 9."""
    name, subject = unique_stream
    cli("streams", "create", name, "--subject", subject, "-p", "2")
    cli("publish", name, "a", "b", "c", "-p", "0")

    past = cli("subscribe", name, "--offset", "99", status=9)
    assert past.stdout == ""
    assert past.stderr.startswith("no messages: --offset 99 is past the end")
    assert f"partition 0 of stream {name} is offset 2, from 20" in past.stderr
    future = cli("subscribe", name, "--time", "2100-01-01T00:00:00Z", status=9)
    assert future.stderr.startswith("no messages at or after --time 2100-01-01T00:00:00")
    # The server refuses a stop time older than the log (INTERNAL): still an empty read.
    old = cli("subscribe", name, "--stop-time", "2001-01-01T00:00:00Z", status=9)
    assert (old.stdout, old.stderr.split(":")[0]) == (
        "",
        "no messages before --stop-time 2001-01-01T00",
    )
    # The newest message is at least a moment old: none in the last millisecond.
    cli("publish", name, "d", "-p", "0")
    time.sleep(0.05)
    recent = cli("subscribe", name, "--since", "1ms", status=9)
    assert recent.stderr.startswith("no messages in the last 1ms (--since):")

    empty = cli("subscribe", name, "-p", "1")  # what there is: nothing, and that is fine
    assert (empty.stdout, empty.stderr.strip()) == (
        "",
        f"no messages: partition 1 of stream {name} is empty (-f waits for new ones)",
    )
    cli("subscribe", name, "-p", "1", "--offset", "0", status=9)

    new_only = cli("subscribe", name, "--new-only", status=2)
    assert "add -f (--follow)" in new_only.stderr
    missing = cli("subscribe", name, "-p", "7", status=4)
    assert missing.stderr.startswith("error: NotFoundError:")


def test_hints_name_the_flags_not_the_api(cli: Cli, unique_stream: StreamName) -> None:
    name, subject = unique_stream
    cli("streams", "create", name, "--subject", subject, "-p", "2")
    cli("publish", name, "a", "-p", "1")
    cli("streams", "pause", name, "-p", "1")

    paused = cli("subscribe", name, "-p", "1", status=1)
    assert paused.stderr == (
        f"error: PartitionPausedEnd: partition 1 of stream {name} is paused: add --resume "
        "to resume it and read\n"
    )
    # Over NATS the paused partition drops the message; the hint names -t grpc.
    dropped = cli("publish", name, "b", "-p", "1", "-t", "nats", "--ack-wait", "1s", status=7)
    assert dropped.stderr.startswith(
        f"error: PartitionPausedError: partition 1 of stream {name} is paused"
    )
    assert "-t grpc" in dropped.stderr
    assert f"liftbridge subscribe {name} -p 1 --resume" in dropped.stderr
    assert cli("subscribe", name, "-p", "1", "--resume").stdout == "a\n"
    # Read past its end, a paused partition ends the read at once (and its leader answers
    # "not the leader"): still the pause hint, not an empty run or NotLeaderError.
    cli("streams", "pause", name, "-p", "1")
    past = cli("subscribe", name, "-p", "1", "--offset", "5", status=1)
    assert past.stderr == paused.stderr

    no_such = cli("publish", name, "x", "-p", "9", status=4)
    assert no_such.stderr == (
        f"error: NotFoundError: stream {name} has no partition 9 (-p 9; its partitions: 0-1)\n"
    )
    for result in (paused, dropped, no_such):
        assert not re.search(r"\w+=(True|\[|Transport)|partition gave", result.stderr)

    # 2,000 pipelined publishes cannot all be acked within 1 ms: the hint names the flag.
    late = cli("publish", name, *["v"] * 2000, "-p", "0", "--ack-wait", "1ms", status=6)
    assert late.stderr.startswith("error: AckTimeoutError: no ack within --ack-wait 1ms")
    assert "publishes failed" in late.stderr
    assert "--ack-wait 30s" in late.stderr
    assert "correlation id" not in late.stderr

    one = cli("publish", name, "solo", "-p", "0")
    assert one.stderr.startswith(f"published 1 message to {name} in ")
    assert cli("streams", "create", name + "-w", "--retention-max-age", "1w").returncode == 0
    cli("streams", "delete", name + "-w")
    unitless = cli("streams", "create", name + "-x", "--retention-max-age", "7", status=2)
    assert "'7' has no unit: write 7s, 7m, 7h, 7d or 7w" in unitless.stderr


def test_metadata_and_cursors(cli: Cli, unique_stream: StreamName) -> None:
    name, subject = unique_stream
    cli("streams", "create", name, "--subject", subject, "-p", "2")
    cli("publish", name, "a", "b", "c", "-p", "1")

    md = json.loads(cli("metadata", "--json").stdout)
    assert md["brokers"]
    assert all(b["address"] for b in md["brokers"])
    ours = next(s for s in md["streams"] if s["name"] == name)
    p1 = ours["partitions"][1]
    assert p1["leader"] == md["brokers"][0]["id"]
    assert p1["isr"] == [p1["leader"]]
    assert (p1["high_watermark"], p1["newest_offset"]) == (2, 2)
    table = cli("metadata", name).stdout
    assert "Brokers" in table
    assert "Partitions" in table
    assert f"{subject}.1" in table
    cli("metadata", name + "-missing", status=4)

    assert cli("cursors", "get", "reader", name, "-p", "1").stdout.strip() == "-1"
    cli("cursors", "set", "reader", name, "2", "-p", "1")
    got = json.loads(cli("cursors", "get", "reader", name, "-p", "1", "--json").stdout)
    assert got == {"cursor": "reader", "stream": name, "partition": 1, "offset": 2}


def test_bench_json(cli: Cli) -> None:
    result = json.loads(cli("bench", "-n", "300", "-s", "64", "--json").stdout)
    assert result["messages"] == 300
    assert result["publish_msgs_per_s"] > 0
    assert result["subscribe_msgs_per_s"] > 0
    lat = result["latency_ms"]
    assert list(lat) == ["min", "mean", "p50", "p95", "p99", "p99.9", "max"]
    ordered = [lat[k] for k in ("min", "p50", "p95", "p99", "p99.9", "max")]
    assert ordered == sorted(ordered)
    assert ordered[0] > 0
    # The temporary stream is gone.
    streams = json.loads(cli("streams", "list", "--json").stdout)
    assert not [s for s in streams if s["name"].startswith("liftbridge-bench-")]


def test_errors_are_one_line_and_debug_shows_the_traceback(liftbridge_server: Deployment) -> None:
    (dead,) = free_ports(1)
    env = {"LIFTBRIDGE_ADDRS": f"127.0.0.1:{dead}", "LIFTBRIDGE_TIMEOUT": "500ms"}
    plain = run_cli(liftbridge_server, "streams", "list", env=env)
    assert plain.returncode == 3, plain.stderr
    assert plain.stderr.startswith("error: NoBrokerAvailableError:")
    assert len(plain.stderr.strip().splitlines()) == 1
    debug = run_cli(liftbridge_server, "--debug", "streams", "list", env=env)
    assert debug.returncode == 3
    assert "Traceback (most recent call last)" in debug.stderr
    # NATS refusing: its reconnect attempts are log records, shown only with --debug; the
    # error names the cause.
    nats_env = {"LIFTBRIDGE_NATS_URL": f"nats://127.0.0.1:{dead}", "LIFTBRIDGE_TIMEOUT": "1s"}
    nats_down = run_cli(liftbridge_server, "publish", "s", "v", env=nats_env)
    assert nats_down.returncode == 3, nats_down.stderr
    assert nats_down.stderr.strip().splitlines() == [nats_down.stderr.strip()], nats_down.stderr
    assert "connection refused" in nats_down.stderr
    # --nats at the broker's gRPC port: a NATS error that says so, not a broker error.
    grpc_port = liftbridge_server.addresses[0]
    wrong = run_cli(liftbridge_server, "--nats", f"nats://{grpc_port}", "publish", "s", "v")
    assert wrong.returncode == 3, wrong.stderr
    assert wrong.stderr.startswith("error: NatsUnreachableError: could not connect to NATS")
    assert "this looks like a Liftbridge gRPC port" in wrong.stderr
    noisy = run_cli(liftbridge_server, "--debug", "publish", "s", "v", env=nats_env)
    assert "Errno 111" in noisy.stderr
    # Both ports free (the defaults may be taken by a developer's own server).
    unknown = run_cli(
        liftbridge_server, "server", "--server-version", "v0.1", "--port", "0", "--nats-port", "0"
    )
    assert unknown.returncode == 1
    assert unknown.stderr.splitlines()[-1].startswith("error: unknown Liftbridge server version")
    usage = run_cli(liftbridge_server, "subscribe", "s", "--since", "soon")
    assert usage.returncode == 2
    assert "not a duration" in usage.stderr


class _ServerRun:
    """`liftbridge server` as a user runs it, on free ports; Ctrl-C (SIGINT) stops it."""

    def __init__(self, *extra: str, ports: tuple[int, int] | None = None) -> None:
        self.grpc_port, self.nats_port = ports or free_ports(2)
        argv = ["--port", str(self.grpc_port), "--nats-port", str(self.nats_port)]
        self.proc = subprocess.Popen(
            [str(LIFTBRIDGE), "server", *argv, *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.local = _Local([f"127.0.0.1:{self.grpc_port}"], f"nats://127.0.0.1:{self.nats_port}")

    def wait_ready(self) -> list[str]:
        """The two lines printed on stdout once the server is up."""
        assert self.proc.stdout is not None
        printed = [self.proc.stdout.readline(), self.proc.stdout.readline()]
        assert printed == [
            f"LIFTBRIDGE_ADDRS=127.0.0.1:{self.grpc_port}\n",
            f"LIFTBRIDGE_NATS_URL=nats://127.0.0.1:{self.nats_port}\n",
        ], self.stop()[1]
        return printed

    def stop(self) -> tuple[int, str]:
        """Ctrl-C; the exit status and everything printed on stderr."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            _, err = self.proc.communicate(timeout=60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode, err


def test_server_command_runs_a_node_until_interrupted() -> None:
    server = _ServerRun()
    try:
        server.wait_ready()
        local = server.local
        # Named as a plain Liftbridge install, not as a test deployment.
        listed = json.loads(run_cli(local, "streams", "list", "--json").stdout)
        assert [(s["name"], s["subject"]) for s in listed] == [
            ("__cursors", "liftbridge-default.cursors")
        ]
        assert "lbtest" not in run_cli(local, "streams", "list").stdout
        name, subject = StreamNames("cli-server")()
        assert run_cli(local, "streams", "create", name, "-s", subject).returncode == 0
        published = run_cli(local, "publish", name, "over-nats")
        assert published.returncode == 0, published.stderr
        assert run_cli(local, "subscribe", name).stdout == "over-nats\n"
    finally:
        status, err = server.stop()
    assert status == 0, err
    flags = f"-b 127.0.0.1:{server.grpc_port} --nats nats://127.0.0.1:{server.nats_port}"
    assert f"connect: liftbridge {flags} COMMAND" in err
    assert "data: temporary, removed on exit" in err
    log_dir = Path(re.search(r"log: (\S+)", err).group(1)).parents[1]  # type: ignore[union-attr]
    assert not log_dir.exists(), "the temporary data directory is removed"
    assert err.rstrip().endswith("stopping\nstopped"), err


def test_server_data_dir_keeps_streams_across_runs(tmp_path: Path) -> None:
    data = tmp_path / "lb-data"
    name, subject = StreamNames("cli-keep")()
    first = _ServerRun("--data-dir", str(data))
    try:
        first.wait_ready()
        created = run_cli(first.local, "streams", "create", name, "-s", subject)
        assert created.returncode == 0, created.stderr
    finally:
        status, err = first.stop()
    assert status == 0, err
    assert f"data: {data} (kept)" in err
    assert (data / "n1" / "data").is_dir()

    # A restart right after Ctrl-C, on the same ports and data.
    second = _ServerRun("--data-dir", str(data), ports=(first.grpc_port, first.nats_port))
    try:
        second.wait_ready()
        listed = json.loads(run_cli(second.local, "streams", "list", "--json").stdout)
        assert name in {s["name"] for s in listed}
    finally:
        status, err = second.stop()
    assert status == 0, err


class _Local:
    """A `Deployment` for servers this test started itself."""

    def __init__(self, addresses: list[str], nats_url: str) -> None:
        self.addresses = addresses
        self.nats_url = nats_url

    def log_tails(self, lines: int = 80) -> dict[str, str]:
        return {}


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[list[str]]:
    """A private tmux server (own socket); killed afterwards."""
    binary = shutil.which("tmux")
    assert binary, "tmux is needed to drive `subscribe --follow` in a terminal"
    base = [binary, "-L", f"lbtest-{uuid.uuid4().hex[:8]}", "-f", "/dev/null"]
    yield base
    subprocess.run([*base, "kill-server"], capture_output=True, check=False)


def _screen(tmux: list[str]) -> str:
    return subprocess.run(
        [*tmux, "capture-pane", "-p", "-t", "follow"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def _wait_screen(tmux: list[str], predicate: Callable[[str], bool], what: str) -> str:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        screen = _screen(tmux)
        if predicate(screen):
            return screen
        time.sleep(0.1)
    raise AssertionError(f"{what} never showed; the screen:\n{_screen(tmux)}")


def test_subscribe_follow_in_a_terminal(
    cli: Cli, liftbridge_server: Deployment, unique_stream: StreamName, tmux: list[str]
) -> None:
    name, subject = unique_stream
    cli("streams", "create", name, "--subject", subject)
    cli("publish", name, "before")
    command = (
        f"LIFTBRIDGE_ADDRS={','.join(liftbridge_server.addresses)} {LIFTBRIDGE} subscribe "
        f"{name} --follow -t '{{offset}}: {{value}}'; echo EXIT=$?; sleep 600"
    )
    subprocess.run(
        [*tmux, "new-session", "-d", "-s", "follow", "-x", "120", "-y", "30", command],
        check=True,
    )
    _wait_screen(tmux, lambda s: "0: before" in s, "the existing message")
    cli("publish", name, "after-1", "after-2")
    _wait_screen(tmux, lambda s: "2: after-2" in s, "messages published while following")
    subprocess.run([*tmux, "send-keys", "-t", "follow", "C-c"], check=True)
    screen = _wait_screen(tmux, lambda s: "EXIT=" in s, "the exit after Ctrl-C")
    # The terminal echoes the Ctrl-C as ^C before the command's own word.
    lines = [line.removeprefix("^C") for line in screen.splitlines() if line.strip()]
    assert lines == ["0: before", "1: after-1", "2: after-2", "interrupted", "EXIT=130"]


DOCS_CLI = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def console_examples(path: Path) -> list[tuple[str, list[str]]]:
    """``(command, expected stdout lines)`` of console blocks marked ``docs-test: console``."""
    examples: list[tuple[str, list[str]]] = []
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        if line.strip() != "<!-- docs-test: console -->":
            continue
        assert lines[i + 1] == "```console", f"{path}:{i + 2}: a console block must follow"
        for body in lines[i + 2 :]:
            if body.startswith("```"):
                break
            if body.startswith("$ "):
                examples.append((body[2:], []))
            else:
                examples[-1][1].append(body)
    return examples


def _matches(expected: str, actual: str) -> bool:
    """``...`` in the docs stands for anything (values that change at every run)."""
    pattern = ".*".join(re.escape(part) for part in expected.split("..."))
    return re.fullmatch(pattern, actual) is not None


def test_docs_cli_examples_run_as_shown(liftbridge_server: Deployment) -> None:
    examples = console_examples(DOCS_CLI)
    assert len(examples) >= 10
    env = dict(
        os.environ,
        PATH=f"{LIFTBRIDGE.parent}{os.pathsep}{os.environ.get('PATH', '')}",
        LIFTBRIDGE_ADDRS=",".join(liftbridge_server.addresses),
    )
    env.pop("LIFTBRIDGE_NATS_URL", None)
    env.pop("TRACEPARENT", None)
    subprocess.run(["liftbridge", "streams", "delete", "greetings"], env=env, check=False)
    for command, expected in examples:
        result = subprocess.run(
            ["bash", "-o", "pipefail", "-c", command],
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
        assert result.returncode == 0, f"$ {command}\n{result.stderr}"
        actual = result.stdout.splitlines()
        assert len(actual) == len(expected), f"$ {command}\n{result.stdout}"
        for want, got in zip(expected, actual, strict=True):
            assert _matches(want, got), f"$ {command}\nexpected: {want}\nprinted:  {got}"


def test_tls_files_and_nats_tls_and_credentials_from_flags_and_environment(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    user, password = "cliuser", "cli-s3cret"
    tls = ServerTLS(pki, client_auth=True)
    with SingleNode(
        base_dir=tmp_path / "node",
        tls=tls,
        nats_tls=ServerTLS(pki, client_auth=True),
        nats_credentials=(user, password),
    ) as node:
        name, subject = StreamNames("cli-tls")()
        grpc_flags = ["--tls-ca", str(pki.ca_cert), "--tls-cert", str(pki.client_cert)]
        grpc_flags += ["--tls-key", str(pki.client_key), "--timeout", "3s"]
        flags = [*grpc_flags, "--nats-tls-ca", str(pki.ca_cert)]
        flags += ["--nats-tls-cert", str(pki.client_cert), "--nats-tls-key", str(pki.client_key)]
        env = {"LIFTBRIDGE_NATS_USER": user, "LIFTBRIDGE_NATS_PASSWORD": password}
        created = run_cli(node, *flags, "streams", "create", name, "-s", subject, env=env)
        assert created.returncode == 0, created.stderr
        published = run_cli(node, *flags, "publish", name, "secret", "-t", "nats", env=env)
        assert published.returncode == 0, published.stderr
        # The same files from the environment.
        env_tls = {
            "LIFTBRIDGE_TLS_CA": str(pki.ca_cert),
            "LIFTBRIDGE_TLS_CERT": str(pki.client_cert),
            "LIFTBRIDGE_TLS_KEY": str(pki.client_key),
            "LIFTBRIDGE_NATS_TLS_CA": str(pki.ca_cert),
            "LIFTBRIDGE_NATS_TLS_CERT": str(pki.client_cert),
            "LIFTBRIDGE_NATS_TLS_KEY": str(pki.client_key),
            **env,
        }
        again = run_cli(node, "publish", name, "again", "-t", "nats", env=env_tls)
        assert again.returncode == 0, again.stderr
        read = run_cli(node, "subscribe", name, env=env_tls)
        assert (read.returncode, read.stdout) == (0, "secret\nagain\n"), read.stderr
        # NATS without its client certificate: refused.
        no_nats_cert = run_cli(
            node, *grpc_flags, "--nats-tls-ca", str(pki.ca_cert), "publish", name, "x", env=env
        )
        assert no_nats_cert.returncode == 3, no_nats_cert.stderr
        # No client certificate: the server refuses the handshake.
        no_cert = run_cli(node, "--tls-ca", str(pki.ca_cert), "--timeout", "2s", "metadata")
        assert no_cert.returncode == 3, no_cert.stderr
        # A wrong NATS password: unreachable, and the password is never printed.
        wrong = {**env, "LIFTBRIDGE_NATS_PASSWORD": "wrong-pass"}
        refused = run_cli(node, *flags, "publish", name, "x", env=wrong)
        assert refused.returncode == 3, refused.stderr
        assert "Authorization Violation" in refused.stderr
        assert "wrong-pass" not in refused.stderr


def test_publish_shows_a_progress_bar_with_the_rate_in_a_terminal(
    cli: Cli, liftbridge_server: Deployment, unique_stream: StreamName, tmux: list[str]
) -> None:
    name, subject = unique_stream
    cli("streams", "create", name, "--subject", subject)
    command = (
        f"seq 1 5000 | LIFTBRIDGE_ADDRS={','.join(liftbridge_server.addresses)} "
        f"{LIFTBRIDGE} publish {name}; echo EXIT=$?; sleep 600"
    )
    subprocess.run(
        [*tmux, "new-session", "-d", "-s", "follow", "-x", "150", "-y", "10", command],
        check=True,
    )
    screen = _wait_screen(tmux, lambda s: "EXIT=" in s, "the end of the publish")
    assert "EXIT=0" in screen
    bar = next(line for line in screen.splitlines() if line.startswith("publishing"))
    assert "5000/5000" in bar
    assert re.search(r"[\d,]+ msg/s", bar), bar
    assert f"published 5000 messages to {name}" in screen


def test_traceparent_of_the_caller_is_carried_by_published_messages(
    cli: Cli, unique_stream: StreamName
) -> None:
    name, subject = unique_stream
    cli("streams", "create", name, "--subject", subject)
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    cli("publish", name, "traced", env={"TRACEPARENT": parent})
    cli("--traceparent", parent, "publish", name, "traced-too", "-t", "grpc")
    cli("publish", name, "plain")
    records = json_lines(cli("subscribe", name, "--json").stdout)
    assert [r["headers"].get("traceparent") for r in records] == [parent, parent, None]
    bad = cli("publish", name, "x", env={"TRACEPARENT": "00-nonsense"}, status=2)
    assert "not a W3C traceparent" in bad.stderr
