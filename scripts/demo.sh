#!/usr/bin/env bash
# Install the pinned environment for $PYTHON (once), then `trnconsole demo`: a tiny BERT run on the CPU,
# followed live.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
env=$(bash "$repo/scripts/env.sh")
exec "$env/bin/trnconsole" demo "$@"
