"""The pure feature layer: versions, the feature map, per-broker decisions, intersection."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from liftbridge_client import ClientOptions, errors
from liftbridge_client._subscribe import windows
from liftbridge_client.features import (
    FEATURE_MAP,
    FEATURES,
    MASTER,
    PROBED_RPCS,
    REVERSE,
    How,
    Observation,
    State,
    Version,
    compatibility_matrix,
    decide,
    intersect,
    parse_version,
)

V171, V190 = Version(1, 7, 1), Version(1, 9, 0)
ALL_PRESENT = dict.fromkeys(PROBED_RPCS, True)
CONSUMER_GROUP_RPCS = [d.name for d in FEATURES["consumer_groups"].depends]
# What a v1.7.1 server answers: every probed RPC but the consumer-group ones.
V171_SEEN = {**ALL_PRESENT, **dict.fromkeys(CONSUMER_GROUP_RPCS, False)}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("v1.9.0", Version(1, 9, 0)),
        ("1.7.1", Version(1, 7, 1)),
        ("v1.8", Version(1, 8, 0)),
        ("v26.01.1", Version(26, 1, 1)),
        ("master", MASTER),
        (" Master ", MASTER),
    ],
)
def test_versions_parse_and_compare(text: str, expected: Version) -> None:
    assert parse_version(text) == expected
    assert Version(1, 9, 0) < Version(1, 10, 0) < MASTER
    assert str(MASTER) == "master"
    assert str(Version(1, 9, 0)) == "v1.9.0"


@pytest.mark.parametrize("bad", ["", "1", "v1.x", "latest", "v0.9.0", "1.9.0-rc1", 190, None])
def test_bad_versions_are_refused_naming_the_option(bad: object) -> None:
    with pytest.raises(errors.InvalidInputError, match="server_version_fallback"):
        parse_version(bad)
    with pytest.raises(errors.InvalidInputError, match="server_version_fallback"):
        ClientOptions(server_version_fallback=bad)  # type: ignore[arg-type]


def test_probe_features_must_be_a_bool() -> None:
    with pytest.raises(errors.InvalidInputError, match="probe_features"):
        ClientOptions(probe_features="yes")  # type: ignore[arg-type]
    assert ClientOptions().probe_features is True
    assert ClientOptions().server_version_fallback == "v1.7.1"


def test_the_map_names_every_feature_the_issue_lists() -> None:
    assert set(FEATURES) == {
        "reverse_subscribe",
        "consumer_groups",
        "cursors",
        "pause_resume",
        "readonly_streams",
        "publish_to_subject",
        "stop_positions",
        "optimistic_concurrency",
        "publish_async",
    }
    for spec in FEATURE_MAP:
        assert spec.depends
        assert spec.fallback
        for dep in spec.depends:
            # Every RPC dependency is probed; nothing else claims to be.
            assert (dep.how is How.RPC) == (dep.name in PROBED_RPCS), dep


def test_a_v1_9_0_server_has_everything_but_reverse_which_waits_for_a_probe() -> None:
    found = decide("b1", Observation(rpcs=ALL_PRESENT), fallback=V171)
    assert found.at_least == Version(1, 8, 0)
    assert found.below is None
    assert found.enabled == set(FEATURES) - {"reverse_subscribe"}
    assert found.state("reverse_subscribe") is State.UNKNOWN
    forward = Observation(rpcs=ALL_PRESENT, behaviours={REVERSE: False})
    assert decide("b1", forward, fallback=V171).state("reverse_subscribe") is State.UNSUPPORTED
    backward = Observation(rpcs=ALL_PRESENT, behaviours={REVERSE: True})
    assert decide("b1", backward, fallback=V171).enabled == set(FEATURES)


def test_a_v1_7_1_server_lacks_consumer_groups_and_is_too_old_for_reverse() -> None:
    found = decide("old", Observation(rpcs=V171_SEEN), fallback=V171)
    assert found.below == Version(1, 8, 0)
    assert found.enabled == set(FEATURES) - {"reverse_subscribe", "consumer_groups"}
    assert found.state("reverse_subscribe") is State.UNSUPPORTED  # no probe needed
    assert "JoinConsumerGroup answers UNIMPLEMENTED" in found.decisions["consumer_groups"].reason
    # Implied fields come from the fallback: v1.7.1 has stop positions and OCC.
    assert "implied by >= v1.7.1" in found.decisions["optimistic_concurrency"].reason


def test_absent_rpcs_overrule_a_fallback_that_claims_more() -> None:
    # A pre-v1.3 server: FetchPartitionMetadata and the cursor RPCs answer UNIMPLEMENTED.
    seen = {**ALL_PRESENT}
    for rpc, since in PROBED_RPCS.items():
        if since >= Version(1, 3, 0):
            seen[rpc] = False
    found = decide("ancient", Observation(rpcs=seen), fallback=V190)
    assert found.below == Version(1, 3, 0)
    assert found.enabled == {"publish_to_subject", "pause_resume"}  # v1.2 PublishAsync unproven
    assert found.state("stop_positions") is State.UNSUPPORTED  # v1.4.0 >= the bound


@pytest.mark.parametrize(
    ("fallback", "lacking"),
    [
        (
            "v1.3.0",
            {"stop_positions", "optimistic_concurrency", "consumer_groups", "reverse_subscribe"},
        ),
        ("v1.7.1", {"consumer_groups", "reverse_subscribe"}),
        ("v1.9.0", {"reverse_subscribe"}),
        ("master", set()),
    ],
)
def test_without_probing_the_fallback_version_decides_everything(
    fallback: str, lacking: set[str]
) -> None:
    found = decide("x", Observation(), fallback=parse_version(fallback), probed=False)
    assert not found.probed
    assert set(FEATURES) - found.enabled == lacking
    assert State.UNKNOWN not in {d.state for d in found.decisions.values()}


def test_decisions_are_logged_librdkafka_style(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="liftbridge_client.features"):
        decide("10.0.0.1:9292", Observation(rpcs=V171_SEEN), fallback=V171)
    assert "broker 10.0.0.1:9292: Enabling feature cursors" in caplog.text
    assert "broker 10.0.0.1:9292: Disabling feature consumer_groups" in caplog.text
    assert "feature consumer_groups: JoinConsumerGroup UNSUPPORTED" in caplog.text


def test_the_cluster_set_is_the_intersection_over_its_brokers() -> None:
    new = decide("new", Observation(rpcs=ALL_PRESENT, behaviours={REVERSE: True}), fallback=V171)
    mid = decide("mid", Observation(rpcs=ALL_PRESENT), fallback=V171)
    old = decide("old", Observation(rpcs=V171_SEEN), fallback=V171)
    assert intersect([new]).enabled == set(FEATURES)
    assert intersect([new, mid]).state("reverse_subscribe") is State.UNKNOWN
    assert intersect([new, mid]).supported("consumer_groups")
    mixed = intersect([new, mid, old])
    assert mixed.state("reverse_subscribe") is State.UNSUPPORTED
    assert mixed.lacking("consumer_groups") == ["old"]
    assert mixed.lacking("reverse_subscribe") == ["old"]
    assert mixed.enabled == set(FEATURES) - {"reverse_subscribe", "consumer_groups"}
    assert intersect([]).state("cursors") is State.UNSUPPORTED  # no broker, no feature


def test_unknown_feature_names_are_refused() -> None:
    found = decide("b", Observation(), fallback=V171, probed=False)
    with pytest.raises(errors.InvalidInputError, match="feature must be one of"):
        found.state("exactly_once")


def test_the_matrix_has_a_row_per_feature_and_a_column_per_version() -> None:
    table = compatibility_matrix([V171, V190, MASTER])
    lines = table.strip().splitlines()
    assert lines[0].startswith("| Feature | Depends on | Since | v1.7.1 | v1.9.0 | master |")
    rows = {line.split(" | ")[0].strip("| `"): line.split(" | ")[3:6] for line in lines[2:]}
    assert set(rows) == set(FEATURES)
    assert rows["consumer_groups"] == ["no", "yes", "yes"]
    assert rows["reverse_subscribe"] == ["no", "no", "yes"]
    assert rows["cursors"] == ["yes", "yes", "yes"]


def test_docs_compatibility_page_holds_the_generated_matrix() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "compatibility.md").read_text()
    assert compatibility_matrix() in page, (
        "regenerate the table: python -c 'from liftbridge_client.features import "
        "compatibility_matrix as m; print(m())'"
    )


@pytest.mark.parametrize(
    ("top", "oldest", "size", "expected"),
    [
        (7, 0, 3, [(5, 7), (2, 4), (0, 1)]),
        (4, 0, 5, [(0, 4)]),
        (4, 2, 10, [(2, 4)]),
        (0, 0, 3, [(0, 0)]),
        (3, 4, 3, []),  # top below the oldest: nothing to read
    ],
)
def test_reverse_windows_cover_top_down_to_oldest(
    top: int, oldest: int, size: int, expected: list[tuple[int, int]]
) -> None:
    got = list(windows(top, oldest, size))
    assert got == expected
    covered = [o for low, high in got for o in range(low, high + 1)]
    assert sorted(covered) == list(range(oldest, top + 1))
    with pytest.raises(ValueError, match="window size"):
        list(windows(top, oldest, 0))
