#!/usr/bin/env bash
# Runs every cargo-fuzz target of fuzz/ for a bounded time and fails on a crash.
#
#   scripts/fuzz-ci.sh              # each target (conf, ops) for 60 s
#   FUZZ_SECS=600 scripts/fuzz-ci.sh ops
#
# Installs cargo-fuzz when it is missing (crates.io). Uses the stable toolchain with
# RUSTC_BOOTSTRAP=1 (cargo-fuzz needs -Z flags). The committed seeds in fuzz/corpus/<target>
# are read, never written: new inputs go to a scratch corpus under $FUZZ_WORK (default: a
# fresh temporary folder), and a crashing input to $FUZZ_WORK/artifacts/<target>/, whose
# path and bytes (hex) are printed. A longer run and how to keep its corpus:
# docs/reliability.md.
set -euo pipefail
cd "$(dirname "$0")/.."

secs="${FUZZ_SECS:-60}"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(conf ops)
fi

export RUSTC_BOOTSTRAP=1
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz-ci: installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi

work="${FUZZ_WORK:-$(mktemp -d -t hugealloc-fuzz.XXXXXX)}"
mkdir -p "$work"
echo "fuzz-ci: ${secs} s per target, scratch in $work"

# Build every target first (a build error is a failure, not a crash).
for t in "${targets[@]}"; do
  cargo fuzz build --fuzz-dir fuzz "$t"
done

status=0
for t in "${targets[@]}"; do
  corpus="$work/corpus/$t"
  artifacts="$work/artifacts/$t/"
  mkdir -p "$corpus" "$artifacts"
  log="$work/$t.log"
  echo "fuzz-ci: running $t"
  set +e
  cargo fuzz run --fuzz-dir fuzz "$t" "$corpus" "fuzz/corpus/$t" -- \
    -max_total_time="$secs" -artifact_prefix="$artifacts" -print_final_stats=1 \
    >"$log" 2>&1
  rc=$?
  set -e
  # libFuzzer's closing figures: executions, speed, corpus size.
  grep -E '^stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb)' "$log" \
    | sed "s/^/fuzz-ci: $t /" || true
  grep -E '^#[0-9]+ +DONE' "$log" | tail -n 1 | sed "s/^/fuzz-ci: $t /" || true
  echo "fuzz-ci: $t corpus: $(find "$corpus" "fuzz/corpus/$t" -type f | wc -l) files"
  crashes=$(find "$artifacts" -type f | wc -l)
  if [ "$rc" -ne 0 ] || [ "$crashes" -ne 0 ]; then
    echo "fuzz-ci: $t FAILED (exit $rc); last lines of $log:"
    tail -n 60 "$log"
    for f in "$artifacts"*; do
      [ -f "$f" ] || continue
      echo "fuzz-ci: crashing input $f:"
      od -An -tx1 -v "$f" | head -n 40
      echo "fuzz-ci: reproduce with: RUSTC_BOOTSTRAP=1 cargo fuzz run --fuzz-dir fuzz $t $f"
    done
    status=1
  else
    echo "fuzz-ci: $t ok"
  fi
done
exit "$status"
