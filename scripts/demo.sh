#!/usr/bin/env bash
# Install the pinned environment (once) and train a tiny BERT on the CPU, printing its progress.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
env=$(bash "$repo/scripts/env.sh")
out=${1:-$repo/runs/demo-bert}
"$env/bin/python" "$repo/runners/bert.py" --synthetic --model-size tiny --device cpu \
  --steps 60 --log-every 10 --eval-every 30 --output-dir "$out"
echo "metrics: $out/metrics.jsonl  summary: $out/result.json  TensorBoard: $out/tb"
