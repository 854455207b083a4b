"""The Maven resolver of the peers (tests/peers/maven.py), with a stand-in ``mvn`` on PATH that
copies a made-up jar and counts its runs: one run for any number of resolvers at once, none
once resolved, again when the pom changes, and a failure answered from its record."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from peers import maven

FAKE_MVN = """#!/bin/sh
# counts its runs; copies one jar into -DoutputDirectory=..., or fails when told to
echo run >> "$FAKE_MVN_RUNS"
sleep 0.3
if [ -n "$FAKE_MVN_FAIL" ]; then echo "[ERROR] Failed to execute goal: artifact not found"; exit 1; fi
for arg in "$@"; do
  case "$arg" in -DoutputDirectory=*) out="${arg#-DoutputDirectory=}" ;; esac
done
mkdir -p "$out" && echo jar > "$out/thing-1.0.jar" && echo jar > "$out/dropped-2.0.jar"
"""


@pytest.fixture
def fake_mvn(tmp_path, monkeypatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mvn").write_text(FAKE_MVN)
    (bin_dir / "mvn").chmod(0o755)
    runs = tmp_path / "runs"
    runs.touch()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_MVN_RUNS", str(runs))
    monkeypatch.setenv("SPARK_COORD_MAVEN_CACHE", str(tmp_path / "cache"))
    return runs


def _runs(runs: Path) -> int:
    return len(runs.read_text().splitlines())


def test_resolvers_at_once_run_maven_once_and_reuse_the_folder(fake_mvn, tmp_path):
    pom = tmp_path / "pom.xml"
    pom.write_text("<project>one</project>")
    found, failures = [], []

    def resolve():
        try:
            found.append(maven.resolve(pom, "things", keep=lambda jar: not jar.startswith("dropped-")))
        except Exception as e:  # noqa: BLE001 -- a thread's failure, reported below with the others
            failures.append(e)

    threads = [threading.Thread(target=resolve) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not failures and len(found) == 6 and len(set(found)) == 1
    folder = found[0]
    assert folder.parent == tmp_path / "cache" and sorted(p.name for p in folder.glob("*.jar")) == ["thing-1.0.jar"]
    assert _runs(fake_mvn) == 1
    assert [p for p in folder.parent.iterdir() if p.is_dir()] == [folder], "no scratch folder is left"

    assert maven.resolve(pom, "things") == folder and _runs(fake_mvn) == 1  # reused: no Maven run
    pom.write_text("<project>two</project>")
    assert maven.resolve(pom, "things") != folder and _runs(fake_mvn) == 2  # a changed list resolves again


def test_a_failed_resolve_is_answered_from_its_record(fake_mvn, tmp_path, monkeypatch):
    pom = tmp_path / "pom.xml"
    pom.write_text("<project/>")
    monkeypatch.setenv("FAKE_MVN_FAIL", "1")
    with pytest.raises(maven.MavenUnavailable, match="artifact not found"):
        maven.resolve(pom, "missing")
    with pytest.raises(maven.MavenUnavailable, match="artifact not found"):
        maven.resolve(pom, "missing")
    assert _runs(fake_mvn) == 1
    assert not maven.resolved_dir(pom, "missing").exists()

    monkeypatch.delenv("FAKE_MVN_FAIL")
    monkeypatch.setattr(maven, "FAILED_TTL_S", 0.0)  # the record has expired
    assert (maven.resolve(pom, "missing") / "thing-1.0.jar").is_file() and _runs(fake_mvn) == 2
