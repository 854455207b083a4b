#!/usr/bin/env bash
# Run a Spark Declarative Pipeline (pyspark's spark-pipelines: init, run, dry-run) with the
# project's environment, as ./spark-submit.sh runs a job: .venv created on first use,
# Spark's Python workers run .venv's Python, this checkout on PYTHONPATH (where Spark's
# data-source lookup finds pyspark_coordkafka), the settings of conf/spark-defaults.conf.
#
# What a pipeline keeps between runs lives in one state directory (tmp/spark-pipelines in
# this checkout; --state DIR, first, or SPARK_PIPELINES_STATE to move it): the tables
# (warehouse/), the catalog that names them (a Derby metastore, metastore_db/), and each
# pipeline's storage -- its streaming checkpoints -- where the spec's storage is a relative
# path (scripts/spark_pipelines_cli.py; pyspark's own command wants an absolute URI).
#
#   ./spark-pipelines.sh run --spec jobs/pipeline/spark-pipeline.yml
#   ./spark-pipelines.sh run --spec jobs/pipeline/spark-pipeline.yml --full-refresh clicks_raw
#   ./spark-pipelines.sh --state /var/lib/pipelines --conf spark.coordkafka.clicks.bootstrap=broker1:9092 run --spec ...
#
# Spark's own options (--conf, --master, --driver-memory ...) go before the command.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
state=${SPARK_PIPELINES_STATE:-$root/tmp/spark-pipelines}
if [ "${1:-}" = --state ]; then
  state=$2
  shift 2
fi
"$root/scripts/ensure-venv.sh"
py="$root/.venv/bin/python"
export PYSPARK_PYTHON="${PYSPARK_PYTHON:-$py}"
export PYSPARK_DRIVER_PYTHON="$py"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$state"
state=$(cd "$state" && pwd)
export SPARK_PIPELINES_STATE="$state"

# conf/spark-defaults.conf as --conf options: a pipeline runs on Spark Connect (a local
# server unless --remote sc://HOST:PORT names one), which refuses a spark.master beside it
conf=()
while read -r key value; do
  case $key in ''|'#'*|spark.master) continue ;; esac
  conf+=(--conf "$key=$value")
done < "$root/conf/spark-defaults.conf"
# tables and their catalog kept in the state directory, so the next run finds them
conf+=(--conf spark.sql.catalogImplementation=hive
       --conf "spark.sql.warehouse.dir=$state/warehouse"
       --conf "spark.hadoop.javax.jdo.option.ConnectionURL=jdbc:derby:;databaseName=$state/metastore_db;create=true"
       --driver-java-options "-Dderby.system.home=$state")
# a local Connect server (no --remote) on a port of its own: pipelines side by side, and beside
# ./spark-connect.sh's server on 15002 (scripts/spark_pipelines_cli.py finds the port)
case " $* " in *" --remote "*|*" --remote="*) ;; *) conf+=(--conf spark.connect.grpc.binding.port=0) ;; esac
exec "$root/.venv/bin/spark-class" org.apache.spark.deploy.SparkPipelines \
    "$root/scripts/spark_pipelines_cli.py" "${conf[@]}" "$@"
