# Sourced by scripts/demo and scripts/test: make ./.venv with pinchpoint and what it needs.
# torch is pinned to the CPU build this machine kind has on disk; a looser pin pulls a CUDA build.
set -eu
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="$ROOT/.venv"
PY="$VENV/bin/python"
STAMP="$VENV/.pinchpoint-installed"
if [ ! -x "$PY" ]; then
  python3 -m venv "$VENV"
fi
if [ ! -f "$STAMP" ] || [ "$ROOT/pyproject.toml" -nt "$STAMP" ]; then
  echo "pinchpoint: setting up $VENV (first run takes a minute)..." >&2
  "$PY" -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null 2>&1 || true
  "$PY" -m pip install -q --disable-pip-version-check "torch==2.13.0" 2>&1 | grep -v "^WARNING: Location" >&2 || true
  "$PY" -m pip install -q --disable-pip-version-check -e "$ROOT[dev]" 2>&1 | grep -v "^WARNING: Location" >&2 || true
  "$PY" -c "import torch, pinchpoint, pytest" || { echo "pinchpoint: venv setup failed" >&2; exit 1; }
  touch "$STAMP"
fi
