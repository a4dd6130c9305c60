"""The pipeline's kept rows (spark_pipeline/kept.py): a delta built from the base and the
rows a worker kept holds the same state as one built from every layer, whether the
worker kept the chain, lost it, kept it a few layers behind, or kept one that was never
published, and whether a topic had new records or none; after every delta, the chain read
the plain way equals the oracle."""

from __future__ import annotations

from pathlib import Path

import pytest

from contracts import chains
from contracts.project import Project, load
from spark_pipeline import kept as kept_rows
from tests.chains import WrittenChain, chain_state
from tests.oracle import Log
from tests.projects import write_project

PARTITION = 2
ROUNDS = 6  # the first makes the base; each other a delta
BEHIND_FROM, BEHIND_TO = 2, 5  # "behind": the kept chain of round 2 comes back at round 5
# rounds where a topic has no new records: its stores' deltas are empty, and not computed
QUIET = {2: {"n_trains": 0}, 3: {"n_bookings": 0}, 4: {"n_trains": 0}}


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return load(write_project(tmp_path, [1, 2, 3], partitions=3))


@pytest.mark.parametrize("side", ["partitioned", "global"])
@pytest.mark.parametrize("worker", ["kept", "lost", "behind", "unpublished"])
def test_a_delta_holds_the_oracles_state_whatever_the_worker_kept(
    project: Project, tmp_path: Path, worker: str, side: str
) -> None:
    kept_rows.forget()
    chain_id = PARTITION if side == "partitioned" else chains.global_chain(project, PARTITION)
    chain, oracle = WrittenChain(project, tmp_path / "store", chain_id), Log(project)
    stores = chains.stores(project, chain_id)
    root, saved = str(chain.store_root), None
    for round_ in range(ROUNDS):
        if worker == "lost":
            kept_rows.forget()
        elif worker == "behind" and round_ == BEHIND_FROM:
            saved = kept_rows.kept(root, chain_id)
        elif worker == "behind" and round_ == BEHIND_TO:
            assert saved is not None
            kept_rows.keep(root, chain_id, saved)
        elif worker == "unpublished" and chain.layers:
            # a worker that wrote a layer on top which no manifest named (a crashed batch),
            # with rows that are not the chain's
            now = kept_rows.kept(root, chain_id)
            assert now is not None
            wrong = {name: rows.slice(0, len(rows) // 2) for name, rows in now.rows.items()}
            kept_rows.keep(
                root, chain_id, kept_rows.KeptRows((*now.chain, ("p/v9.delta", "0" * 64)), wrong)
            )
        chain.next_layer(round_, **QUIET.get(round_, {}))
        state = chain_state(project, chain.store_root, chain.entry, chain_id)
        for store in stores:
            expected = oracle.rows(store.name, PARTITION, chain.positions[store.topic.name])
            same(state[store.name], [expected[k] for k in sorted(expected)], store.name)
    last = kept_rows.kept(root, chain_id)
    assert last is not None and last.chain == kept_rows.chain_of(tuple(chain.layers))
    assert {name for name, rows in last.rows.items() if len(rows)} == {
        s.name for s in stores if s.kind != "table"
    }


def same(got: list, expected: list, where: str) -> None:
    assert len(got) == len(expected), (where, len(got), len(expected))
    for g, e in zip(got, expected, strict=True):
        assert tuple(g) == pytest.approx(tuple(e)), (where, g, e)
