#!/usr/bin/env bash
# Run the main job on the embedded default: a local ZooKeeper and broker are started
# for you, a click stream is produced and aggregated by a Spark streaming query that
# reads it through coordkafka as a consumer-group member, and everything is stopped at
# the end (installs into .venv on first use). Extra arguments go to jobs/quickstart.py.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec "$root/spark-submit.sh" "$root/jobs/quickstart.py" "$@"
