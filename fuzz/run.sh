#!/usr/bin/env bash
# Runs every fuzz target (or those named) for SECONDS each, JOBS at a time, each from a
# corpus of its own seeded from fuzz/seeds/<target>; crashes land in
# fuzz/artifacts/<target>, minimise them with `cargo +nightly fuzz tmin`, and commit them
# to fuzz/regressions/<target> with the fix and its test.
#
#   fuzz/run.sh [SECONDS] [JOBS] [TARGET...]      (defaults: 1800 s, 2 at a time, all)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
seconds=${1:-1800}
jobs=${2:-2}
shift $(( $# > 2 ? 2 : $# ))
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(config_json safetensors tokenizer_json sentencepiece_model sentence_files cli_input image train_config)
fi
cargo +nightly fuzz build --sanitizer none
mkdir -p logs
run_one() {
    local target=$1
    mkdir -p "corpus/$target"
    cp -n "seeds/$target/"* "corpus/$target/" 2>/dev/null || true
    # 2 GiB of memory and 30 s per input (several targets share the cores): past either is a finding.
    cargo +nightly fuzz run --sanitizer none "$target" "corpus/$target" -- \
        -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=30 -print_final_stats=1 \
        > "logs/$target.log" 2>&1 || echo "fuzz/run.sh: $target stopped on a finding (logs/$target.log)"
    grep -E "stat::number_of_executed_units|stat::peak_rss_mb|Done [0-9]+ runs" "logs/$target.log" | sed "s/^/$target: /" || true
}
for target in "${targets[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do sleep 5; done
    run_one "$target" &
done
wait
