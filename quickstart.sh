#!/usr/bin/env bash
# Run the main job on the embedded default: a local ZooKeeper and broker are started
# for you and stopped at the end (installs into .venv on first use).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
"$root/scripts/ensure-venv.sh"
cd "$root"
exec "$root/.venv/bin/spark-coord" demo "$@"
