#!/usr/bin/env bash
# Instructions per malloc+free pair (the fast path), counted by valgrind's callgrind, for
# glibc and for each allocator preloaded into `hugealloc-workloads pairs` (which calls the C
# library's malloc and free directly). Two runs per allocator, N1 and N2 pairs; the figure is
# (Ir(N2) - Ir(N1)) / (N2 - N1), so start-up and the first refills cancel out.
#
# With BATCH=K the blocks go K at a time (`pairs --batch K`: K allocated, then freed), so
# every block passes through the thread cache's refill and flush: the figure is instructions
# per block there (K=1000 is criterion's `batch`).
#
# usage: scripts/callgrind_fastpath.sh [BYTES...]        (default: 16 64 256 1024)
# environment: CARGO_TARGET_DIR (/work/target-bench); N1 (100000), N2 (300000); BATCH (1);
# VIA (c; rust counts hugealloc's GlobalAlloc, whatever is preloaded, so hugealloc only);
# ONLY (a space-separated list of allocators, default all); EXTRA ("name=/path/lib.so ...":
# more libraries to preload, e.g. a build from before a change)
set -euo pipefail
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/work/target-bench}
here=$(cd "$(dirname "$0")/../.." && pwd)
sizes=("$@")
[ ${#sizes[@]} -eq 0 ] && sizes=(16 64 256 1024)
n1=${N1:-100000}
n2=${N2:-300000}
batch=${BATCH:-1}
via=${VIA:-c}
(cd "$here" && cargo build --release -p hugealloc-ffi --lib >&2 &&
    cargo build --release -p hugealloc-bench --bin hugealloc-workloads >&2)
bin=$CARGO_TARGET_DIR/release/hugealloc-workloads
lib=/usr/lib/x86_64-linux-gnu
declare -A preload=(
    [glibc]=""
    [hugealloc]="$CARGO_TARGET_DIR/release/libhugealloc.so"
    [jemalloc]="$lib/libjemalloc.so.2"
    [mimalloc]="$(ls $lib/libmimalloc.so.2* 2>/dev/null | head -n1)"
    [tcmalloc]="$lib/libtcmalloc_minimal.so.4"
)
order=(glibc hugealloc jemalloc mimalloc tcmalloc)
for e in ${EXTRA:-}; do
    preload[${e%%=*}]=${e#*=}
    order+=("${e%%=*}")
done
[ -n "${ONLY:-}" ] && read -r -a order <<< "$ONLY"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ir() { # PRELOAD N BYTES -> total instructions
    env -u HUGEALLOC_CONF -u MALLOC_CONF LD_PRELOAD="$1" valgrind --tool=callgrind \
        --callgrind-out-file="$tmp/out" "$bin" pairs "$2" --bytes "$3" \
        --batch "$batch" --via "$via" > /dev/null 2>&1
    sed -n 's/^summary: //p' "$tmp/out"
}

printf '| bytes |'
for a in "${order[@]}"; do printf ' %s |' "$a"; done
printf '\n|---|'
for _ in "${order[@]}"; do printf -- '---|'; done
printf '\n'
for b in "${sizes[@]}"; do
    printf '| %s |' "$b"
    for a in "${order[@]}"; do
        p=${preload[$a]}
        if [ -n "$p" ] && [ ! -e "$p" ]; then printf ' missing |'; continue; fi
        i1=$(ir "$p" "$n1" "$b")
        i2=$(ir "$p" "$n2" "$b")
        awk -v a="$i1" -v b="$i2" -v n="$((n2 - n1))" 'BEGIN { printf " %.1f |", (b - a) / n }'
    done
    printf '\n'
done
