#!/usr/bin/env bash
# Build the local test image `orchestrate-mock:test` (no registry needed): a root filesystem
# holding the given `orchestrate` binary as /usr/local/bin/orchestrate, /bin/sh (the host's
# dash; the docker provider runs a task's commands with `/bin/sh -c`, as engine images allow),
# /bin/sleep, and exactly the shared libraries `ldd` lists for them (at the same paths, with
# the dynamic loader), imported with `docker import`.
#
# Idempotent: the image carries the sha256 of this script and the files it copies as the label orchestrate.binary-sha256;
# when the tagged image already has it, nothing is rebuilt.
#
# usage: scripts/build-mock-image.sh [path/to/orchestrate] [tag]
#   default binary: $CARGO_TARGET_DIR/debug/orchestrate or target/debug/orchestrate
#   default tag:    orchestrate-mock:test
# prints the image id on stdout.
set -euo pipefail

target_dir="${CARGO_TARGET_DIR:-$(dirname "$0")/../target}"
binary="${1:-$target_dir/debug/orchestrate}"
tag="${2:-orchestrate-mock:test}"
shell="$(readlink -f /bin/sh)"
sleep_bin="$(readlink -f /bin/sleep)"

[ -x "$binary" ] || { echo "error: no executable at $binary (run cargo build first)" >&2; exit 2; }
command -v docker >/dev/null || { echo "error: the docker CLI is not installed" >&2; exit 2; }

sum="$(cat "$0" "$binary" "$shell" "$sleep_bin" | sha256sum | cut -d' ' -f1)"
current="$(docker image inspect "$tag" \
  --format '{{ index .Config.Labels "orchestrate.binary-sha256" }}' 2>/dev/null || true)"
if [ "$current" = "$sum" ]; then
  docker image inspect "$tag" --format '{{ .Id }}'
  exit 0
fi
old="$(docker image inspect "$tag" --format '{{ .Id }}' 2>/dev/null || true)"

root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT

copy() { # copy a file to the same path under $root, following symlinks
  mkdir -p "$root$(dirname "$1")"
  cp -L "$1" "$root$1"
}

mkdir -p "$root/usr/local/bin" "$root/bin" "$root/tmp" "$root/etc"
chmod 1777 "$root/tmp"
cp "$binary" "$root/usr/local/bin/orchestrate"
cp "$shell" "$root/bin/sh"
cp "$sleep_bin" "$root/bin/sleep"
for exe in "$binary" "$shell" "$sleep_bin"; do
  # lines look like `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)` or `/lib64/ld-linux-x86-64.so.2 (0x...)`
  ldd "$exe" | awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^\//) print $i }' | while read -r lib; do
    copy "$lib"
  done
done
echo "root:x:0:0:root:/root:/bin/sh" > "$root/etc/passwd"
echo "root:x:0:" > "$root/etc/group"

tar -C "$root" -c . | docker import \
  --change "LABEL orchestrate.binary-sha256=$sum" \
  --change 'ENV PATH=/usr/local/bin:/bin' \
  --change 'ENTRYPOINT ["/usr/local/bin/orchestrate"]' \
  --change 'CMD ["mock-server", "--host", "0.0.0.0", "--port", "8000"]' \
  - "$tag" >/dev/null
new="$(docker image inspect "$tag" --format '{{ .Id }}')"
# the previous build, now untagged (kept when a container still uses it)
[ -z "$old" ] || docker image rm "$old" >/dev/null 2>&1 || true
echo "$new"
