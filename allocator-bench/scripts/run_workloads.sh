#!/usr/bin/env bash
# Builds hugealloc-bench once per global allocator and runs the workloads under each
# configuration of docs/thp.md and docs/benchmarks.md, REPEAT times, interleaved (so drift on
# a shared machine hits every configuration alike). Appends every `result:` line, prefixed
# with its configuration, to OUT; summarise with scripts/summarise.py OUT.
#
# usage: scripts/run_workloads.sh OUT [WORKLOAD...]
#   WORKLOAD: workload bigbuf scipp frag (default: all four)
# environment: REPEAT (3), CARGO_TARGET_DIR (/tmp/target-bench), and the sizes:
#   WORKLOAD_ARGS ("1000000"), BIGBUF_ARGS ("10 --mib 512"), SCIPP_ARGS ("512"),
#   FRAG_ARGS ("256 --wait-ms 11000")
set -euo pipefail
out=${1:?usage: run_workloads.sh OUT [WORKLOAD...]}
shift
workloads=("$@")
[ ${#workloads[@]} -eq 0 ] && workloads=(workload bigbuf scipp frag)
repeat=${REPEAT:-3}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/tmp/target-bench}
here=$(cd "$(dirname "$0")/.." && pwd)
bin=$CARGO_TARGET_DIR/workload-bins
mkdir -p "$bin"

for a in hugealloc system jemalloc mimalloc; do
    features=()
    [ "$a" != hugealloc ] && features=(--features "$a")
    cargo build --release --manifest-path "$here/Cargo.toml" "${features[@]}" >&2
    cp "$CARGO_TARGET_DIR/release/hugealloc-bench" "$bin/$a"
done

# hugealloc's policy comes from HUGEALLOC_CONF; refuse to measure if it is not honoured.
# (Read the whole output: a reader that quits early would break the writer's pipe.)
policy=$(HUGEALLOC_CONF=thp:never "$bin/hugealloc" bigbuf 1 --mib 1 | sed -n 's/^hugealloc_thp_policy: //p')
if [ "${policy%% *}" != never ]; then
    echo "HUGEALLOC_CONF=thp:never is not honoured by this build" >&2
    exit 1
fi

run() { # NAME CMD...
    local name=$1
    shift
    "$@" > "$out.last" 2>&1 || { echo "FAILED: $name $*" >&2; cat "$out.last" >&2; return 1; }
    grep '^result:' "$out.last" | sed "s/^result:/config=$name/" >> "$out"
}

args_for() {
    case $1 in
    workload) echo "${WORKLOAD_ARGS:-1000000}" ;;
    bigbuf) echo "${BIGBUF_ARGS:-10 --mib 512}" ;;
    scipp) echo "${SCIPP_ARGS:-512}" ;;
    frag) echo "${FRAG_ARGS:-256 --wait-ms 11000}" ;;
    esac
}

# One discarded run per workload first: on a VM whose balloon takes freed guest memory back
# (free page reporting), the first process to touch memory after a pause pays the host's
# faults too; this keeps that off the measured runs.
for w in "${workloads[@]}"; do
    # shellcheck disable=SC2207
    args=($(args_for "$w"))
    "$bin/system" "$w" "${args[@]}" > /dev/null 2>&1 || true
done

for r in $(seq "$repeat"); do
    for w in "${workloads[@]}"; do
        # shellcheck disable=SC2207
        args=($(args_for "$w"))
        echo "repeat $r: $w ${args[*]}" >&2
        run hugealloc "$bin/hugealloc" "$w" "${args[@]}"
        run hugealloc-thp-always env HUGEALLOC_CONF=thp:always "$bin/hugealloc" "$w" "${args[@]}"
        run hugealloc-thp-never env HUGEALLOC_CONF=thp:never "$bin/hugealloc" "$w" "${args[@]}"
        run system "$bin/system" "$w" "${args[@]}"
        run jemalloc "$bin/jemalloc" "$w" "${args[@]}"
        run jemalloc-thp-always env _RJEM_MALLOC_CONF=thp:always "$bin/jemalloc" "$w" "${args[@]}"
        run mimalloc "$bin/mimalloc" "$w" "${args[@]}"
    done
done
rm -f "$out.last"
