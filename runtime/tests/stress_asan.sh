#!/bin/sh
# The runtime library built with ASan+UBSan under a multithreaded
# malloc/free/realloc stress in apply mode (t_threads built with ASan too,
# waves of fresh threads), for SECS seconds split over the plans below; the
# soak of issue 22 runs it for 30 minutes (make -C runtime stress-asan SECS=1800).
#
#   stress_asan.sh ASAN_BUILD_DIR SECS [POOL]     (THREADS=N: threads per wave, default 4;
#                                                  NOLOCK=1: no lock, no pool pages)
#
# POOL (root): 2 MB pages to add to the pool for the run (restored at the end),
# so the hugetlb plans really get hugetlb pages; without it they get what is
# free, normally nothing.
#
# Plans: heap-small in the library's arena and heap-large owned, on hugetlb-2m
# (whatever free pool pages exist; without a pool every hugetlb attempt falls
# back, which is a path to stress too), on
# thp-2m, with the round-up layout, on thp-64k (mTHP: 64 KB folios where
# its control allows, else the mthp-disabled fallback to 4 KB pages), and with
# failures injected every 3rd attempt. A run fails on any sanitizer report, a content error in t_threads,
# a non-zero exit, or an error in the library's summary.
set -eu
dir=$1
secs=${2:-20}
# It changes no kernel state, but it uses free pool pages: under the shared
# kernel-state lock, so it never takes pages a hugetune process sized a pool for.
# NOLOCK=1: beside tests that hold pools, take no lock and no pool page at all
# (every hugetlb attempt is an injected failure, so those paths still run).
if [ "${NOLOCK:-0}" = 1 ]; then
    :
elif [ -w /run/lock ] || [ -w /run/lock/hugetune-kernel-state.lock ]; then
    exec 9>>/run/lock/hugetune-kernel-state.lock
    flock 9
fi
tmp=$(mktemp -d /tmp/hugetune-stress-asan.XXXXXX)
pool=${3:-0}
h=/sys/kernel/mm/hugepages/hugepages-2048kB
old_nr=$(cat /proc/sys/vm/nr_hugepages) # the persistent pool, what is put back
trap 'rm -rf "$tmp"; [ "$pool" -gt 0 ] && echo "$old_nr" >/proc/sys/vm/nr_hugepages' EXIT
trap 'exit 130' INT TERM
if [ "$pool" -gt 0 ]; then
    [ "$(id -u)" = 0 ] || { echo "stress_asan.sh: POOL needs root" >&2; exit 2; }
    # Pages in use or reserved by others (or leaked) stay theirs: POOL on top.
    nr=$(cat $h/nr_hugepages) free=$(cat $h/free_hugepages) resv=$(cat $h/resv_hugepages)
    taken=$((nr - free + (resv < free ? resv : free)))
    echo $((taken + pool)) >$h/nr_hugepages
    echo "pool: $(($(cat $h/free_hugepages) - $(cat $h/resv_hugepages))) free 2 MB pages for the run"
fi
i=0
while read -r name plan; do
    i=$((i + 1))
    printf 'hugetune-plan 1\nthreshold 131072\n%b' "$plan" >"$tmp/plan.$i"
done <<'PLANS'
hugetlb heap-small arena hugetlb-2m\nheap-large hugetlb-2m\n
thp heap-small arena thp-2m\nheap-large thp-2m\n
round-up layout round-up\nheap-small arena thp-2m\nheap-large hugetlb-2m\n
mthp heap-small arena thp-64k\nheap-large thp-64k\n
PLANS
nplans=$i
per=$(( (secs + nplans) / (nplans + 1) ))
[ "$per" -ge 1 ] || per=1
fail=0
run() { # name plan-number extra-env...
    name=$1 n=$2
    shift 2
    rm -f "$tmp"/sum.*
    st=0
    env "$@" HUGETUNE_MODE=apply HUGETUNE_PLAN="$tmp/plan.$n" HUGETUNE_SUMMARY="$tmp/sum.%p.json" \
        ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0:abort_on_error=0:halt_on_error=1 \
        UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        LD_PRELOAD="$dir/libhugetune.so" "$dir/tests/t_threads" threads="${THREADS:-4}" ops=50000 seed=$n secs="$per" \
        >"$tmp/out" 2>"$tmp/err" || st=$?
    if [ "$st" != 0 ]; then
        echo "FAIL $name: exit status $st"; cat "$tmp/err"; fail=1; return
    fi
    if grep -q "ERROR: AddressSanitizer\|runtime error:" "$tmp/err"; then
        echo "FAIL $name: sanitizer report"; cat "$tmp/err"; fail=1; return
    fi
    if ! grep -q '"errors":\[\]' "$tmp"/sum.*.json; then
        echo "FAIL $name: the library's summary has errors"; cat "$tmp"/sum.*.json; fail=1; return
    fi
    echo "ok $name (${per} s): $(cat "$tmp/out"); hugetlb-2m/thp-2m bytes backed: $(grep -o '"backed":{"hugetlb-1g":{[^}]*},"hugetlb-2m":{"bytes":[0-9]*' "$tmp"/sum.*.json | grep -o '[0-9]*$' | head -1)/$(grep -o '"thp-2m":{"bytes":[0-9]*' "$tmp"/sum.*.json | grep -o '[0-9]*$' | head -1); arena committed at the end: $(grep -o '"committed_bytes":[0-9]*' "$tmp"/sum.*.json | grep -o '[0-9]*$' | head -1) bytes"
}
if [ "${NOLOCK:-0}" = 1 ]; then
    run hugetlb 1 HUGETUNE_INJECT=hugetlb:1
    run thp 2 HUGETUNE_INJECT=hugetlb:1
    run round-up 3 HUGETUNE_INJECT=hugetlb:1
    run mthp 4 HUGETUNE_INJECT=hugetlb:1
    run injected 1 HUGETUNE_INJECT=hugetlb:1,thp:3,mmap:3
else
    run hugetlb 1
    run thp 2
    run round-up 3
    run mthp 4
    run injected 1 HUGETUNE_INJECT=hugetlb:3,thp:3,mmap:3
fi
exit $fail
