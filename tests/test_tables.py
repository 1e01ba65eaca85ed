"""Tables of topics: where the catalog and tables live, what a table holds, how a commit is planned."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from kfs_core.tables import (
    SUMMARY_NEXT_OFFSETS,
    SUMMARY_OFFSETS,
    catalog_properties,
    covered_offsets,
    open_catalog,
    table_identifier,
    table_location,
    table_state,
)
from spark_jobs.tables.job import plan_commit

NS = "ns"


def test_names_and_locations() -> None:
    assert table_identifier(NS, "orders.eu") == (NS, "orders_eu")
    assert table_location("s3://bucket/kfs?endpoint=x", NS, "orders.eu") == (
        "s3://bucket/kfs/ns/_tables/orders_eu"
    )
    assert table_location("/data/store", NS, "t") == "file:///data/store/ns/_tables/t"


def test_the_embedded_catalog_beside_each_kind_of_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = catalog_properties((tmp_path / "store").as_uri(), NS)
    assert local["uri"] == f"sqlite:///{tmp_path}/store/ns/_tables/catalog.db"
    assert local["warehouse"] == (tmp_path / "store" / NS / "_tables").as_uri()
    monkeypatch.setenv("KFS_HOME", str(tmp_path / "home"))
    s3 = catalog_properties(
        "s3://bucket/kfs", NS, s3_endpoint_url="http://127.0.0.1:1", s3_credentials=("a", "b", None)
    )
    assert s3["uri"] == f"sqlite:///{tmp_path}/home/tables/ns.db"
    assert s3["warehouse"] == "s3://bucket/kfs/ns/_tables"
    assert s3["s3.endpoint"] == "http://127.0.0.1:1"
    assert (s3["s3.access-key-id"], s3["s3.secret-access-key"]) == ("a", "b")
    assert "s3.session-token" not in s3


def test_a_catalog_in_pyicebergs_configuration_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyiceberg.catalog  # imported before the environment is set, as in a long-lived process

    assert pyiceberg.catalog.load_catalog is not None
    monkeypatch.setenv("PYICEBERG_CATALOG__SHARED__TYPE", "sql")
    monkeypatch.setenv("PYICEBERG_CATALOG__SHARED__URI", f"sqlite:///{tmp_path}/shared.db")
    monkeypatch.setenv("PYICEBERG_CATALOG__SHARED__WAREHOUSE", (tmp_path / "wh").as_uri())
    store = (tmp_path / "store").as_uri()
    shared = open_catalog(store, NS, name="shared")
    assert shared.properties["uri"] == f"sqlite:///{tmp_path}/shared.db"
    embedded = open_catalog(store, NS, name="kfs")
    assert embedded.properties["uri"].endswith("/store/ns/_tables/catalog.db")


def test_what_a_table_holds_is_its_newest_kfs_snapshots_offsets(tmp_path: Path) -> None:
    catalog = open_catalog((tmp_path / "store").as_uri(), NS)
    catalog.create_namespace(NS)
    schema = pa.schema([("_offset", pa.int64())])
    table = catalog.create_table((NS, "t"), schema=schema)
    assert covered_offsets(table) == {}
    assert table_state(catalog, NS, "missing") is None

    def append(offsets: list[int], properties: dict[str, str]) -> None:
        table.append(pa.table({"_offset": offsets}, schema=schema), snapshot_properties=properties)

    append([0, 1], {SUMMARY_OFFSETS: '{"0": [0, 2]}', SUMMARY_NEXT_OFFSETS: '{"0": 2, "1": 0}'})
    append([7], {})  # someone else's snapshot on top: KFS's newest is still the one below
    assert covered_offsets(table) == {0: 2, 1: 0}
    state = table_state(catalog, NS, "t")
    assert state is not None and state.rows == 3
    assert state.offsets == {0: (0, 2)} and state.lag({0: 5, 1: 1}) == 4
    assert json.loads(json.dumps(state.as_dict()))["next_offsets"] == {"0": 2, "1": 0}


def test_a_commit_plan_starts_where_the_table_ends_and_stops_at_the_last_stable_offset() -> None:
    ends = {0: (0, 100), 1: (50, 60), 2: (0, 0)}  # (log start, last stable offset)
    plan = plan_commit(ends, {0: 10, 1: 20}, max_records=30)
    assert plan.ranges == {0: (10, 40), 1: (50, 60), 2: (0, 0)}
    assert plan.next_offsets == {0: 40, 1: 60, 2: 0}
    assert plan.lag == 60  # partition 0's 40..99
    assert plan.gaps == ("partition 1: offsets 20..49",)  # retention ran ahead of the table
    done = plan_commit(ends, {0: 100, 1: 60}, max_records=30)
    assert done.empty and done.lag == 0
