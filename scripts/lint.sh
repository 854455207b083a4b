#!/usr/bin/env bash
# Lint and type-check the checkout (installs into .venv on first use): ruff over the whole tree
# and mypy over the packages [tool.mypy] lists, both configured in pyproject.toml.
#
#   scripts/lint.sh            # both; the exit status is non-zero when either finds something
#   scripts/lint.sh --fix      # ruff fixes what it can (import order, unused imports) first
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/ensure-venv.sh"
cd "$root"
rc=0
echo "lint: ruff check" >&2
"$root/.venv/bin/python" -m ruff check "$@" . || rc=1
echo "lint: mypy" >&2
"$root/.venv/bin/python" -m mypy || rc=1
exit $rc
