#!/usr/bin/env bash
# The documentation site (MkDocs + Material, mkdocs.yml), with the project's environment:
#   scripts/docs.sh build [DIR]   build it in strict mode into DIR (default: site/)
#   scripts/docs.sh serve         serve it on http://127.0.0.1:8000, rebuilt on every change
# The docs' dependencies are the "docs" extra of pyproject.toml; .venv gets them on first use
# (scripts/ensure-venv.sh installs the test extra, which includes them).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/ensure-venv.sh"
cd "$root"
export NO_MKDOCS_2_WARNING=1   # the theme's notice about its successor, printed by every build
mkdocs=("$root/.venv/bin/python" -m mkdocs)
case "${1:-build}" in
  build) exec "${mkdocs[@]}" build --strict --clean --site-dir "${2:-$root/site}" ;;
  serve) shift; exec "${mkdocs[@]}" serve --strict "$@" ;;
  *) echo "usage: scripts/docs.sh build [DIR] | serve [mkdocs serve options]" >&2; exit 2 ;;
esac
