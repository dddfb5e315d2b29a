#!/usr/bin/env bash
# Every test hugealloc has, in one command (the README's test command; .ci/run calls it after
# installing the Debian packages the tests run):
#   1. the workspace's unit, integration, C-ABI and real-program tests (release);
#   2. the loom models of the concurrent structures (allocator-core/tests/loom.rs), built with
#      `--cfg loom` in a target folder of their own, preemptions bounded so they take minutes;
#   3. the stress, model, churn and misuse tests again under HUGEALLOC_CONF=check:full (redzones,
#      junk, invariant scans on every structure touched);
#   4. the model, threads and churn tests again in a debug build, where every structure's
#      `check()` scan runs (`diag::full_checks` is true under debug_assertions) with the thread
#      cache on, which `check:full` turns off; about 1.5 min on 2 cores once built
#      (producer_consumer is left out: over 2 min alone in a debug build);
#   5. a bounded run of every fuzz target (scripts/fuzz-ci.sh; FUZZ_SECS, default 60 s each).
# Before them, the lint gate: `cargo fmt --check` and `cargo clippy --workspace --all-targets
# -D warnings` (the issues' "done when"), about 1 min once built.
# HUGEALLOC_SKIP_FUZZ=1 skips step 5 (it installs cargo-fuzz on first use).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== lint: rustfmt and clippy"
if ! cargo clippy --version >/dev/null 2>&1 || ! cargo fmt --version >/dev/null 2>&1; then
  rustup component add clippy rustfmt
fi
cargo fmt --all --check
cargo clippy --workspace --all-targets -- -D warnings

echo "== cargo test --workspace --release"
cargo test --workspace --release

echo "== loom models"
RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}" \
  CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/loom" \
  cargo test -p hugealloc --release --test loom

echo "== check:full"
HUGEALLOC_CONF=check:full cargo test -p hugealloc --release \
  --test threads --test model --test global --test churn --test misuse --test producer_consumer

echo "== debug build: invariant scans with the thread cache on"
cargo test -p hugealloc --test model --test threads --test churn --test purge_threads

if [ "${HUGEALLOC_SKIP_FUZZ:-0}" != 1 ]; then
  echo "== fuzz targets"
  scripts/fuzz-ci.sh
fi
echo "== all tests passed"
