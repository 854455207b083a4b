#!/usr/bin/env bash
# Run a PySpark job with the project's environment: creates .venv on first use
# (scripts/ensure-venv.sh), points Spark's driver and worker Pythons at it (the
# workers must import spark_coord and pyarrow), puts this checkout on PYTHONPATH
# (Spark finds the coordkafka source by scanning it for pyspark_* modules), reads
# conf/spark-defaults.conf, and hands everything else to pyspark's spark-submit.
#
# PYSPARK_PYTHON set beforehand is kept: on a cluster it names the executors' Python
# (./env/bin/python of a packed environment, see docs/spark/clusters.md).
#
#   ./spark-submit.sh jobs/quickstart.py
#   ./spark-submit.sh --master 'local[4]' jobs/sessionize_clicks.py --bootstrap 127.0.0.1:9092
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
"$root/scripts/ensure-venv.sh"
py="$root/.venv/bin/python"
export PYSPARK_PYTHON="${PYSPARK_PYTHON:-$py}"
export PYSPARK_DRIVER_PYTHON="$py"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
exec "$root/.venv/bin/spark-submit" --properties-file "$root/conf/spark-defaults.conf" "$@"
