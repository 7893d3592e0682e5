#!/usr/bin/env bash
# Install the pinned environment for $PYTHON (once) and run the whole test suite: ruff lint + format check,
# then pytest. Arguments go to pytest: `-m smoke` is the short set, `-m 'not slow'` the quick one.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
env=$(bash "$repo/scripts/env.sh")
# The browser test drives Debian's Chromium: install it once where we may; elsewhere that test skips, saying why.
if [ ! -x /usr/bin/chromium ] && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  echo "Installing Debian's chromium for the browser test (first time only)..." >&2
  if ! (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium) \
      >/dev/null 2>&1; then
    echo "could not install chromium: the browser test will be skipped" >&2
  fi
fi
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
