#!/usr/bin/env bash
# Run the test suite (installs into .venv on first use). Extra arguments go to pytest.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
"$root/scripts/ensure-venv.sh"
cd "$root"
exec "$root/.venv/bin/python" -m pytest "$@"
