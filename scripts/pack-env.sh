#!/usr/bin/env bash
# Build env.tar.gz: a Python environment for Spark executors on a cluster, holding
# spark-coord (the package, built from this checkout) and its dependencies except
# pyspark and py4j, which the executors' Spark provides. Ship it with
#
#   PYSPARK_PYTHON=./env/bin/python ./spark-submit.sh --master spark://HOST:7077 \
#       --archives env.tar.gz#env jobs/JOB.py ...
#
# Spark unpacks it as ./env in every executor's working directory. The environment is a
# plain venv made with the Python of .venv (Spark wants the same Python minor version
# on the driver and the executors): env/bin/python links to that interpreter's path,
# so the executors' machines need the same Python installed at the same path.
#
#   scripts/pack-env.sh [OUTPUT]        (default: env.tar.gz in the current directory)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=$(realpath -m "${1:-env.tar.gz}")
"$root/scripts/ensure-venv.sh"
base=$("$root/.venv/bin/python" -c 'import sys; print(getattr(sys, "_base_executable", sys.executable))')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Build from a copy of what the package consists of, so nothing is written into the checkout.
mkdir "$work/src"
cp -r "$root/pyproject.toml" "$root/README.md" "$root/spark_coord" "$root/pyspark_coordkafka" "$work/src/"
find "$work/src" -name __pycache__ -type d -prune -exec rm -rf {} +

echo "spark-coord: building the executors' environment with $base" >&2
"$base" -m venv "$work/env"
"$root/.venv/bin/python" "$root/scripts/pyproject_info.py" requirements --without pyspark --without py4j \
  > "$work/requirements.txt"
"$work/env/bin/python" -m pip install --quiet --disable-pip-version-check -r "$work/requirements.txt" >&2
"$work/env/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps "$work/src" >&2
"$work/env/bin/python" -c 'import importlib.util, spark_coord, pyarrow, kazoo, crc32c, cramjam
assert importlib.util.find_spec("pyspark_coordkafka"), "pyspark_coordkafka is missing"'

tar -czf "$out.tmp" -C "$work/env" .
mv "$out.tmp" "$out"
echo "spark-coord: wrote $out ($(du -h "$out" | cut -f1))" >&2
