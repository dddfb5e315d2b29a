#!/bin/sh
# Issue 17's measure: first-touch latency of a fresh buffer (p50/p99 per 2 MiB, total), its
# huge-page coverage right after the touch and WAIT_MS later, and random-read time, under
# hugealloc madvise/defer/never, jemalloc thp:always, glibc and mimalloc; on a quiet machine
# and while hugealloc-fragment holds most free memory in 4 KiB holes. One run per cell; also
# the rise of /proc/vmstat compact_stall per run (synchronous compaction on the touching
# thread). Run it under the bench lock:
#
#   flock /work/notes/bench.lock allocator-bench/scripts/first_touch.sh
#   MIB=64 FRAG_MIB=2048 flock /work/notes/bench.lock allocator-bench/scripts/first_touch.sh  # small
#
# MIB (buffer, default 512), WAIT_MS (default 1500), READS (default 5000000), FRAG_MIB (cap of
# the fragmenter; default: all of MemAvailable but FRAG_KEEP_MIB, default 256, while at least
# 4 GiB stays free in 4 KiB holes), MODES ("quiet frag"). Before each run it prints the free
# 2 MiB/4 MiB blocks of /proc/buddyinfo (near 0 when fragmented); after each, the rise of
# compact_stall and thp_fault_alloc.
set -eu
cd "$(dirname "$0")/../.."
: "${CARGO_TARGET_DIR:=target}"
MIB=${MIB:-512}
WAIT_MS=${WAIT_MS:-1500}
READS=${READS:-5000000}
MODES=${MODES:-"quiet frag"}
LIBDIR=/usr/lib/x86_64-linux-gnu
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"; if [ -n "${pid:-}" ]; then kill "$pid" 2>/dev/null || true; fi' EXIT

cargo build -q --release -p hugealloc-ffi -p hugealloc-bench --bin hugealloc-fragment
cc -O2 -o "$OUT/first_touch" allocator-bench/scripts/first_touch.c
HA="$CARGO_TARGET_DIR/release/libhugealloc.so"

stall() { awk '/^compact_stall /{print $2}' /proc/vmstat; }
thpf() { awk '/^thp_fault_alloc /{print $2}' /proc/vmstat; }
fallb() { awk '/^thp_fault_fallback /{print $2}' /proc/vmstat; }
buddy() { awk '$4 == "Normal" || $4 == "DMA32" {printf "%s:o9=%s,o10=%s ", $4, $14, $15}' /proc/buddyinfo; }

one() { # name, then env assignments
    name=$1; shift
    b=$(buddy)
    s0=$(stall); f0=$(thpf); fb0=$(fallb)
    line=$(env "$@" "$OUT/first_touch" "$MIB" "$WAIT_MS" "$READS")
    s1=$(stall); f1=$(thpf); fb1=$(fallb)
    printf '%-8s %-22s %s compact_stall=+%d thp_fault_alloc=+%d thp_fault_fallback=+%d before:%s\n' \
        "$mode" "$name" "$line" $((s1 - s0)) $((f1 - f0)) $((fb1 - fb0)) "$b"
}

for mode in $MODES; do
    pid=
    if [ "$mode" = frag ]; then
        "$CARGO_TARGET_DIR/release/hugealloc-fragment" ${FRAG_MIB:+--mib "$FRAG_MIB"} \
            --keep-mib "${FRAG_KEEP_MIB:-256}" >"$OUT/frag" &
        pid=$!
        until grep -q buddyinfo "$OUT/frag" 2>/dev/null; do
            kill -0 "$pid" || { echo "fragmenter died"; exit 1; }
            sleep 0.2
        done
        echo "# $(cat "$OUT/frag")"
    fi
    one "hugealloc thp:madvise" LD_PRELOAD="$HA" HUGEALLOC_CONF=thp:madvise
    one "hugealloc thp:defer" LD_PRELOAD="$HA" HUGEALLOC_CONF=thp:defer
    one "hugealloc thp:never" LD_PRELOAD="$HA" HUGEALLOC_CONF=thp:never
    one "jemalloc thp:always" LD_PRELOAD="$LIBDIR/libjemalloc.so.2" MALLOC_CONF=thp:always
    one "glibc" X=1
    one "mimalloc" LD_PRELOAD="$LIBDIR/libmimalloc.so.2"
    if [ -n "$pid" ]; then kill "$pid"; wait "$pid" 2>/dev/null || true; fi
done
