"""Exceptions raised by the server harness.

The tree::

    HarnessError
    ├── ProvisionError     a server binary could not be found, built or verified
    │   └── SnapshotMissingError  the source snapshot of a version (master) is absent
    ├── ServerStartError   a server process exited early or never became ready
    └── ConfigError        a deployment description is invalid (also ValueError)

They are not part of the client's ``LiftbridgeError`` tree: they describe the test
environment, never a Liftbridge response.
"""

from __future__ import annotations


class HarnessError(Exception):
    """Root of every error the server harness raises."""


class ProvisionError(HarnessError):
    """A server binary could not be found, built or verified."""


class ServerStartError(HarnessError):
    """A server process exited early or did not become ready in time."""


class ConfigError(HarnessError, ValueError):
    """A deployment description (environment variables, settings) is invalid."""


class SnapshotMissingError(ProvisionError):
    """The source snapshot a server version is built from is not there (a clone without it)."""
