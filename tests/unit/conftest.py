"""Fixtures shared by the unit tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from liftbridge_client._tasks import TaskSupervisor


@pytest.fixture
async def supervisor() -> AsyncIterator[TaskSupervisor]:
    """A started `TaskSupervisor`, closed after the test (what the client's tasks run in)."""
    tasks = TaskSupervisor()
    await tasks.start()
    yield tasks
    await tasks.aclose(1.0)
