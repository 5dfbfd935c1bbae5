"""Consumer-group metadata: FetchMetadata asks for the groups named, and answers are typed."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from fake_liftbridge import FakeCluster

from liftbridge_client import ConsumerGroupInfo, errors
from liftbridge_client._cluster import admin as _admin
from liftbridge_client._proto import api_pb2
from liftbridge_client.models import metadata_from_proto
from liftbridge_client.options import ClientOptions

OPTIONS = ClientOptions(rpc_timeout=2.0)


@pytest.fixture
async def cluster() -> AsyncIterator[FakeCluster]:
    async with FakeCluster(("a",)) as c:
        yield c


async def test_groups_are_sent_in_the_request(cluster: FakeCluster) -> None:
    cache = cluster.metadata_cache(OPTIONS)
    await _admin.fetch_metadata(cache, (), ["workers", "audit"])
    [(_, req)] = cluster.calls_of("FetchMetadata")
    assert isinstance(req, api_pb2.FetchMetadataRequest)
    assert list(req.groups) == ["workers", "audit"]
    assert list(req.streams) == []


@pytest.mark.parametrize("groups", [[""], "workers", [3]])
async def test_bad_group_ids_are_refused_before_any_call(
    cluster: FakeCluster, groups: object
) -> None:
    cache = cluster.metadata_cache(OPTIONS)
    with pytest.raises(errors.InvalidInputError, match="groups"):
        await _admin.fetch_metadata(cache, (), groups)  # type: ignore[arg-type]
    assert cluster.calls_of("FetchMetadata") == []


def test_group_metadata_is_typed_and_unknown_groups_are_left_out() -> None:
    resp = api_pb2.FetchMetadataResponse()
    resp.groupMetadata.add(groupId="g", coordinator="n2", epoch=7)
    resp.groupMetadata.add(groupId="gone", error=api_pb2.ConsumerGroupMetadata.UNKNOWN_GROUP)
    md = metadata_from_proto(resp)
    assert dict(md.groups) == {"g": ConsumerGroupInfo(group_id="g", coordinator="n2", epoch=7)}
    with pytest.raises(TypeError):
        md.groups["x"] = md.groups["g"]  # type: ignore[index]
