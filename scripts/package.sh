#!/usr/bin/env bash
# Builds hugetune's Debian package and checks it. A release build (its build script
# builds the C parts), then the files cargo-deb takes besides the binary staged in
# target/package/ — the runtime library, workloads and QEMU plugin byte for byte, the
# man pages and shell completions generated from the CLI definition — then
# `cargo deb` (cargo-deb is installed with `cargo install cargo-deb --locked` when
# missing). The .deb must hold every file listed below (dpkg-deb -c), and its
# hugetune, unpacked, must use /usr/lib/hugetune/libhugetune.so as it is, extracting
# nothing into a cache. Prints the package's path last.
#   scripts/package.sh                     build, package, check
#   scripts/package.sh --stage BIN_DIR OUT only stage into OUT what the package takes
#                                          from BIN_DIR (a build's hugetune and its
#                                          artifacts); tests/package.rs runs this
set -euo pipefail
cd "$(dirname "$0")/.."

stage() {
  local bin=$1 out=$2
  rm -rf "$out"
  mkdir -p "$out/lib" "$out/man" "$out/completions"
  # hugetune uses a copy beside it only when it equals what it embeds: copy exactly.
  for f in libhugetune.so hugetune-work libhugetune-qemu.so; do
    cp "$bin/$f" "$out/lib/$f"
  done
  "$bin/hugetune" manpages "$out/man" 2>/dev/null
  "$bin/hugetune" completions bash >"$out/completions/hugetune.bash"
  "$bin/hugetune" completions zsh >"$out/completions/_hugetune"
  "$bin/hugetune" completions fish >"$out/completions/hugetune.fish"
}

if [ "${1:-}" = --stage ]; then
  [ $# -eq 3 ] || { echo "usage: $0 --stage BIN_DIR OUT_DIR" >&2; exit 2; }
  stage "$2" "$3"
  exit 0
fi

[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
command -v dpkg-deb >/dev/null || { echo "package: dpkg-deb not found (a Debian system builds the package)" >&2; exit 1; }
command -v cargo-deb >/dev/null || cargo install cargo-deb --locked

target=${CARGO_TARGET_DIR:-target}
cargo build --release --locked -p hugetune
stage "$target/release" target/package
# --strip: the release profile keeps debug info (80 MB); the staged files are not
# cargo-deb's build products, so it strips only hugetune itself. It warns that the
# staged paths are not built by Cargo, which is the point: that warning is dropped.
deb=$(cargo deb -p hugetune --no-build --locked --strip -o target/debian/ \
  2> >(grep -v "Only source paths starting with exactly 'target/release/'" >&2) | tail -n 1)
[ -f "$deb" ] || { echo "package: cargo deb made no package ($deb)" >&2; exit 1; }

# The package holds every file a user needs, each man page the binary writes too.
contents=$(dpkg-deb -c "$deb" | awk '{print $6}')
want=(./usr/bin/hugetune
  ./usr/lib/hugetune/libhugetune.so ./usr/lib/hugetune/hugetune-work ./usr/lib/hugetune/libhugetune-qemu.so
  ./usr/share/bash-completion/completions/hugetune ./usr/share/zsh/vendor-completions/_hugetune
  ./usr/share/fish/vendor_completions.d/hugetune.fish ./usr/share/doc/hugetune/README.md)
for m in target/package/man/*.1; do
  want+=("./usr/share/man/man1/$(basename "$m").gz")
done
missing=0
for p in "${want[@]}"; do
  grep -qxF "$p" <<<"$contents" || { echo "package: $deb lacks $p" >&2; missing=1; }
done
[ "$missing" -eq 0 ] || exit 1

# Unpacked, its hugetune uses the packaged library as it is: nothing goes into the
# cache of a user whose home is empty (a service install prints the library used).
x=$(mktemp -d)
trap 'rm -rf "$x"' EXIT
dpkg-deb -x "$deb" "$x/root"
mkdir -p "$x/home" "$x/svc/etc/systemd/system"
printf '[Service]\nExecStart=/bin/sleep 1000\n' >"$x/svc/etc/systemd/system/demo.service"
printf 'hugetune-plan 1\nheap-large thp-2m\n' >"$x/plan"
out=$(env -u HUGETUNE_RUNTIME_LIB -u HUGETUNE_WORK -u HUGETUNE_QEMU_PLUGIN -u XDG_CACHE_HOME \
  -u XDG_DATA_HOME HOME="$x/home" "$x/root/usr/bin/hugetune" --db "$x/h.db" \
  service install demo --dry-run --root "$x/svc" --plan "$x/plan")
lib=$(realpath "$x/root/usr/lib/hugetune/libhugetune.so")
grep -qF "copied from $lib)" <<<"$out" || {
  echo "package: the unpacked hugetune did not use $lib:" >&2
  echo "$out" >&2
  exit 1
}
if [ -n "$(ls -A "$x/home")" ]; then
  echo "package: the unpacked hugetune wrote into its home:" >&2
  find "$x/home" >&2
  exit 1
fi
echo "package: checked $(wc -l <<<"$contents") entries; the packaged library is used in place"
echo "$deb"
