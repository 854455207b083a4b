"""The environment scripts/ensure-venv.sh builds: the checkout is on every venv Python's
sys.path (a .pth file, no editable-install hook), so Spark's data source discovery, which
scans sys.path for modules named pyspark_*, finds ``coordkafka`` with no ``register()``
call and no PYTHONPATH; the ``spark-coord`` launcher runs the checkout's CLI; Spark's Python
processes import pyspark from site-packages rather than from its uncached zip."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"

pytestmark = pytest.mark.skipif(not VENV_PYTHON.exists(), reason="needs the .venv of scripts/ensure-venv.sh")


def _clean_env() -> dict:
    """This machine's environment without anything that would put the checkout on sys.path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "SPARK_HOME")}
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = str(VENV_PYTHON)
    return env


def _run(args: list[str], tmp_path: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=tmp_path, env=_clean_env(), capture_output=True, text=True, timeout=timeout)


def test_discovery_scan_finds_the_source_in_the_checkout(tmp_path):
    probe = ("import pkgutil, spark_coord, pyspark_coordkafka;"
             "print([m.name for m in pkgutil.iter_modules() if m.name == 'pyspark_coordkafka']);"
             "print(spark_coord.__file__); print(pyspark_coordkafka.DefaultSource.name())")
    out = _run([str(VENV_PYTHON), "-c", probe], tmp_path)
    assert out.returncode == 0, out.stderr
    found, module_file, name = out.stdout.splitlines()
    assert found == "['pyspark_coordkafka']"
    assert Path(module_file) == ROOT / "spark_coord" / "__init__.py", "the venv imports another copy"
    assert name == "coordkafka"


def test_no_installed_copy_shadows_the_checkout(tmp_path):
    probe = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(_run([str(VENV_PYTHON), "-c", probe], tmp_path).stdout.strip())
    assert (site / "spark_coord_checkout.pth").read_text().strip() == str(ROOT)
    copies = [p.name for pattern in ("spark_coord*", "pyspark_coordkafka*", "__editable__*spark_coord*")
              for p in site.glob(pattern) if p.name not in ("spark_coord_checkout.pth", "spark_coord_sitepath.pth")]
    assert not copies, f"an installed copy of the package in {site}: {copies}"


def test_spark_processes_import_pyspark_from_site_packages_not_its_zip(tmp_path):
    """Spark puts its pyspark.zip first on its Python processes' PYTHONPATH; in this venv they
    import the same pyspark from site-packages instead, whose compiled modules are cached."""
    probe = "import pyspark; print(pyspark.__file__)"
    bare = _run([str(VENV_PYTHON), "-c", probe], tmp_path)
    assert bare.returncode == 0, bare.stderr
    package = Path(bare.stdout.strip()).parent
    zips = sorted((package / "python" / "lib").glob("*.zip"))
    assert [z.name.split("-")[0] for z in zips] == ["py4j", "pyspark.zip"], "the pip pyspark ships its zips"
    env = dict(_clean_env(), PYTHONPATH=os.pathsep.join(map(str, zips)))
    probe_path = probe + "; import sys; print([p for p in sys.path if 'pyspark' in p])"
    out = subprocess.run([str(VENV_PYTHON), "-c", probe_path], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    where, left = out.stdout.splitlines()
    assert Path(where) == package / "__init__.py"
    assert left == "[]"


def test_only_a_pyspark_packages_own_zips_are_dropped(tmp_path):
    """A zip of a Spark installed elsewhere (a cluster's /opt/spark) is what its JVM runs: kept."""
    from spark_coord.sitepath import prefer_installed_pyspark

    site = tmp_path / "site-packages"
    own = site / "pyspark" / "python" / "lib"
    other = tmp_path / "opt" / "spark" / "python" / "lib"
    for d in (own, other):
        d.mkdir(parents=True)
        (d / "pyspark.zip").touch()
    (own / "py4j-0.10.9.9-src.zip").touch()
    path = [str(own / "pyspark.zip"), str(own / "py4j-0.10.9.9-src.zip"), str(other / "pyspark.zip"), str(site)]
    assert prefer_installed_pyspark(path) == [str(own / "pyspark.zip"), str(own / "py4j-0.10.9.9-src.zip")]
    assert path == [str(other / "pyspark.zip"), str(site)]
    without_site = [str(own / "pyspark.zip")]
    assert prefer_installed_pyspark(without_site) == [] and without_site == [str(own / "pyspark.zip")]


def test_launcher_runs_the_checkouts_cli(tmp_path):
    out = _run([str(ROOT / ".venv" / "bin" / "spark-coord"), "groups", "describe", "--help"], tmp_path)
    assert out.returncode == 0 and "usage: spark-coord groups describe" in out.stdout, out.stderr


@pytest.mark.slow
def test_spark_worker_finds_coordkafka_without_register_or_pythonpath(tmp_path):
    """A fresh Spark (its own JVM and Python workers, started from another directory with no
    PYTHONPATH) resolves format("coordkafka") to our source: load() fails with our message
    naming the missing option, not with DATA_SOURCE_NOT_FOUND."""
    job = tmp_path / "probe.py"
    job.write_text(
        "from pyspark.sql import SparkSession\n"
        "spark = SparkSession.builder.master('local[1]').config('spark.ui.enabled', 'false').getOrCreate()\n"
        "try:\n"
        "    spark.read.format('coordkafka').load()\n"
        "except Exception as e:\n"
        "    print('LOAD FAILED:', e)\n"
        "spark.stop()\n")
    out = _run([str(VENV_PYTHON), str(job)], tmp_path, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "LOAD FAILED:" in out.stdout and "bootstrap.brokers" in out.stdout, out.stdout[-3000:]
    assert "DATA_SOURCE_NOT_FOUND" not in out.stdout
