"""Share groups (KIP-932) in the metrics: the leaders' share partitions (``ShareCollector``), the
coordinator's share groups with their lag from ZooKeeper (``GroupCollector``, the sampler) and the
status page's data -- without a broker."""

from __future__ import annotations

import asyncio
import threading
from html.parser import HTMLParser
from types import SimpleNamespace

import pytest
from metrics_support import dump_dom, require
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from spark_coord.coordinator.doors.share_admin import ShareState
from spark_coord.metrics.exporter import GroupCollector, ShareCollector
from spark_coord.metrics.lag import ClusterSnapshot, LagTracker, LogEnds, ShareGroupView, ShareMemberView, sample_lag
from spark_coord.metrics.status import status_document, status_page


def scrape(collector) -> dict:
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


@pytest.fixture
def loop():
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


def test_the_leader_exports_its_share_partitions(loop):
    stats = {("sg", "t", 0): {"start_offset": 10, "end_offset": 16, "deliveries": 9, "archived_total": 2,
                              "available": 1, "acquired": 2, "acknowledged": 2, "archived": 1},
             ("sg", "t", 1): {"start_offset": 3, "end_offset": 3, "deliveries": 0, "archived_total": 0,
                              "available": 0, "acquired": 0, "acknowledged": 0, "archived": 0},
             ("sg", "moved", 0): {"start_offset": 1, "end_offset": 1, "deliveries": 0, "archived_total": 0,
                                  "available": 0, "acquired": 0, "acknowledged": 0, "archived": 0}}
    share = SimpleNamespace(stats=lambda: stats, sessions={("sg", "m1"): object()}, acquired_total=40,
                            acknowledged_total=37)
    ends = {("t", 0): 20, ("t", 1): 3}
    broker = SimpleNamespace(ctx=SimpleNamespace(share=share, is_leader=lambda t, p: t != "moved"),
                             logs=SimpleNamespace(get=lambda t, p: SimpleNamespace(log_end_offset=ends[(t, p)])))
    found = scrape(ShareCollector(broker, loop))

    def labels(p, **more):
        return tuple(sorted({"sharegroup": "sg", "topic": "t", "partition": str(p), **more}.items()))

    assert found[("spark_coord_share_partition_start_offset", labels(0))] == 10
    assert found[("spark_coord_share_partition_in_flight_records", labels(0))] == 6
    assert found[("spark_coord_share_partition_records", labels(0, state="acquired"))] == 2
    assert found[("spark_coord_share_partition_records", labels(0, state="archived"))] == 1
    assert found[("spark_coord_share_partition_lag", labels(0))] == 20 - 10 - 2 - 1
    assert found[("spark_coord_share_partition_lag", labels(1))] == 0
    assert found[("spark_coord_share_partition_deliveries_total", labels(0))] == 9
    assert found[("spark_coord_share_partition_archived_records_total", labels(0))] == 2
    assert found[("spark_coord_share_sessions", ())] == 1
    assert found[("spark_coord_share_acquired_records_total", ())] == 40
    assert found[("spark_coord_share_acknowledged_records_total", ())] == 37
    # a partition this broker no longer leads is left to its leader
    assert not [k for k in found if ("topic", "moved") in k[1]]


def share_snapshot() -> ClusterSnapshot:
    group = ShareGroupView("sg", "Stable", 3, (ShareMemberView("m1", "c1", "10.0.0.1", (("t", 0),)),
                                               ShareMemberView("m2", "c2", "10.0.0.2", (("t", 1),))))
    return ClusterSnapshot(coordinating=True, epoch=2, share_groups=(group,), topics={"t": 2})


def test_the_coordinator_exports_share_groups_with_their_lag_from_zookeeper():
    states = {"sg": {("t", 0): ShareState(5, ((5, 6),)), ("t", 1): ShareState(8)}}
    tracker = LagTracker(share_snapshot, LogEnds(local={("t", 0): 10, ("t", 1): 8}.get),
                         share_states=lambda g: states[g])
    found = scrape(GroupCollector(tracker))
    assert found[("spark_coord_share_group_members", (("sharegroup", "sg"),))] == 2
    assert found[("spark_coord_share_group_epoch", (("sharegroup", "sg"),))] == 3
    assert found[("spark_coord_share_group_lag", (("sharegroup", "sg"),))] == (10 - 5 - 2) + 0
    assert tracker.history()["sg"][-1][1] == 3


def test_status_document_lists_share_groups_members_and_lag():
    def unreadable(group):
        raise OSError("ZooKeeper unreachable")

    sample = sample_lag(share_snapshot(), LogEnds(local={("t", 0): 10}.get),
                        lambda g: {("t", 0): ShareState(4), ("t", 1): ShareState(0)})
    doc = status_document("broker 0", sample, {"sg": [(1.0, 6)]}, 60_000)
    [g] = doc["share_groups"]
    assert (g["group"], g["state"], g["epoch"], g["lag"], g["members_total"]) == ("sg", "Stable", 3, 6, 2)
    assert g["members"][0] == {"id": "m1", "client": "c1", "host": "10.0.0.1", "partitions": ["t-0"]}
    assert g["partitions"] == [{"topic": "t", "partition": 0, "start": 4, "log_end": 10, "lag": 6},
                               {"topic": "t", "partition": 1, "start": 0, "log_end": None, "lag": None}]
    assert g["history"] == [[1.0, 6]] and doc["share_groups_total"] == 1
    # state that cannot be read: the group is still listed, its lag unknown
    doc = status_document("broker 0", sample_lag(share_snapshot(), LogEnds(), unreadable), {}, 60_000)
    assert doc["share_groups"][0]["lag"] is None
    assert [p["start"] for p in doc["share_groups"][0]["partitions"]] == [None, None]


class ShareDom(HTMLParser):
    """The share-group sections of a dumped status page and the rows of their tables."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: list[str] = []
        self.rows: list[tuple[str, list[str]]] = []
        self.texts: list[str] = []
        self._in_share = False
        self._row: list[str] | None = None
        self._cls = ""
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "section":
            self._in_share = "share-group" in (a.get("class") or "").split()
            if self._in_share:
                self.sections.append(a.get("data-group"))
        elif tag == "tr" and self._in_share:
            self._row, self._cls = [], a.get("class") or ""
        elif tag == "td" and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            if self._row:
                self.rows.append((self._cls, self._row))
            self._row = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        if self._in_share:
            self.texts.append(data)


def test_the_status_page_renders_share_groups_in_chromium(tmp_path):
    require("chromium", "chromium")
    sample = sample_lag(share_snapshot(), LogEnds(local={("t", 0): 10, ("t", 1): 8}.get),
                        lambda g: {("t", 0): ShareState(4), ("t", 1): ShareState(8)})
    now = sample.snapshot.taken
    doc = status_document("broker 0", sample, {"sg": [(now - 10, 9), (now - 5, 7), (now, 6)]}, 60_000)
    page = tmp_path / "status.html"
    page.write_bytes(status_page(doc))
    dom = ShareDom()
    dom.feed(dump_dom(tmp_path, page.as_uri()))
    assert dom.sections == ["sg"]
    assert [cells for cls, cells in dom.rows if cls == "member"] == [["m1", "c1", "10.0.0.1", "t-0"],
                                                                    ["m2", "c2", "10.0.0.2", "t-1"]]
    assert [cells for cls, cells in dom.rows if cls.startswith("partition")] == [
        ["t", "0", "4", "10", "6"], ["t", "1", "8", "8", "0"]]
    assert "total lag " in "".join(dom.texts) and "6" in "".join(dom.texts)
