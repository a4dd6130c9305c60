"""Snapshots on the S3 API (snapshot_store/s3.py), against a real S3 server (S3Proxy from
Maven Central: stategate/s3server.py): the pipeline publishes layers and the manifest to a
bucket, nodes that share no folder with it serve every query kind as the oracle says, a
pipeline whose folder is empty extends the chains from the bucket, two pipelines racing for
the manifest end with one publication and a clear loss, and a layer missing from the bucket
is refused by name."""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from contracts import chains
from contracts import project as projects
from contracts.manifest import FILE_NAME, Manifest
from contracts.project import Project
from snapshot_store import open_store
from spark_pipeline import job
from spark_pipeline.manifests import ManifestConflict, Manifests
from spark_pipeline.spark import LazySpark
from stategate.launcher import free_ports
from stategate.s3server import S3Server
from tests import oracle
from tests.chains import fetched_from_bucket
from tests.nodes import Nodes, Served, following, serve
from tests.projects import produce_test_events, write_project
from tests.test_pipeline import assert_published_state_is_the_oracles
from tests.test_queries import (  # the same checks, here of nodes that read the bucket
    test_batch_lookup_of_every_key_is_aligned_with_the_input,
    test_point_lookups_in_one_request,
    test_prefix_scans_paginate_in_global_key_order,
    test_range_scans_paginate_in_global_key_order,
    test_window_query_of_one_key,
    test_windows_of_all_keys_paginate,
)
from tests.test_stream import assert_state_is_the_oracles, manifest_of

pytestmark = pytest.mark.e2e
REFUSED_WAIT_S = 30.0
OUTAGE_S = 15.0  # the store down: longer than a call's retries (snapshot_store/s3.py: 10 s)
SAID_S = 60.0  # the pipeline says the store cannot be reached within this
CAUGHT_UP_S = 90.0
SCAN = (
    "{ customerTotalsRange(first: 1000) { meta { partial position { topic partition offset } } } }"
)

__all__ = [
    "test_batch_lookup_of_every_key_is_aligned_with_the_input",
    "test_point_lookups_in_one_request",
    "test_prefix_scans_paginate_in_global_key_order",
    "test_range_scans_paginate_in_global_key_order",
    "test_window_query_of_one_key",
    "test_windows_of_all_keys_paginate",
]


@pytest.fixture(scope="module")
def served(
    spark: LazySpark, s3: S3Server, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    """The queries' cluster, published to a bucket; the pipeline's folder deleted before the
    nodes start, so that they can have read nothing but the bucket."""
    url = f"{s3.bucket('snapshots')}/served"
    cluster = serve(tmp_path_factory.mktemp("on-s3"), spark, snapshot_url=url, start=False)
    shutil.rmtree(cluster.project.snapshot_store)
    cluster.nodes.start_all()
    yield cluster
    cluster.nodes.stop_all()


def test_the_bucket_holds_every_layer_the_manifest_names(served: Served) -> None:
    store = open_store(served.project.snapshot_url)
    found = store.read(FILE_NAME)
    assert found is not None
    manifest = Manifest.from_json(found[0])
    assert len(manifest.partitions) == chains.count(served.project)
    stored = {o.name: o.size for p in manifest.partitions for o in store.listing(f"p{p:03d}/")}
    named = {x.path: x.size for entry in manifest.partitions.values() for x in entry.layers}
    assert named and stored == named


@pytest.fixture(scope="module")
def extended(spark: LazySpark, s3: S3Server, tmp_path_factory: pytest.TempPathFactory) -> Project:
    """A project published once, its pipeline's folder emptied, then published again over
    more events: the second run reads the layers below from the bucket."""
    root = tmp_path_factory.mktemp("extended")
    url = f"{s3.bucket('snapshots')}/extended"
    project = projects.load(write_project(root, free_ports(3), snapshot_url=url))
    produce_test_events(project, seed=3)
    job.run(project, spark, notify=False)
    shutil.rmtree(project.snapshot_store)
    produce_test_events(project, seed=4, n_bookings=500, n_trains=200, n_trips=30)
    job.run(project, spark, notify=False)
    return project


def test_a_pipeline_with_an_empty_folder_extends_the_chains_in_the_bucket(
    extended: Project, tmp_path: Path
) -> None:
    manifest = fetched_from_bucket(extended, tmp_path)  # every layer, from the bucket alone
    assert any(len(e["layers"]) > 1 for e in manifest["partitions"].values())  # extended
    assert_state_is_the_oracles(extended, manifest, tmp_path)


def test_two_pipelines_racing_for_the_manifest_publish_one_and_the_other_loses(
    extended: Project, tmp_path: Path
) -> None:
    first = Manifests(extended, tmp_path / "first")
    second = Manifests(extended, tmp_path / "second")
    read = first.read()
    assert second.read() == read
    won = dataclasses.replace(read, updated_ms=read.updated_ms + 1)
    first.write(won)
    with pytest.raises(ManifestConflict, match="another pipeline published"):
        second.write(dataclasses.replace(read, updated_ms=read.updated_ms + 2))
    assert Manifests(extended, tmp_path / "third").read() == won


def test_two_first_publications_race_and_one_loses(s3: S3Server, tmp_path: Path) -> None:
    root = tmp_path
    url = f"{s3.bucket('snapshots')}/race"
    project = projects.load(write_project(root, free_ports(3), snapshot_url=url))
    first, second = Manifests(project, root / "a"), Manifests(project, root / "b")
    assert first.read() == second.read() == Manifest()
    first.write(Manifest(updated_ms=1))
    with pytest.raises(ManifestConflict):
        second.write(Manifest(updated_ms=2))
    assert Manifests(project, root / "c").read() == Manifest(updated_ms=1)


def test_a_layer_missing_from_the_bucket_is_refused_by_name(extended: Project) -> None:
    store = open_store(extended.snapshot_url)
    found = store.read(FILE_NAME)
    assert found is not None
    manifest = Manifest.from_json(found[0])
    hosted = extended.cluster.hosted_by("node1")
    chain = next(p for p in hosted if p in manifest.partitions)
    missing = manifest.partitions[chain].top.path
    store.delete(missing)
    nodes = Nodes(extended, extended.path.parent)
    nodes.start("node1")
    try:
        deadline = time.monotonic() + REFUSED_WAIT_S
        while not (errors := nodes.status("node1")["sync_errors"]):
            assert time.monotonic() < deadline, "node1 installed a chain whose layer is gone"
            time.sleep(0.2)
        assert missing in errors[str(chain)], errors
        ready = nodes.client.get(f"{nodes.url('node1')}/ready")
        assert ready.status_code == 503 and missing in ready.text, ready.text
    finally:
        nodes.stop_all()


def test_the_store_down_while_following_stops_nothing_and_loses_nothing(
    spark: LazySpark, s3: S3Server, tmp_path: Path
) -> None:
    """The bucket unreachable for OUTAGE_S while records arrive: the pipeline says so and
    tries again, nodes keep answering whole at the positions published before, and once
    the store answers the pipeline publishes everything, in order, once."""
    url = f"{s3.bucket('snapshots')}/outage"
    served = serve(tmp_path, spark, snapshot_url=url)
    project, nodes = served.project, served.nodes
    log = tmp_path / "pipeline.log"
    follow = following(project, log)
    try:
        s3.kill()
        produce_test_events(project, seed=5, n_bookings=400, n_trains=100, n_trips=20)
        deadline = time.monotonic() + SAID_S
        while b"the snapshot store cannot be reached" not in log.read_bytes():
            assert follow.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        # the folder's copy of the manifest published last (the bucket does not answer)
        copy = Path(project.snapshot_store) / FILE_NAME
        published = orjson.loads(copy.read_bytes())["log_end"]["bookings"]
        time.sleep(OUTAGE_S)
        for node in nodes.ids:  # the last publication, whole, at its own positions
            meta = nodes.data(node, SCAN)["customerTotalsRange"]["meta"]
            assert not meta["partial"], (node, meta)
            for at in bookings(meta).items():
                assert at[1] <= published[at[0]], (node, at)
        s3.start()
        ends = oracle.expected_positions(project)
        wanted = {str(p): ends[p]["bookings"] for p in ends}
        deadline = time.monotonic() + CAUGHT_UP_S
        while (manifest := manifest_of(project))["log_end"]["bookings"] != wanted:
            assert follow.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
        for node in nodes.ids:  # and the nodes serve it
            while True:
                meta = nodes.data(node, SCAN)["customerTotalsRange"]["meta"]
                at = bookings(meta)
                if not meta["partial"] and at == wanted:
                    break
                assert time.monotonic() < deadline, (node, meta["partial"], at, wanted)
                time.sleep(0.5)
    finally:
        follow.terminate()
        follow.wait(60)
        nodes.stop_all()
    assert b"answer again after" in log.read_bytes()
    assert_published_state_is_the_oracles(project, manifest)


def bookings(meta: dict[str, Any]) -> dict[str, int]:
    """partition -> the position in `bookings` an answer's meta gives."""
    return {str(x["partition"]): int(x["offset"]) for x in meta["position"]
            if x["topic"] == "bookings"}  # fmt: skip
