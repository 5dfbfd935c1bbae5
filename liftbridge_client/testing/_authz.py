"""Liftbridge authorization (casbin) for test servers: a model, a policy, the config keys.

v1.9.0 checks every gRPC call but consumer-group calls against a casbin policy when
``tls.client.authz.enabled`` is true together with mutual TLS (``tls.client.auth``): the
subject is the CN of the client certificate, the object a stream name (``*`` for
FetchMetadata, the subject for PublishToSubject) and the action the RPC name
(PublishAsync is checked as ``Publish``). Publishes straight over NATS are not checked.

The model here matches objects with casbin's ``keyMatch`` (``*`` as a suffix wildcard),
so a policy line can cover the harness's probe streams (``lbtest-probe-*``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from liftbridge_client.testing._config import Setting, StrPath
from liftbridge_client.testing._probe import PROBE_STREAM_PREFIX
from liftbridge_client.testing._tls import CLIENT_CN

__all__ = ["AuthzPolicy"]

_MODEL = """\
[request_definition]
r = sub, obj, act

[policy_definition]
p = sub, obj, act

[policy_effect]
e = some(where (p.eft == allow))

[matchers]
m = r.sub == p.sub && keyMatch(r.obj, p.obj) && r.act == p.act
"""


@dataclass(frozen=True)
class AuthzPolicy:
    """Allow rules ``(client CN, object pattern, RPC name)``; everything else is denied.

    The rules the harness needs for its own readiness probe (as the PKI's client
    certificate) are always added. Use with ``SingleNode(tls=ServerTLS(pki,
    client_auth=True), settings=policy.settings(directory))``.
    """

    rules: Sequence[tuple[str, str, str]] = ()

    def lines(self) -> list[str]:
        probe = f"{PROBE_STREAM_PREFIX}*"
        own = [
            (CLIENT_CN, "*", "FetchMetadata"),
            (CLIENT_CN, probe, "CreateStream"),
            (CLIENT_CN, probe, "DeleteStream"),
        ]
        return [f"p, {sub}, {obj}, {act}" for sub, obj, act in (*own, *self.rules)]

    def settings(self, directory: StrPath) -> dict[str, Setting]:
        """Write the model and policy files into ``directory``; the config keys to use."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        model = directory / "authz_model.conf"
        policy = directory / "authz_policy.csv"
        model.write_text(_MODEL)
        policy.write_text("\n".join(self.lines()) + "\n")
        return {
            "tls.client.authz.enabled": True,
            "tls.client.authz.model": str(model),
            "tls.client.authz.policy": str(policy),
        }
