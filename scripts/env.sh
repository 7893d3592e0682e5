#!/usr/bin/env bash
# Ensure the pinned environment (requirements/test.txt) exists and print its path.
# The environment is keyed by a hash of the pins and the Python version, so repeated runs,
# from any checkout, reuse it instead of reinstalling (torch 2.9 from PyPI is a ~7 GB install).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
pyver=$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
key=$(cat "$repo/requirements/test.txt" | sha256sum | cut -c1-16)
root=${TRNCONSOLE_ENV_ROOT:-$HOME/.cache/trnconsole/envs}
env="$root/py$pyver-$key"
mkdir -p "$root"
# One installer at a time: a second caller waits for the first instead of deleting its half-built env.
exec 9>"$root/.py$pyver-$key.lock"
flock 9
if [ ! -f "$env/.complete" ]; then
  echo "Installing the pinned environment into $env (first time only, a few minutes)..." >&2
  rm -rf "$env"
  "$python" -m venv "$env"
  "$env/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
  "$env/bin/python" -m pip install --quiet --disable-pip-version-check -r "$repo/requirements/test.txt" >&2
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
