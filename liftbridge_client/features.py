"""Server features: what each client feature needs, and what a broker was seen to have.

Pure: no IO. Modelled on librdkafka's feature map (``rdkafka_feature.c``): Kafka brokers
report ApiVersion ranges and the client maps its features onto them. Liftbridge has no
such RPC, so what a broker supports is *observed* instead (by `_cluster.feature_probe`):

- **RPC presence**: a harmless request (empty names, which every handler rejects before
  touching state) answers UNIMPLEMENTED only when the server lacks the RPC.
- **Behaviour**: a probe where the API gives no other signal (a reverse subscribe on a
  partition with at least two committed messages answers in reverse order, or forward on
  servers that ignore the field).
- **Implied**: request fields a server silently ignores cannot be observed without
  creating streams. They are decided from the version bounds the RPCs give (a server with
  the v1.8.0 consumer-group RPCs is at least v1.8.0), and from the fallback version
  (``ClientOptions.server_version_fallback``, like librdkafka's
  ``broker.version.fallback``) where the bounds allow it.

`decide` turns one broker's observations into a `BrokerFeatures`; `intersect` combines
brokers: a feature is usable only when every broker serving the request has it (a rolling
upgrade mixes versions). `compatibility_matrix` renders docs/compatibility.md's table.
"""

from __future__ import annotations

import enum
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, Protocol

from liftbridge_client.errors import InvalidInputError
from liftbridge_client.models import reduce_read_only

log = logging.getLogger(__name__)

__all__ = [
    "FEATURES",
    "FEATURE_MAP",
    "MASTER",
    "PROBED_RPCS",
    "REVERSE",
    "BrokerFeatures",
    "ClusterFeatures",
    "Decision",
    "Dependency",
    "FeatureSpec",
    "How",
    "Observation",
    "ServerFeatures",
    "State",
    "Version",
    "compatibility_matrix",
    "decide",
    "intersect",
    "parse_version",
]


# ---------------------------------------------------------------- versions


@dataclass(frozen=True, slots=True, order=True)
class Version:
    """A server version, compared numerically (``v1.9.0`` < ``v26.1.1``)."""

    major: int
    minor: int
    patch: int = 0
    label: str = field(default="", compare=False)

    def __str__(self) -> str:
        return self.label or f"v{self.major}.{self.minor}.{self.patch}"


MASTER: Final = Version(26, 1, 1, "master")
"""Upstream master at 50ac358b41eb: the unreleased v26.01.1 (CalVer), the first with reverse."""

_VERSION_RE = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?$")


def parse_version(text: object, *, name: str = "server_version_fallback") -> Version:
    """Parse ``v1.9.0`` / ``1.9`` / ``v26.01.1`` / ``master``; `InvalidInputError` otherwise."""
    if not isinstance(text, str):
        raise InvalidInputError(f"{name} must be a version string like 'v1.9.0', got {text!r}")
    if text.strip().lower() == "master":
        return MASTER
    match = _VERSION_RE.match(text.strip())
    if match is None:
        raise InvalidInputError(f"{name} must look like 'v1.9.0', '1.9' or 'master', got {text!r}")
    major, minor, patch = int(match[1]), int(match[2]), int(match[3] or 0)
    if major < 1:
        raise InvalidInputError(f"{name}: no Liftbridge server before v1.0.0, got {text!r}")
    return Version(major, minor, patch)


V1_0: Final = Version(1, 0, 0)
V1_2: Final = Version(1, 2, 0)
V1_3: Final = Version(1, 3, 0)
V1_4: Final = Version(1, 4, 0)
V1_5: Final = Version(1, 5, 0)
V1_8: Final = Version(1, 8, 0)


# ---------------------------------------------------------------- the feature map


class How(enum.Enum):
    """How a dependency is learned for one broker."""

    RPC = "rpc"  # probed: UNIMPLEMENTED means absent
    BEHAVIOUR = "behaviour"  # probed where needed (needs a partition with data)
    IMPLIED = "implied"  # not observable: decided from version bounds and the fallback


@dataclass(frozen=True, slots=True)
class Dependency:
    """One thing a feature needs from the server, and the release that introduced it."""

    how: How
    name: str  # an RPC name, a request field (Message.field), or a behaviour's name
    since: Version


@dataclass(frozen=True, slots=True)
class FeatureSpec:
    """A client feature: what it depends on, and what the client does without it."""

    name: str
    summary: str
    depends: tuple[Dependency, ...]
    fallback: str  # what happens when a broker lacks it (for the docs)

    @property
    def since(self) -> Version:
        """The first server version with every dependency."""
        return max(d.since for d in self.depends)


def _rpc(name: str, since: Version) -> Dependency:
    return Dependency(How.RPC, name, since)


def _field(name: str, since: Version) -> Dependency:
    return Dependency(How.IMPLIED, name, since)


REVERSE: Final = "SubscribeRequest.reverse"
"""The behaviour probed for ``reverse_subscribe``: does the server read backwards?"""

_REFUSED = "refused with FeatureNotSupportedError (no emulation gives the same result)"

FEATURE_MAP: Final[tuple[FeatureSpec, ...]] = (
    FeatureSpec(
        "publish_to_subject",
        "publish to a NATS subject through the server",
        # Not probed: PublishToSubject has no request that is sure to publish nothing.
        (_field("PublishToSubject", V1_0),),
        _REFUSED,
    ),
    FeatureSpec(
        "pause_resume",
        "pause partitions; resume by publishing or subscribing with resume=True",
        (_rpc("PauseStream", V1_0), _field("SubscribeRequest.resume", V1_0)),
        _REFUSED,
    ),
    FeatureSpec(
        "publish_async",
        "the pipelined PublishAsync gRPC stream (Transport.GRPC)",
        (_field("PublishAsync", V1_2),),  # a stream RPC: implied, not probed
        "not checked per publish (the hot path); Transport.NATS publishes without it",
    ),
    FeatureSpec(
        "readonly_streams",
        "set partitions read-only; reads end at the last message",
        (_rpc("SetStreamReadonly", V1_3),),
        _REFUSED,
    ),
    FeatureSpec(
        "cursors",
        "store and fetch consumer positions",
        # SetCursor is not probed: no request to it is guaranteed to change nothing.
        (_rpc("FetchCursor", V1_3), _field("SetCursor", V1_3)),
        _REFUSED,
    ),
    FeatureSpec(
        "stop_positions",
        "subscriptions that end at an offset, a timestamp or the newest message",
        (_field("SubscribeRequest.stopPosition", V1_4),),
        _REFUSED,
    ),
    FeatureSpec(
        "optimistic_concurrency",
        "streams that check a publish's expected offset",
        (
            _field("CreateStreamRequest.optimisticConcurrencyControl", V1_5),
            _field("Message.offset (expected offset)", V1_5),
        ),
        _REFUSED,
    ),
    FeatureSpec(
        "consumer_groups",
        "consumer groups: join, leave, assignments, coordinator reports",
        (
            _rpc("JoinConsumerGroup", V1_8),
            _rpc("LeaveConsumerGroup", V1_8),
            _rpc("FetchConsumerGroupAssignments", V1_8),
            _rpc("ReportConsumerGroupCoordinator", V1_8),
        ),
        _REFUSED,
    ),
    FeatureSpec(
        "reverse_subscribe",
        "subscribe newest first (SubscribeRequest.reverse)",
        (Dependency(How.BEHAVIOUR, REVERSE, MASTER),),
        "emulated: forward windows read from the newest offset backwards with stop offsets, "
        "each yielded reversed; same order and end",
    ),
)
"""Every client feature and what it depends on (the source of docs/compatibility.md)."""

FEATURES: Final[Mapping[str, FeatureSpec]] = MappingProxyType({f.name: f for f in FEATURE_MAP})

# RPCs whose presence the probe observes, each with a harmless request (_cluster.feature_probe).
# Publish is observed too: it bounds the version from below like the others.
PROBED_RPCS: Final[Mapping[str, Version]] = MappingProxyType(
    {
        "Publish": V1_0,
        "PauseStream": V1_0,
        "SetStreamReadonly": V1_3,
        "FetchPartitionMetadata": V1_3,
        "FetchCursor": V1_3,
        "JoinConsumerGroup": V1_8,
        "LeaveConsumerGroup": V1_8,
        "FetchConsumerGroupAssignments": V1_8,
        "ReportConsumerGroupCoordinator": V1_8,
    }
)


# ---------------------------------------------------------------- decisions


class State(enum.Enum):
    SUPPORTED = "supported"
    UNSUPPORTED = "unsupported"
    UNKNOWN = "unknown"  # a behaviour not probed yet (it needs a partition with data)


@dataclass(frozen=True, slots=True)
class Observation:
    """What was seen of one broker. Absent keys were not observed."""

    rpcs: Mapping[str, bool] = field(default_factory=dict)  # RPC name -> present
    behaviours: Mapping[str, bool] = field(default_factory=dict)  # behaviour -> honoured


@dataclass(frozen=True, slots=True)
class Decision:
    """One feature on one broker, and why."""

    feature: str
    state: State
    reason: str


@dataclass(frozen=True, slots=True)
class BrokerFeatures:
    """What one broker supports: a decision per feature, and the version bounds seen."""

    broker: str
    decisions: Mapping[str, Decision]
    at_least: Version | None  # proven by RPCs present (None: nothing observed)
    below: Version | None  # proven by RPCs absent (exclusive)
    probed: bool  # False: decided from the fallback version alone

    def state(self, feature: str) -> State:
        return self.decisions[_check_name(feature)].state

    def supported(self, feature: str) -> bool:
        return self.state(feature) is State.SUPPORTED

    @property
    def enabled(self) -> frozenset[str]:
        """Names of the supported features."""
        return frozenset(n for n, d in self.decisions.items() if d.state is State.SUPPORTED)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return reduce_read_only(self)


def _check_name(feature: str) -> str:
    if feature not in FEATURES:
        raise InvalidInputError(f"feature must be one of {', '.join(FEATURES)}; got {feature!r}")
    return feature


def _bounds(rpcs: Mapping[str, bool]) -> tuple[Version | None, Version | None]:
    present = [PROBED_RPCS[n] for n, ok in rpcs.items() if ok and n in PROBED_RPCS]
    absent = [PROBED_RPCS[n] for n, ok in rpcs.items() if not ok and n in PROBED_RPCS]
    return (max(present) if present else None, min(absent) if absent else None)


def _dependency(
    dep: Dependency, obs: Observation, assumed: Version, below: Version | None, probed: bool
) -> tuple[State, str]:
    if dep.how is How.RPC and dep.name in obs.rpcs:
        ok = obs.rpcs[dep.name]
        return (State.SUPPORTED if ok else State.UNSUPPORTED), (
            f"RPC {dep.name} {'present' if ok else 'answers UNIMPLEMENTED'}"
        )
    if dep.how is How.BEHAVIOUR and dep.name in obs.behaviours:
        ok = obs.behaviours[dep.name]
        return (State.SUPPORTED if ok else State.UNSUPPORTED), (
            f"behaviour {dep.name} {'observed' if ok else 'not honoured'}"
        )
    if below is not None and dep.since >= below:
        return State.UNSUPPORTED, f"{dep.name} (since {dep.since}) is newer than the server"
    if dep.since <= assumed:
        return State.SUPPORTED, f"{dep.name} (since {dep.since}) implied by >= {assumed}"
    if dep.how is How.BEHAVIOUR and probed:
        return State.UNKNOWN, f"behaviour {dep.name} not probed yet"
    return State.UNSUPPORTED, f"{dep.name} (since {dep.since}) not implied by {assumed}"


def decide(
    broker: str, obs: Observation, *, fallback: Version, probed: bool = True
) -> BrokerFeatures:
    """Every feature's state on one broker, logged librdkafka-style.

    The version assumed for what cannot be observed is the fallback, unless an absent
    RPC proves the server older than that; RPCs present raise it.
    """
    at_least, below = _bounds(obs.rpcs)
    assumed = fallback if below is None or fallback < below else (at_least or V1_0)
    if at_least is not None and at_least > assumed:
        assumed = at_least
    decisions: dict[str, Decision] = {}
    for spec in FEATURE_MAP:
        states: list[State] = []
        reasons: list[str] = []
        for dep in spec.depends:
            state, reason = _dependency(dep, obs, assumed, below, probed)
            log.debug(
                "broker %s: feature %s: %s %s (%s)",
                broker,
                spec.name,
                dep.name,
                "supported" if state is State.SUPPORTED else state.value.upper(),
                reason,
            )
            states.append(state)
            reasons.append(reason)
        if State.UNSUPPORTED in states:
            state = State.UNSUPPORTED
        elif State.UNKNOWN in states:
            state = State.UNKNOWN
        else:
            state = State.SUPPORTED
        verb = {State.SUPPORTED: "Enabling", State.UNSUPPORTED: "Disabling"}.get(state)
        if verb is None:
            log.debug("broker %s: feature %s undecided until probed", broker, spec.name)
        else:
            log.debug("broker %s: %s feature %s", broker, verb, spec.name)
        # Say why in terms of the dependencies that decided it.
        why = [r for s, r in zip(states, reasons, strict=True) if s is state] or reasons
        decisions[spec.name] = Decision(spec.name, state, "; ".join(why))
    return BrokerFeatures(broker, MappingProxyType(decisions), at_least, below, probed)


@dataclass(frozen=True, slots=True)
class ClusterFeatures:
    """The intersection over the brokers that serve a request."""

    brokers: tuple[BrokerFeatures, ...]

    def state(self, feature: str) -> State:
        states = {b.state(feature) for b in self.brokers}
        if not states or State.UNSUPPORTED in states:
            return State.UNSUPPORTED
        return State.UNKNOWN if State.UNKNOWN in states else State.SUPPORTED

    def supported(self, feature: str) -> bool:
        return self.state(feature) is State.SUPPORTED

    def lacking(self, feature: str) -> list[str]:
        """The brokers on which ``feature`` is unsupported."""
        return [b.broker for b in self.brokers if b.state(feature) is State.UNSUPPORTED]

    @property
    def enabled(self) -> frozenset[str]:
        """Features every broker supports."""
        return frozenset(n for n in FEATURES if self.supported(n))


class ServerFeatures(Protocol):
    """What `Client.features` returns: the brokers' features, probed once per broker.

    Feature names are those of `FEATURE_MAP` (docs/compatibility.md); an unknown name
    raises `InvalidInputError`. Example::

        if await client.features.supported("consumer_groups"):
            ...
        await client.features.require("cursors")  # or FeatureNotSupportedError
    """

    def cached(self) -> dict[str, BrokerFeatures]:
        """What is known so far, by broker address (no IO)."""
        ...

    def invalidate(self, broker: str | None = None) -> None:
        """Forget one broker (or all): its next use probes it again (after an upgrade)."""
        ...

    async def broker(self, address: str) -> BrokerFeatures:
        """One broker's features, probing it the first time.

        Raises:
            LiftbridgeError: the broker could not be reached.
        """
        ...

    async def cluster(self, brokers: Sequence[str] | None = None) -> ClusterFeatures:
        """What every broker in ``brokers`` (default: every broker in the metadata) has.

        By default a broker that cannot be reached is left out (it serves nothing now);
        one named in ``brokers`` must answer.

        Raises:
            NoBrokerAvailableError: no broker of the metadata answered.
        """
        ...

    async def supported(self, feature: str, *, brokers: Sequence[str] | None = None) -> bool:
        """True when every broker in ``brokers`` (default: all) supports ``feature``."""
        ...

    async def require(self, feature: str, *, brokers: Sequence[str] | None = None) -> None:
        """Return when every broker supports ``feature``.

        Raises:
            FeatureNotSupportedError: a broker lacks it (the error names the feature, the
                first broker lacking it and why).
            NoBrokerAvailableError: no broker answered.
        """
        ...


def intersect(brokers: Iterable[BrokerFeatures]) -> ClusterFeatures:
    """Combine brokers: a feature is supported only where every broker supports it."""
    return ClusterFeatures(tuple(brokers))


# ---------------------------------------------------------------- docs


MATRIX_VERSIONS: Final[tuple[Version, ...]] = (Version(1, 7, 1), Version(1, 9, 0), MASTER)
"""The versions the project builds and tests against, as the matrix's columns."""


def compatibility_matrix(versions: Iterable[Version] = MATRIX_VERSIONS) -> str:
    """The Markdown table of features by server version (docs/compatibility.md)."""
    columns = list(versions)
    head = ["Feature", "Depends on", "Since", *(str(v) for v in columns), "Without it"]
    rows = [head, ["---"] * len(head)]
    for spec in FEATURE_MAP:
        deps = ", ".join(f"{d.name} ({d.how.value})" for d in spec.depends)
        marks = ["yes" if spec.since <= v else "no" for v in columns]
        rows.append([f"`{spec.name}`", deps, str(spec.since), *marks, spec.fallback])
    return "\n".join("| " + " | ".join(row) + " |" for row in rows) + "\n"
