#!/bin/sh
# smoke.sh BUILD_DIR - run the test programs under LD_PRELOAD=libhugetune.so in
# every mode. Needs no privileges and no hugetlb pool: apply mode is checked
# for "owned" (whatever backing the fallback chain reached), not for a
# specific page size. Pool-dependent checks belong to the integration tests,
# except one: as root, the program's hugetlb-backed mappings cut while other
# threads write them (t_mapped threads=1) get 16 pool pages made for them under
# the shared kernel-state lock, given back at once (also on exit).
set -u
B=${1:?usage: smoke.sh BUILD_DIR}
L=$B/libhugetune.so
T=$B/tests
W=$(mktemp -d "${TMPDIR:-/tmp}/hugetune-smoke.XXXXXX")
POOL_OLD=
trap 'rm -rf "$W"; [ -z "$POOL_OLD" ] || echo "$POOL_OLD" >/proc/sys/vm/nr_hugepages' EXIT
fails=0

pass() { echo "  ok   $1"; }
fail() { echo "  FAIL $1"; fails=$((fails + 1)); }
# expect NAME CMD...: command must exit 0
expect() {
    name=$1
    shift
    if "$@" >"$W/out" 2>"$W/err"; then pass "$name"; else
        fail "$name (rc=$?)"
        sed 's/^/       /' "$W/err" | head -20
    fi
}
has() { # has NAME FILE PATTERN
    if grep -q -- "$3" "$2" 2>/dev/null; then pass "$1"; else fail "$1: no '$3' in $2"; fi
}
hasnt() {
    if grep -q -- "$3" "$2" 2>/dev/null; then fail "$1: unexpected '$3' in $2"; else pass "$1"; fi
}
logcheck() { # logcheck NAME GLOB
    for f in $2; do
        if "$T/htdump" --check -q "$f" >"$W/dump" 2>&1; then pass "$1 ($(tail -2 "$W/dump" | head -1 | cut -c1-60)...)"; else
            fail "$1: $f"
            tail -5 "$W/dump" | sed 's/^/       /'
        fi
    done
}

echo "== inert"
expect "t_known inert" env LD_PRELOAD="$L" "$T/t_known"
expect "t_exec inert" env LD_PRELOAD="$L" "$T/t_exec"
expect "t_early inert" env LD_PRELOAD="$L" "$T/t_early"
expect "t_threads inert" env LD_PRELOAD="$L" "$T/t_threads" 2 20000
expect "t_apply inert (glibc)" env LD_PRELOAD="$L" "$T/t_apply" expect=glibc
expect "no summary when inert" env LD_PRELOAD="$L" HUGETUNE_SUMMARY="$W/inert.json" "$T/t_known"
[ -e "$W/inert.json" ] && fail "inert wrote a summary" || pass "inert wrote nothing"

echo "== record"
R="env LD_PRELOAD=$L HUGETUNE_MODE=record"
expect "t_known record" $R HUGETUNE_LOG="$W/k.%p.log" HUGETUNE_SUMMARY="$W/k.%p.json" "$T/t_known"
logcheck "t_known log" "$W/k.*.log"
has "t_known summary mode" "$(ls "$W"/k.*.json)" '"mode":"record"'
has "t_known summary records" "$(ls "$W"/k.*.json)" '"records":'
has "t_known summary errors empty" "$(ls "$W"/k.*.json)" '"errors":\[\]'
expect "t_known record+markers" $R HUGETUNE_MARKERS=1 HUGETUNE_LOG="$W/m.%p.log" "$T/t_known"
logcheck "markers log" "$W/m.*.log"
expect "t_threads record" $R HUGETUNE_LOG="$W/t.%p.log" "$T/t_threads" 4 20000
logcheck "t_threads log" "$W/t.*.log"
expect "t_signal record" $R HUGETUNE_LOG="$W/s.%p.log" "$T/t_signal" ops=300000
logcheck "t_signal log" "$W/s.*.log"
expect "t_fork record" $R HUGETUNE_LOG="$W/f.%p.log" HUGETUNE_SUMMARY="$W/f.%p.json" "$T/t_fork" children=2
n=$(ls "$W"/f.*.log | wc -l)
[ "$n" -eq 3 ] && pass "t_fork: one log per process" || fail "t_fork: $n logs, want 3"
logcheck "t_fork logs" "$W/f.*.log"
n=$(ls "$W"/f.*.json | wc -l)
[ "$n" -eq 3 ] && pass "t_fork: one summary per process" || fail "t_fork: $n summaries, want 3"
n=$("$T/htdump" "$W/f.$(sed 's/.*"pid":\([0-9]*\).*/\1/' "$W/out").log" | grep -c ' FORK ')
[ "$n" -eq 2 ] && pass "t_fork: the parent's log names its 2 children" || fail "t_fork: $n FORK events, want 2"
expect "t_exec record" $R HUGETUNE_LOG="$W/e.%p.log" HUGETUNE_SUMMARY="$W/e.%p.json" "$T/t_exec"
n=$(ls "$W"/e.*.log | wc -l)
[ "$n" -eq 5 ] && pass "t_exec: one log per process and image" || fail "t_exec: $n logs, want 5"
logcheck "t_exec logs" "$W/e.*.log"
n=$(ls "$W"/e.*.x1.log | wc -l)
[ "$n" -eq 2 ] && pass "t_exec: exec'd images write .x1 logs" || fail "t_exec: $n .x1 logs, want 2"
expect "t_early record (pre-init calls, signals)" $R HUGETUNE_LOG="$W/pre.%p.log" "$T/t_early"
logcheck "t_early log" "$W/pre.*.log"
n=$("$T/htdump" $W/pre.*.log | grep -c ' PREINIT ')
[ "$n" -gt 200 ] && pass "t_early: $n pre-init calls recorded" || fail "t_early: $n pre-init calls"
expect "t_known record, CLOCK_MONOTONIC times" $R HUGETUNE_CLOCK=monotonic HUGETUNE_LOG="$W/mono.%p.log" "$T/t_known"
logcheck "monotonic log" "$W/mono.*.log"
has "monotonic log clock" "$("$T/htdump" "$(ls "$W"/mono.*.log)" >"$W/mono.txt"; echo "$W/mono.txt")" 'clock monotonic'
expect "record without log" $R HUGETUNE_SUMMARY="$W/nolog.json" "$T/t_known"
has "summary without log" "$W/nolog.json" '"heap-large":{"allocations":1,'

echo "== apply"
A="env LD_PRELOAD=$L HUGETUNE_MODE=apply"
printf 'hugetune-plan 1\nheap-large hugetlb-2m\n' >"$W/p-h.txt"
printf 'hugetune-plan 1\nheap-large thp-2m\n' >"$W/p-t.txt"
printf 'hugetune-plan 1\nthreshold 131072\nheap-large 4k\n' >"$W/p-4.txt"
printf 'hugetune-plan 1\nheap-large hugetlb-2m\nnonsense here\n' >"$W/p-bad.txt"
for p in h t 4; do
    expect "t_apply plan $p" $A HUGETUNE_PLAN="$W/p-$p.txt" HUGETUNE_SUMMARY="$W/a-$p.json" "$T/t_apply" expect=owned
    has "t_apply plan $p summary" "$W/a-$p.json" '"heap-large":{"allocations":4,'
    hasnt "t_apply plan $p no errors" "$W/a-$p.json" '"errors":\["'
    expect "t_threads plan $p" $A HUGETUNE_PLAN="$W/p-$p.txt" "$T/t_threads" 4 20000
done
expect "t_apply 4k backing" $A HUGETUNE_PLAN="$W/p-4.txt" "$T/t_apply" expect=4k
expect "t_apply bad plan = glibc" $A HUGETUNE_PLAN="$W/p-bad.txt" HUGETUNE_SUMMARY="$W/a-bad.json" "$T/t_apply" expect=glibc
has "bad plan reported" "$W/a-bad.json" 'plan line 3: unknown directive'
expect "t_apply no plan = glibc" $A HUGETUNE_SUMMARY="$W/a-none.json" "$T/t_apply" expect=glibc
has "missing plan reported" "$W/a-none.json" 'HUGETUNE_PLAN not set'
off=$("$T/t_site" | sed 's/.*"a_caller_off":"\([^"]*\)".*/\1/')
printf 'hugetune-plan 1\nsite %s %s 4k\n' "$T/t_site" "$off" >"$W/p-site.txt"
expect "t_site site a owned, b glibc" $A HUGETUNE_PLAN="$W/p-site.txt" HUGETUNE_SUMMARY="$W/a-site.json" "$T/t_site" a=4k b=glibc
has "site counted" "$W/a-site.json" '"sites":{"allocations":1,'
expect "t_fork apply" $A HUGETUNE_PLAN="$W/p-t.txt" HUGETUNE_SUMMARY="$W/af.json" "$T/t_fork" children=2
has "t_fork apply forks" "$W/af.json" '"forks":2'
printf 'hugetune-plan 1\nstatic thp-2m\nheap-small thp-2m\n' >"$W/p-st.txt"
expect "t_static apply" $A HUGETUNE_PLAN="$W/p-st.txt" HUGETUNE_SUMMARY="$W/ast.json" GLIBC_TUNABLES=glibc.malloc.hugetlb=1 "$T/t_static"
has "static requested" "$W/ast.json" '"static":{"requested_bytes":4'
lib=$(sed 's/.*"lib_path":"\([^"]*\)".*/\1/' "$W/out")
printf 'hugetune-plan 1\nstatic thp-2m %s\n' "$lib" >"$W/p-stl.txt"
expect "t_static library" $A HUGETUNE_PLAN="$W/p-stl.txt" HUGETUNE_SUMMARY="$W/astl.json" "$T/t_static"
has "static library requested" "$W/astl.json" '"static":{"requested_bytes":2'

echo "== apply: arena, fork, injection, foreign allocator"
printf 'hugetune-plan 1\nheap-large thp-2m\nheap-small arena thp-2m\n' >"$W/p-ar.txt"
expect "t_arena" $A HUGETUNE_PLAN="$W/p-ar.txt" HUGETUNE_SUMMARY="$W/aar.json" "$T/t_arena" threads=4
has "arena used" "$W/aar.json" '"arena":{"enabled":true'
expect "t_threads arena" $A HUGETUNE_PLAN="$W/p-ar.txt" "$T/t_threads" 4 20000
expect "t_forkhuge (no pool: owned on THP/4k)" $A HUGETUNE_PLAN="$W/p-h.txt" "$T/t_forkhuge" children=2 writer=1
# hugetlb:1 too: where the machine has a free 2 MB pool, whole-page blocks
# map hugetlb directly and never reach the injected owned-memory mmap.
expect "t_apply hugetlb:1,mmap:1 injected -> allocator" $A HUGETUNE_PLAN="$W/p-h.txt" HUGETUNE_SUMMARY="$W/ai.json" HUGETUNE_INJECT=hugetlb:1,mmap:1 "$T/t_apply" expect=glibc
has "injection reported" "$W/ai.json" '"reason":"injected"'
expect "t_apply thp:1 injected -> 4k" $A HUGETUNE_PLAN="$W/p-t.txt" HUGETUNE_SUMMARY="$W/ai2.json" HUGETUNE_INJECT=thp:1 "$T/t_apply" expect=4k
has "thp injection reported" "$W/ai2.json" '"from":"thp-2m","to":"4k","reason":"injected"'
expect "bad injection spec" $A HUGETUNE_PLAN="$W/p-t.txt" HUGETUNE_SUMMARY="$W/ai3.json" HUGETUNE_INJECT=gpu:1 "$T/t_apply" expect=owned
has "bad spec reported" "$W/ai3.json" 'bad HUGETUNE_INJECT'
# The program's own mappings (mapped.c): whatever the pool gives (hugetlb, or
# THP after ENOMEM), every munmap/mremap/MAP_FIXED/mprotect/madvise and a fork
# behave as on plain memory.
expect "t_mapped inert" env LD_PRELOAD="$L" "$T/t_mapped" expect=any fork=1
expect "t_mapped hugetlb plan" $A HUGETUNE_PLAN="$W/p-h.txt" HUGETUNE_SUMMARY="$W/am.json" "$T/t_mapped" expect=owned fork=1
has "t_mapped backed" "$W/am.json" '"mapped":{"mappings":7,'
expect "t_mapped thp plan" $A HUGETUNE_PLAN="$W/p-t.txt" "$T/t_mapped" expect=thp-2m fork=1
expect "t_mapped hugetlb:1 injected -> thp" $A HUGETUNE_PLAN="$W/p-h.txt" HUGETUNE_SUMMARY="$W/am2.json" HUGETUNE_INJECT=hugetlb:1 "$T/t_mapped" expect=thp-2m fork=1
has "t_mapped injection reported" "$W/am2.json" '"from":"hugetlb-2m","to":"thp-2m","reason":"injected"'
expect "t_mapped threads (no pool needed: content kept)" $A HUGETUNE_PLAN="$W/p-h.txt" "$T/t_mapped" expect=owned threads=1
avail2m() { echo $(($(awk '/HugePages_Free/{print $2}' /proc/meminfo) - $(awk '/HugePages_Rsvd/{print $2}' /proc/meminfo))); }
if [ "$(id -u)" = 0 ] && [ -w /proc/sys/vm/nr_hugepages ] && { exec 8>>/run/lock/hugetune-kernel-state.lock; } 2>/dev/null; then
    flock 8
    POOL_OLD=$(cat /proc/sys/vm/nr_hugepages)
    echo $(($(awk '/HugePages_Total/{print $2}' /proc/meminfo) + 16)) >/proc/sys/vm/nr_hugepages
    if [ "$(avail2m)" -ge 16 ]; then
        # Four cuts with two writer threads: each disown write-protected
        # (userfaultfd), no store or kernel write lost (t_mapped checks).
        expect "t_mapped threads hugetlb: cuts lose no write" $A HUGETUNE_PLAN="$W/p-h.txt" HUGETUNE_SUMMARY="$W/amt.json" "$T/t_mapped" expect=hugetlb-2m threads=1
        has "t_mapped threads: disowns protected" "$W/amt.json" '"disown_protected":4,"disown_unprotected":0'
        expect "t_mapped threads + fork" $A HUGETUNE_PLAN="$W/p-h.txt" "$T/t_mapped" expect=hugetlb-2m fork=1 threads=1
        expect "t_mapped uffd:1 injected -> thp" $A HUGETUNE_PLAN="$W/p-h.txt" HUGETUNE_SUMMARY="$W/amu.json" HUGETUNE_INJECT=uffd:1 "$T/t_mapped" expect=thp-2m threads=1
        has "t_mapped no-uffd reported" "$W/amu.json" '"from":"hugetlb-2m","to":"thp-2m","reason":"no-uffd"'
        printf 'hugetune-plan 1\nmapped thp\nheap-large hugetlb-2m\n' >"$W/p-mt.txt"
        expect "t_mapped plan 'mapped thp'" $A HUGETUNE_PLAN="$W/p-mt.txt" HUGETUNE_SUMMARY="$W/amp.json" "$T/t_mapped" expect=thp-2m
        has "t_mapped planned thp counted" "$W/amp.json" '"planned_thp":6,'
    else
        echo "  skip t_mapped threads hugetlb: the 2 MB pool did not grow ($(avail2m) pages free)"
    fi
    echo "$POOL_OLD" >/proc/sys/vm/nr_hugepages
    POOL_OLD=
    exec 8>&-
else
    echo "  skip t_mapped threads hugetlb: needs root to make pool pages"
fi
if [ -x "$T/t_jemalloc" ]; then
    expect "t_jemalloc inert" env LD_PRELOAD="$L" "$T/t_jemalloc"
    expect "t_jemalloc apply (owned blocks through jemalloc's API)" $A HUGETUNE_PLAN="$W/p-t.txt" "$T/t_jemalloc" expect=owned
fi

echo "== $fails failure(s)"
[ "$fails" -eq 0 ]
