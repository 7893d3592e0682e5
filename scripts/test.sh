#!/usr/bin/env bash
# Install the pinned environment (once) and run the whole test suite: ruff lint + format check, then pytest.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
env=$(bash "$repo/scripts/env.sh")
cd "$repo"
"$env/bin/ruff" check .
"$env/bin/ruff" format --check .
set +e
"$env/bin/python" -m pytest "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests: failing" >&2
  exit 1
fi
exit "$status"
