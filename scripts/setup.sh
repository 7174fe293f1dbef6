#!/usr/bin/env bash
# Installs what hugetune needs on a fresh Debian machine; safe to run again.
# Debian packages: gcc/make/libc6-dev (the C parts; libgomp comes with gcc),
# valgrind (the reference source every machine has), python3 (workload self-check),
# procps (pgrep, in the tests), qemu-user (qemu-x86_64: the QEMU TCG plugin reference
# source, qemu-plugin/), linux-perf (the perf source: its detection and a live
# record/script pipeline with a software event run in the tests).
# The robustness tests (crates/hugetune/tests/robustness.rs, docs/testing.md) run
# real programs under the runtime library: python3 with its stdlib tests
# (libpython3.11-testsuite), sqlite3, redis-server (links jemalloc) with
# redis-tools (redis-cli, redis-benchmark, redis-check-rdb), gzip, coreutils
# (sort). The fuzzing of the runtime library's parsers (runtime/fuzz) needs clang
# (libFuzzer); afl++ is there for longer campaigns with AFL++.
# chromium-headless-shell (Chromium's headless-only build, lighter than the
# chromium browser package) loads `hugetune report --html` pages in the tests
# (crates/hugetune/tests/report.rs): DOM, console errors and a screenshot.
# `hugetune bench peers` puts hugetune next to the allocators and libraries
# people use for huge pages today: libjemalloc2 (MALLOC_CONF=thp:always),
# libmimalloc2.0 (large OS pages), libhugetlbfs0 + libhugetlbfs-bin (morecore,
# hugectl, hugeadm); a suite reports a missing one as missing.
# systemd brings systemd-analyze, which verifies the units `hugetune service install`
# writes (crates/hugetune/tests/service.rs); it starts nothing where it is not PID 1.
# postgresql: the store's tests and the fleet tests run against a throw-away
# cluster of their own (scripts/pg.sh), as well as SQLite.
# openmpi-bin + libopenmpi-dev (mpirun, mpicc): the launcher tests build a small
# MPI program and follow `mpirun -np 2` into its ranks
# (crates/hugetune/tests/launchers.rs, docs/launchers.md); util-linux (taskset)
# and coreutils (env, nice, timeout) are the other launchers they follow.
# golang-go: the tests of programs the runtime library cannot enter build a Go
# program, static and dynamically linked, and profile it under qemu
# (crates/hugetune/tests/static_programs.rs, docs/static-programs.md).
# python3-numpy (numpy's random gathers), golang-go (go) and
# openjdk-17-jdk-headless (javac, java): the real programs of
# crates/hugetune/tests/real_programs.rs and `hugetune bench programs`
# (workloads/programs/; a program whose tool is missing is skipped, saying so).
# openjdk-17-jdk-headless (java, javac): the JVM tests compile and optimize a Java
# random walk (crates/hugetune/tests/jvm.rs, docs/runtimes.md).
#
#   scripts/setup.sh            everything above (the test suite's set-up)
#   scripts/setup.sh --demo     only what `hugetune demo` needs (scripts/demo.sh):
#                               the C toolchain and qemu-user, its reference source
#   add --list to print the package list and change nothing
set -euo pipefail

demo=0
list=0
for a in "$@"; do
  case "$a" in
    --demo) demo=1 ;;
    --list) list=1 ;;
    *) echo "setup: unknown option $a (known: --demo, --list)" >&2; exit 2 ;;
  esac
done

if [ "$demo" = 1 ]; then
  packages=(gcc make libc6-dev qemu-user)
else
  packages=(gcc make libc6-dev valgrind python3 procps qemu-user linux-perf
    libpython3.11-testsuite sqlite3 redis-server redis-tools gzip coreutils clang afl++
    chromium-headless-shell libjemalloc2 libmimalloc2.0 libhugetlbfs0 libhugetlbfs-bin systemd
    postgresql openmpi-bin libopenmpi-dev util-linux python3-numpy golang-go
    openjdk-17-jdk-headless)
fi
if [ "$list" = 1 ]; then
  printf '%s\n' "${packages[@]}"
  exit 0
fi
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" 2>/dev/null | grep '^Status: install ok installed' >/dev/null || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${missing[@]}"
  # The redis-server package starts a service on port 6379 where systemd runs;
  # the tests start their own servers on free ports and need none.
  if [[ " ${missing[*]} " == *" redis-server "* ]] && [ -d /run/systemd/system ]; then
    $sudo systemctl stop redis-server >/dev/null 2>&1 || true
  fi
  # Likewise the postgresql package's own cluster: scripts/pg.sh starts its own.
  if [[ " ${missing[*]} " == *" postgresql "* ]] && [ -d /run/systemd/system ]; then
    $sudo systemctl stop postgresql >/dev/null 2>&1 || true
  fi
fi

# Rust comes from rustup on these machines; make sure cargo is on PATH.
if ! command -v cargo >/dev/null 2>&1 && [ -f "$HOME/.cargo/env" ]; then
  # shellcheck disable=SC1091
  . "$HOME/.cargo/env"
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo not found; install Rust (stable) with rustup" >&2
  exit 1
fi
# The linters are the test suite's, not the demo's.
if [ "$demo" = 0 ]; then
  for c in rustfmt clippy; do
    rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c"
  done
fi
