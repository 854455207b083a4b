#!/usr/bin/env bash
# Resolve Apache Kafka 4.2's jars (scripts/apache-kafka/pom.xml) and Spark's Kafka connector at
# the installed pyspark's version (scripts/apache-kafka/spark-sql-kafka.pom.xml) with mvn into
# the cache outside the repository, and print where they are; the tests do the same on first
# use (tests/peers/apache_kafka.py). A resolved list is reused with no network.
#   scripts/apache-kafka.sh [kafka|spark-kafka|all]
# The cache: $SPARK_COORD_MAVEN_CACHE, else $XDG_CACHE_HOME/spark-coord/maven, else
# ~/.cache/spark-coord/maven.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/ensure-venv.sh"
cd "$root/tests"
exec "$root/.venv/bin/python" -m peers.apache_kafka resolve "$@"
