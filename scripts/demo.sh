#!/usr/bin/env bash
# The main job: set up on a fresh machine, then profile the bundled MindSpore LeNet training end to
# end through `msprof-agent run` (the script is unmodified), print the summary, say where it all is.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup_env.sh"
OUT="${1:-$ROOT/demo_output}"
rm -rf "$OUT"
export GLOG_v=3  # MindSpore: errors only
echo "== profiling examples/mindspore_lenet.py (Model.train, 2 epochs x 20 steps, 20 ms data sleep per batch)"
msprof-agent run --output-path "$OUT" -o data_process=true -o cpu_sampling_interval=200 -- \
  python "$ROOT/examples/mindspore_lenet.py" --epochs 2 --steps 20 --data-sleep-ms 20 --quiet
echo
echo "== analysed output in $OUT/profiler:"
ls "$OUT/profiler" | grep -v '^raw$' | sed 's/^/   /'
echo
echo "Open the report: $OUT/profiler/report_0.html"
echo "Timeline for Perfetto: $OUT/profiler/cpu_timeline_display_0.json"
echo "Browse it:       msprof-agent view --summary-base-dir $OUT   (then http://127.0.0.1:8080)"
