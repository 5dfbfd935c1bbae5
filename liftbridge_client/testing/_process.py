"""Child processes with their output in log files, and free loopback ports.

Every process started here is tracked until it is reaped, and an ``atexit`` hook stops the
ones still alive, so an interpreter that exits normally leaks none. On Linux a process
started from the main thread also gets ``PR_SET_PDEATHSIG`` = SIGKILL, so it dies with the
interpreter even when that is killed outright.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from liftbridge_client.testing._config import LOOPBACK

__all__ = ["ServerProcess", "free_ports", "tail"]

_log = logging.getLogger(__name__)

_STOP_TIMEOUT = 15.0
_EXIT_STOP_TIMEOUT = 5.0


def free_ports(count: int) -> list[int]:
    """Return ``count`` distinct TCP ports that are free on 127.0.0.1 right now.

    The sockets are held open together while the kernel picks, so the ports differ.
    """
    with contextlib.ExitStack() as stack:
        sockets = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((LOOPBACK, 0))
            sockets.append(sock)
        return [int(sock.getsockname()[1]) for sock in sockets]


def tail(text: str, lines: int) -> str:
    """The last ``lines`` lines of ``text``."""
    return "\n".join(text.splitlines()[-lines:])


def _death_signal_prefix() -> list[str]:
    """An argv prefix that has Linux SIGKILL the server when this process dies.

    ``setpriv --pdeathsig KILL`` (util-linux) sets the signal and execs the server, so no
    Python ``preexec_fn`` runs between fork and exec: without one, subprocess can use
    vfork, and gRPC's fork handlers (which abort children forked while gRPC threads run)
    never fire. Empty off Linux, without setpriv, or off the main thread (the signal fires
    when the *thread* that started the child exits).
    """
    if not sys.platform.startswith("linux"):
        return []
    if threading.current_thread() is not threading.main_thread():
        return []
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []


def _interruptible_prefix() -> list[str]:
    """An argv prefix that lets SIGINT stop the server although this process ignores it.

    A process started with SIGINT ignored (``nohup cmd &`` from a shell without job
    control, some CI agents) passes that on across exec, and :meth:`ServerProcess.stop`'s
    SIGINT would do nothing: every stop became a SIGKILL after the timeout, skipping the
    server's clean shutdown. ``env --default-signal=INT`` (coreutils >= 8.31) resets it
    before the server starts; empty when SIGINT is not ignored or env cannot do it."""
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        return []
    env = shutil.which("env")
    if env is None or not _env_resets_signals(env):
        return []
    return [env, "--default-signal=INT"]


_ENV_RESETS: dict[str, bool] = {}


def _env_resets_signals(env: str) -> bool:
    if env not in _ENV_RESETS:
        done = subprocess.run(
            [env, "--default-signal=INT", "true"], capture_output=True, check=False
        )
        _ENV_RESETS[env] = done.returncode == 0
    return _ENV_RESETS[env]


class ServerProcess:
    """One server process whose stdout and stderr go to ``log_path`` (appended across runs).

    ``start`` may be called again after the process exited: the log gets a separator line and
    the new run's output after it.
    """

    def __init__(self, name: str, argv: Sequence[str], log_path: Path) -> None:
        """Describe the process; nothing runs before :meth:`start`."""
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self._popen: subprocess.Popen[bytes] | None = None
        self._stopping = False
        self._runs = 0

    def __repr__(self) -> str:
        """Name, pid and state, for test output."""
        state = "running" if self.running else f"exited {self.returncode}"
        return f"<ServerProcess {self.name} pid={self.pid} {state}>"

    @property
    def pid(self) -> int | None:
        """The pid of the current or last run, or None before the first start."""
        return None if self._popen is None else self._popen.pid

    @property
    def running(self) -> bool:
        """True while the process has not exited."""
        return self._popen is not None and self._popen.poll() is None

    @property
    def returncode(self) -> int | None:
        """The exit status of the last run (negative = killed by that signal), or None."""
        return None if self._popen is None else self._popen.poll()

    @property
    def exited_unexpectedly(self) -> bool:
        """True when the last run ended without :meth:`stop` or :meth:`kill` being called."""
        return self._popen is not None and not self.running and not self._stopping

    def start(self) -> None:
        """Start the process; raise RuntimeError if it is already running."""
        if self.running:
            raise RuntimeError(f"{self.name} is already running (pid {self.pid})")
        self._reap()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._runs += 1
        with self.log_path.open("ab") as log:
            if self._runs > 1:
                log.write(f"\n===== {self.name}: start #{self._runs} =====\n".encode())
                log.flush()
            # The child keeps its own copy of the descriptor; ours closes with the block.
            self._popen = subprocess.Popen(
                [*_death_signal_prefix(), *_interruptible_prefix(), *self.argv],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._stopping = False
        _LIVE.add(self)
        _log.debug("started %s (pid %s): %s", self.name, self.pid, " ".join(self.argv))

    def stop(self, timeout: float = _STOP_TIMEOUT) -> int | None:
        """Send SIGINT (graceful stop) and wait; SIGKILL after ``timeout`` seconds.

        Returns the exit status, or None if the process was never started.
        """
        return self._signal_and_wait(signal.SIGINT, timeout)

    def kill(self) -> int | None:
        """Send SIGKILL and wait: the process gets no chance to clean up."""
        return self._signal_and_wait(signal.SIGKILL, _STOP_TIMEOUT)

    def interrupt(self) -> None:
        """Send SIGINT without waiting (see :meth:`stop`)."""
        if self.running and self._popen is not None:
            self._stopping = True
            with contextlib.suppress(ProcessLookupError):
                self._popen.send_signal(signal.SIGINT)

    def _signal_and_wait(self, sig: signal.Signals, timeout: float) -> int | None:
        popen = self._popen
        if popen is None:
            return None
        self._stopping = True
        if popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                popen.send_signal(sig)
            try:
                popen.wait(timeout)
            except subprocess.TimeoutExpired:
                _log.warning("%s did not exit %.0f s after %s; killing it", self.name, timeout, sig)
                popen.kill()
                popen.wait()
        _LIVE.discard(self)
        return popen.returncode

    def _reap(self) -> None:
        if self._popen is not None:
            self._popen.wait()
            _LIVE.discard(self)

    def logs(self) -> str:
        """The whole log file as text (empty before the first start)."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def tail(self, lines: int = 80) -> str:
        """The last ``lines`` lines of the log."""
        return tail(self.logs(), lines)


_LIVE: set[ServerProcess] = set()


@atexit.register
def _stop_leftovers() -> None:
    """Safety net: stop every process still running when the interpreter exits."""
    leftovers = [process for process in _LIVE if process.running]
    for process in leftovers:
        _log.warning("stopping leftover %r at exit", process)
        process.interrupt()  # all at once, then wait for each
    for process in list(_LIVE):
        process.stop(_EXIT_STOP_TIMEOUT)
