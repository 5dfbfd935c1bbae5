"""Real Liftbridge and NATS servers for tests, demos and benchmarks.

Provisioning (:func:`liftbridge_binary`, :func:`nats_server_binary`) builds the pinned
Liftbridge release (:data:`LIFTBRIDGE_VERSION`) once into a per-version cache; the other
:data:`KNOWN_VERSIONS` (v1.7.1, master from a source snapshot, and
:data:`PATCHED_VERSION`, v1.9.0 with this project's server patches) on demand. Deployments
start servers on 127.0.0.1 only, each in its own temporary directory with its log:

- :class:`SingleNode`: one node with embedded NATS.
- :class:`Cluster`: three nodes (``n1``..``n3``) on one external :class:`NatsServer`, with
  fast failover (:data:`CLUSTER_SETTINGS`); kill, stop and restart nodes, then
  :meth:`Cluster.ensure_all_running`.
- :class:`ExternalDeployment`: servers started elsewhere, from ``LIFTBRIDGE_ADDRS`` and
  ``LIFTBRIDGE_NATS_URL``.
- :class:`AddressedCluster`: three nodes and NATS each on a loopback address of their own,
  inside a private network namespace, where a :class:`Firewall` injects network faults
  (what this repository's fault suite runs on).

All three satisfy :class:`Deployment`, as do :class:`DockerSingleNode` and
:class:`DockerCluster`, the same topologies in containers of images built locally
(:func:`build_images`, ``make docker-image``). The pytest plugin (:mod:`.plugin`,
registered as the ``liftbridge`` entry point) wraps them in fixtures;
``python -m liftbridge_client.testing`` provisions or runs servers from the command line.
See docs/testing.md.
"""

from __future__ import annotations

from liftbridge_client.testing._authz import AuthzPolicy
from liftbridge_client.testing._config import (
    ACTIVITY_STREAM_SETTINGS,
    CLUSTER_SETTINGS,
    GROUP_SETTINGS,
    NodeConfig,
    Setting,
)
from liftbridge_client.testing._deployments import (
    ENV_ADDRS,
    ENV_NATS_URL,
    Cluster,
    Deployment,
    ExternalDeployment,
    SingleNode,
)
from liftbridge_client.testing._docker_deployments import DockerCluster, DockerSingleNode
from liftbridge_client.testing._docker_images import ImageReport, build_images, ensure_images
from liftbridge_client.testing._errors import (
    ConfigError,
    HarnessError,
    ProvisionError,
    ServerStartError,
    SnapshotMissingError,
)
from liftbridge_client.testing._names import StreamName, StreamNames
from liftbridge_client.testing._netns import AddressedCluster, Firewall, private_netns_argv
from liftbridge_client.testing._nkeys import (
    NkeyUser,
    OperatorSetup,
    make_nkey_user,
    make_operator_setup,
)
from liftbridge_client.testing._probe import PROBE_STREAM_PREFIX
from liftbridge_client.testing._process import free_ports
from liftbridge_client.testing._provision import (
    LIFTBRIDGE_VERSION,
    ProvisionReport,
    liftbridge_binary,
    nats_server_binary,
    provision,
)
from liftbridge_client.testing._servers import LiftbridgeNode, NatsServer
from liftbridge_client.testing._tls import ServerTLS, TestPKI, make_pki
from liftbridge_client.testing._versions import (
    KNOWN_VERSIONS,
    MASTER_VERSION,
    PATCHED_VERSION,
    ServerVersion,
    server_version,
)
from liftbridge_client.testing._wait import tasks_left, wait_until

__all__ = [
    "ACTIVITY_STREAM_SETTINGS",
    "CLUSTER_SETTINGS",
    "ENV_ADDRS",
    "ENV_NATS_URL",
    "GROUP_SETTINGS",
    "KNOWN_VERSIONS",
    "LIFTBRIDGE_VERSION",
    "MASTER_VERSION",
    "PATCHED_VERSION",
    "PROBE_STREAM_PREFIX",
    "AddressedCluster",
    "AuthzPolicy",
    "Cluster",
    "ConfigError",
    "Deployment",
    "DockerCluster",
    "DockerSingleNode",
    "ExternalDeployment",
    "Firewall",
    "HarnessError",
    "ImageReport",
    "LiftbridgeNode",
    "NatsServer",
    "NkeyUser",
    "NodeConfig",
    "OperatorSetup",
    "ProvisionError",
    "ProvisionReport",
    "ServerStartError",
    "ServerTLS",
    "ServerVersion",
    "Setting",
    "SingleNode",
    "SnapshotMissingError",
    "StreamName",
    "StreamNames",
    "TestPKI",
    "build_images",
    "ensure_images",
    "free_ports",
    "liftbridge_binary",
    "make_nkey_user",
    "make_operator_setup",
    "make_pki",
    "nats_server_binary",
    "private_netns_argv",
    "provision",
    "server_version",
    "tasks_left",
    "wait_until",
]
