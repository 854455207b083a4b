#!/usr/bin/env bash
# Create .venv with the project's dependencies (and test extras) on first use, or again
# when pyproject.toml or this script changed. Needs only python3 (3.10+) on PATH.
#
# The project itself is not built or installed into .venv: a .pth file puts this checkout
# on the venv's sys.path, so every Python of the venv imports spark_coord and
# pyspark_coordkafka as they are in the working tree. Spark's Python workers need exactly
# that: Spark discovers data sources by scanning sys.path for modules named pyspark_*
# (pkgutil), which an editable install's import hook would not show. The `spark-coord`
# command is a small launcher in .venv/bin.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="$root/.venv"
py=${PYTHON:-python3}
stamp="$venv/.installed"
want=$(cat "$root/pyproject.toml" "$root/scripts/ensure-venv.sh" "$root/scripts/pyproject_info.py" | sha256sum | cut -d' ' -f1)
if [ ! -x "$venv/bin/python" ]; then
  echo "spark-coord: creating virtual environment in .venv" >&2
  "$py" -m venv "$venv"
fi
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "spark-coord: installing dependencies into .venv (first run takes a minute)" >&2
  vpy="$venv/bin/python"
  "$vpy" -m pip install --quiet --upgrade pip >&2
  "$vpy" -c 'import tomllib' 2>/dev/null || "$vpy" -m pip install --quiet 'tomli>=2.0' >&2
  # an install of the package itself (older set-ups of this checkout) would shadow the working tree
  "$vpy" -m pip uninstall --quiet --yes spark-coord >/dev/null 2>&1 || true
  "$vpy" "$root/scripts/pyproject_info.py" requirements --extra test > "$venv/requirements.txt"
  "$vpy" -m pip install --quiet -r "$venv/requirements.txt" >&2
  site=$("$vpy" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$root" > "$site/spark_coord_checkout.pth"
  # Spark's Python processes then import pyspark from here, not from its uncached zip (spark_coord/sitepath.py)
  echo "import sys, spark_coord.sitepath as s; s.prefer_installed_pyspark(sys.path)" > "$site/spark_coord_sitepath.pth"
  "$vpy" "$root/scripts/pyproject_info.py" launchers "$venv/bin"
  echo "$want" > "$stamp"
fi
# The checkout's modules compiled (quick when they are up to date): Python caches them itself on
# first import unless PYTHONDONTWRITEBYTECODE says not to, and Spark starts a fresh Python process
# for every streaming query's reader, which would compile them all again each time.
"$venv/bin/python" -m compileall -q "$root/spark_coord" "$root/pyspark_coordkafka" "$root/testkit" >/dev/null 2>&1 || true
