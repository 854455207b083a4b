"""The status page in a real browser (headless Chromium): a group's members and partitions, and its
lag plot, rendered from the data embedded in the page and refreshed in place; a screenshot is
written to the test's temporary directory."""

from __future__ import annotations

import json
import re
import threading
import urllib.request
from html.parser import HTMLParser

from helpers import wait_until
from metrics_support import dump_dom, require, screenshot

from spark_coord.client.admin import AdminClient
from spark_coord.client.groups import GroupClient
from spark_coord.client.metadata import ClusterClient
from spark_coord.client.producer import Producer
from spark_coord.consumer import Consumer

PARTITIONS, PER_PARTITION = 3, 100


class Dom(HTMLParser):
    """The parts of the dumped DOM the test looks at."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: list[str] = []
        self.plots: dict[str, dict] = {}
        self.polylines: list[str] = []
        self.rows: list[tuple[str, list[str]]] = []
        self.body: dict = {}
        self._row: list[str] | None = None
        self._row_class = ""
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body":
            self.body = a
        elif tag == "section" and "group" in (a.get("class") or ""):
            self.sections.append(a.get("data-group"))
        elif tag == "svg" and "lag-plot" in (a.get("class") or ""):
            self.plots[a.get("data-group")] = a
        elif tag == "polyline":
            self.polylines.append(a.get("points") or "")
        elif tag == "tr":
            self._row, self._row_class = [], a.get("class") or ""
        elif tag == "td" and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            if self._row:
                self.rows.append((self._row_class, self._row))
            self._row = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def status(url: str) -> dict:
    with urllib.request.urlopen(f"{url}/status.json", timeout=10) as r:
        return json.loads(r.read())


def test_status_page_shows_the_groups_rows_and_lag_plot_in_chromium(broker_factory, tmp_path):
    require("chromium", "chromium")
    b = broker_factory(0, **{"metrics.port": 0, "metrics.lag.sample.ms": 200})
    url = b.broker.metrics.url
    bootstrap = f"127.0.0.1:{b.port}"
    with ClusterClient(bootstrap) as cc:
        AdminClient(cc).create_topic("clicks", PARTITIONS)
        producer = Producer(cc)
        for p in range(PARTITIONS):
            for i in range(PER_PARTITION):
                producer.send("clicks", b"click-%d" % i, partition=p)
        producer.flush()
        GroupClient(cc).commit_offsets("dashboards", {("clicks", p): 0 for p in range(PARTITIONS)})
    total = PARTITIONS * PER_PARTITION

    def lagging_points() -> int:
        groups = status(url)["groups"]  # the group shows from the next sample on
        return sum(1 for _, lag in groups[0]["history"] if lag == total) if groups else 0

    wait_until(lambda: lagging_points() >= 3, timeout=20, message="a lag history while nothing is consumed")
    consumer = Consumer(bootstrap, "dashboards", topics=["clicks"], session_timeout_ms=1500)
    read = threading.Thread(target=lambda: [None for _ in consumer.batches(timeout=30)], daemon=True)
    read.start()
    try:
        wait_until(lambda: (g := status(url)["groups"][0])["lag"] == 0 and g["members_total"] == 1
                   and sum(1 for _, lag in g["history"] if lag == 0) >= 2, timeout=30,
                   message=lambda: f"the group caught up: {status(url)['groups']}")
        dom = Dom()
        dom.feed(dump_dom(tmp_path, f"{url}/"))
        assert dom.sections == ["dashboards"]
        members = [cells for cls, cells in dom.rows if cls.startswith("member")]
        assert members == [[consumer.consumer_id, "coordinator", members[0][2], str(PARTITIONS)]]
        assert re.fullmatch(r"127\.0\.0\.1:\d+", members[0][2])
        partitions = [cells for cls, cells in dom.rows if cls.startswith("partition")]
        assert partitions == [["clicks", str(p), consumer.consumer_id, "100", "100", "0"] for p in range(PARTITIONS)]
        plot = dom.plots["dashboards"]
        assert int(plot["data-points"]) >= 5
        [points] = dom.polylines
        heights = {float(xy.split(",")[1]) for xy in points.split()}
        assert len(heights) >= 2  # the lag went from its maximum to 0: two heights at least
        assert int(dom.body.get("data-refreshes", 0)) >= 1  # refreshed in place from status.json
        shot = screenshot(tmp_path, f"{url}/", tmp_path / "status-page.png")
        assert shot.stat().st_size > 10_000
    finally:
        consumer.close()
        read.join(30)
