#!/usr/bin/env bash
# Create .venv and install the project (with test extras) on first use, or again
# when pyproject.toml changed. Needs only python3 (3.10+) on PATH.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="$root/.venv"
py=${PYTHON:-python3}
stamp="$venv/.installed"
want=$(cat "$root/pyproject.toml" "$root/scripts/ensure-venv.sh" | sha256sum | cut -d' ' -f1)
if [ ! -x "$venv/bin/python" ]; then
  echo "spark-coord: creating virtual environment in .venv" >&2
  "$py" -m venv "$venv"
fi
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "spark-coord: installing dependencies into .venv (first run takes a minute)" >&2
  "$venv/bin/python" -m pip install --quiet --upgrade pip >&2
  # compat mode puts the project root on sys.path, so Spark's Python workers find the
  # top-level pyspark_coordkafka module (Spark discovers data sources by scanning sys.path)
  "$venv/bin/python" -m pip install --quiet -e "$root[test]" --config-settings editable_mode=compat >&2
  echo "$want" > "$stamp"
fi
