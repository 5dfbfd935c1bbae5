"""The Spark tests' session start-up: a JVM launch that died is retried, and PySpark's pipe
to the dead launcher is closed quietly right there, not by a later garbage collection in
whichever test runs next (where the ResourceWarning failed that test's setup)."""

from __future__ import annotations

import gc
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

from spark_support import get_or_create


class DyingLauncher:
    """``getOrCreate`` whose first call fails as PySpark's does when the JVM launcher exits:
    the pipe it opened is referenced only by the failing frame."""

    def __init__(self) -> None:
        self.calls = 0

    def getOrCreate(self) -> Any:
        from pyspark.errors import PySparkRuntimeError

        self.calls += 1
        if self.calls == 1:
            read, write = os.pipe()
            os.close(read)
            pipe = open(write, "wb")  # noqa: SIM115 - left open, as PySpark leaves it
            assert pipe.writable()
            raise PySparkRuntimeError(errorClass="JAVA_GATEWAY_EXITED", messageParameters={})
        return "session"


def test_a_dead_launchers_pipe_is_closed_inside_the_retry() -> None:
    builder = DyingLauncher()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # as pytest's filterwarnings = error
        session: object = get_or_create(builder, pause=0)
        assert session == "session"
        gc.collect()  # nothing left to warn about later
    assert builder.calls == 2


def test_other_launch_errors_are_raised() -> None:
    from pyspark.errors import PySparkRuntimeError

    class Broken:
        def getOrCreate(self) -> Any:
            raise PySparkRuntimeError(
                errorClass="CANNOT_CONFIGURE_SPARK_CONNECT",
                messageParameters={"existing_url": "x", "new_url": "y"},
            )

    with pytest.raises(PySparkRuntimeError):
        get_or_create(Broken(), pause=0)
