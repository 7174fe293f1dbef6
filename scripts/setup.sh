#!/usr/bin/env bash
# Installs what hugetune needs on a fresh Debian machine; safe to run again.
# Debian packages: gcc/make/libc6-dev (the C parts; libgomp comes with gcc),
# valgrind (the reference source every machine has), python3 (workload self-check),
# procps (pgrep, in the tests).
set -euo pipefail

missing=()
for p in gcc make libc6-dev valgrind python3 procps; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${missing[@]}"
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
for c in rustfmt clippy; do
  rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c"
done
