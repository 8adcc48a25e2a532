#!/usr/bin/env bash
# Incremental build times of this checkout: how long `cargo test --no-run` (every test target
# of the default members) takes after a one-line change to a client file, and separately to a
# mock server file. Each change follows a warm-up build, so only the rebuild is timed. The
# change is a comment line appended to the file; the files are restored on exit, whatever
# happens. Works on the single-crate layout (src/mock/) and the workspace one (crates/mock/).
#
# Usage: scripts/build-times.sh        (prints `client: S s` and `mock: S s`)
set -euo pipefail
cd "$(dirname "$0")/.."

first_existing() {
  for f in "$@"; do
    [ -f "$f" ] && { echo "$f"; return; }
  done
  echo "error: none of $* exists" >&2
  exit 2
}
client_file=$(first_existing src/client/sse.rs src/client/http.rs)
mock_file=$(first_existing crates/mock/src/routes.rs src/mock/routes.rs)

backup=$(mktemp -d)
cp -p "$client_file" "$backup/client.rs"
cp -p "$mock_file" "$backup/mock.rs"
restore() {
  cp "$backup/client.rs" "$client_file"
  cp "$backup/mock.rs" "$mock_file"
  rm -rf "$backup"
}
trap restore EXIT

build() {
  cargo test --no-run --quiet >/dev/null 2>&1 || {
    echo "error: cargo test --no-run failed; run it by hand to see why" >&2
    exit 1
  }
}

# Seconds that `cargo test --no-run` takes after appending a comment line to $1.
time_change() {
  build # warm-up: everything is up to date before the change
  echo "// build-times.sh $(date +%s%N)" >>"$1"
  local start end
  start=$(date +%s.%N)
  build
  end=$(date +%s.%N)
  restore_one "$1"
  awk -v s="$start" -v e="$end" 'BEGIN { printf "%.1f", e - s }'
}
restore_one() {
  if [ "$1" = "$client_file" ]; then cp "$backup/client.rs" "$1"; else cp "$backup/mock.rs" "$1"; fi
}

client=$(time_change "$client_file")
echo "client: $client s  ($client_file)"
mock=$(time_change "$mock_file")
echo "mock: $mock s  ($mock_file)"
