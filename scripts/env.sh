#!/usr/bin/env bash
# Ensure the pinned environment exists for $PYTHON (default python3) and print its path.
# The pins are requirements/test.txt, with requirements/py<X.Y>.txt (where there is one for that Python)
# replacing the pins it names. The environment is keyed by a hash of those files and the Python version, so
# repeated runs, from any checkout, reuse it instead of reinstalling (torch 2.9 from PyPI is a ~7 GB install).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
if ! pyver=$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")'); then
  echo "PYTHON=$python does not run: set PYTHON to a Python 3.10 or 3.11 interpreter" >&2
  exit 2
fi
pins=("$repo/requirements/test.txt")
if [ -f "$repo/requirements/py$pyver.txt" ]; then
  pins+=("$repo/requirements/py$pyver.txt")
fi
key=$(cat "${pins[@]}" | sha256sum | cut -c1-16)
root=${TRNCONSOLE_ENV_ROOT:-$HOME/.cache/trnconsole/envs}
env="$root/py$pyver-$key"
mkdir -p "$root"
# One installer at a time: a second caller waits for the first instead of deleting its half-built env.
exec 9>"$root/.py$pyver-$key.lock"
flock 9
if [ ! -f "$env/.complete" ]; then
  echo "Installing the pinned environment for Python $pyver into $env (first time only, a few minutes)..." >&2
  rm -rf "$env"
  "$python" -m venv "$env"
  # The pins actually installed, kept in the environment: test.txt less what the per-version file replaces.
  "$env/bin/python" - "${pins[@]}" >"$env/requirements.txt" <<'PY'
import re
import sys
from pathlib import Path


def name(line: str) -> str | None:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", line.split("#", 1)[0])
    return re.sub(r"[-_.]+", "-", match.group(1)).lower() if match else None


base, *overrides = (Path(p).read_text().splitlines() for p in sys.argv[1:])
replaced = {name(line) for lines in overrides for line in lines} - {None}
for line in base:
    if name(line) not in replaced:
        print(line)
for lines in overrides:
    print("\n".join(lines))
PY
  "$env/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
  "$env/bin/python" -m pip install --quiet --disable-pip-version-check -r "$env/requirements.txt" >&2
  touch "$env/.complete"
fi
# The project itself is reinstalled every time (seconds): the environment is shared between checkouts.
log=$(mktemp)
if ! "$env/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation \
    -e "$repo" >"$log" 2>&1; then
  cat "$log" >&2
  rm -f "$log"
  exit 1
fi
rm -f "$log"
echo "$env"
