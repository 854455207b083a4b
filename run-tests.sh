#!/usr/bin/env bash
# Run the test suite (installs into .venv on first use). Extra arguments go to pytest.
#
# The tests run side by side in pytest-xdist workers (SPARK_COORD_TEST_WORKERS, 4 by default:
# most tests wait on real processes, so four keep two cores busy), each taking whole test files,
# longest first (tests/scheduling.py); the slowest 30 tests are listed at the end. `-n 0` (or any
# -n of your own) runs them your way: `./run-tests.sh -n 0 tests/spark/test_spark_stream.py -x`.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
"$root/scripts/ensure-venv.sh"
cd "$root"
parallel=(-n "${SPARK_COORD_TEST_WORKERS:-4}" --dist loadfile)
for arg in "$@"; do
  case $arg in -n|-n*|--numprocesses|--numprocesses=*|no:xdist) parallel=() ;; esac
done
exec "$root/.venv/bin/python" -m pytest "${parallel[@]}" --durations=30 "$@"
