#!/usr/bin/env bash
# Issue 14's measure (docs/hugetlb.md, "Figures"): the fresh-buffer (bigbuf), element-wise and
# random-read (scipp) workloads of docs/thp.md at each size, and a TLB-bound random read
# (scipp's pointer chase over TLB_MIB), under hugealloc hugetlb:2M, hugetlb:1G and its default
# (THP), glibc with glibc.malloc.hugetlb=2, mimalloc with MIMALLOC_RESERVE_HUGE_OS_PAGES=1 and
# jemalloc thp:always. Appends every `result:` line, prefixed with its configuration and
# workload, to OUT (summarise with allocator-bench/scripts/summarise.py OUT), and the
# `/usr/bin/time` line (wall s, minor faults) of each run.
#
# Needs root: it sizes the hugetlb pools for each configuration (the 2M pool for hugetlb:2M
# and glibc, the 1G pool for hugetlb:1G and mimalloc, both empty otherwise, so that no run
# profits from another's pool) and puts both pools back as they were when it ends, failed or
# not. Run it on a quiet machine, under the shared lock where there is one:
#   flock /work/notes/bench.lock scripts/bench-hugetlb.sh /tmp/h.txt
# On a VM guest with free-page reporting (virtio_balloon), first-touch figures include the
# host's faults: see docs/hugetlb.md, "Figures", for how run 2 there turned it off.
# A small run, to check that it works (seconds):
#   SIZES="64" TLB_MIB=256 CHASE_STEPS=200000 BIGBUF_ITERS=2 scripts/bench-hugetlb.sh /tmp/h.txt
#
# environment: SIZES ("512 2048", MiB), TLB_MIB (8192), CHASE_STEPS (10000000),
#   BIGBUF_ITERS (10), REPEAT (1), CARGO_TARGET_DIR (/tmp/target-bench)
set -euo pipefail
out=${1:?usage: bench-hugetlb.sh OUT}
sizes=${SIZES:-512 2048}
tlb_mib=${TLB_MIB:-8192}
chase_steps=${CHASE_STEPS:-10000000}
bigbuf_iters=${BIGBUF_ITERS:-10}
repeat=${REPEAT:-1}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/tmp/target-bench}
here=$(cd "$(dirname "$0")/.." && pwd)
bin=$CARGO_TARGET_DIR/workload-bins
mkdir -p "$bin"

pool2m=/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages
pool1g=/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages
[ "$(id -u)" = 0 ] || { echo "bench-hugetlb.sh: needs root to size the hugetlb pools" >&2; exit 1; }
old2m=$(cat "$pool2m")
old1g=$(cat "$pool1g" 2>/dev/null || echo 0)
restore() {
    echo "$old2m" > "$pool2m"
    [ -e "$pool1g" ] && echo "$old1g" > "$pool1g"
    echo "pools restored: 2M $(cat "$pool2m"), 1G $(cat "$pool1g" 2>/dev/null || echo -)" >&2
}
trap restore EXIT

# pools PAGES_2M PAGES_1G: sets both pools (the kernel may find fewer; the runs say so).
pools() {
    # 1 GiB pages need 1 GiB of contiguous free memory: give the kernel its best chance (the
    # page cache dropped, memory compacted) before each request.
    sync
    echo 3 > /proc/sys/vm/drop_caches
    echo 1 > /proc/sys/vm/compact_memory
    echo "$1" > "$pool2m"
    [ -e "$pool1g" ] && echo "$2" > "$pool1g"
    echo "pools: 2M $(cat "$pool2m") of $1, 1G $(cat "$pool1g" 2>/dev/null || echo -) of $2" >&2
}

for a in hugealloc system jemalloc mimalloc; do
    features=()
    [ "$a" != hugealloc ] && features=(--features "$a")
    cargo build --release --manifest-path "$here/allocator-bench/Cargo.toml" "${features[@]}" >&2
    cp "$CARGO_TARGET_DIR/release/hugealloc-bench" "$bin/$a"
done

run() { # NAME LABEL CMD...
    local name=$1 w=$2
    shift 2
    /usr/bin/time -f "time: %e s, %R minor faults" "$@" > "$out.last" 2>&1 \
        || { echo "FAILED: $name $*" >&2; cat "$out.last" >&2; return 1; }
    grep -E '^(result:|time:)' "$out.last" | sed "s/^/config=$name workload=$w /" >> "$out"
}

# one LABEL WORKLOAD NEED_MIB ARGS...: the six configurations, with pools of NEED_MIB (the
# most the workload holds live: bigbuf one buffer, scipp about six of its size, the chase its
# buffer) rounded up to pages, plus slack for small objects.
one() {
    local label=$1 w=$2 need=$3
    shift 3
    local p2=$(( need / 2 + 64 )) p1=$(( (need + 1023) / 1024 + 1 ))
    pools 0 0
    run hugealloc "$label" "$bin/hugealloc" "$w" "$@"
    run jemalloc-thp-always "$label" env _RJEM_MALLOC_CONF=thp:always "$bin/jemalloc" "$w" "$@"
    pools "$p2" 0
    run hugealloc-hugetlb-2M "$label" env HUGEALLOC_CONF=hugetlb:2M "$bin/hugealloc" "$w" "$@"
    run glibc-hugetlb-2 "$label" env GLIBC_TUNABLES=glibc.malloc.hugetlb=2 "$bin/system" "$w" "$@"
    pools 0 "$p1"
    run hugealloc-hugetlb-1G "$label" env HUGEALLOC_CONF=hugetlb:1G "$bin/hugealloc" "$w" "$@"
    run mimalloc-reserve-1G "$label" env MIMALLOC_RESERVE_HUGE_OS_PAGES=1 "$bin/mimalloc" "$w" "$@"
}

for r in $(seq "$repeat"); do
    for mib in $sizes; do
        echo "repeat $r: $mib MiB" >&2
        one "bigbuf-$mib" bigbuf $((2 * mib)) "$bigbuf_iters" --mib "$mib"
        one "scipp-$mib" scipp $((6 * mib)) "$mib" --chase-steps "$chase_steps"
    done
    echo "repeat $r: TLB-bound chase over $tlb_mib MiB" >&2
    one "chase-$tlb_mib" scipp $((tlb_mib + 6 * 64)) 64 --rounds 1 --reps 1 --chase-mib "$tlb_mib" --chase-steps "$chase_steps"
done
rm -f "$out.last"
