#!/usr/bin/env bash
# Incremental build times of this checkout: how long `cargo test --no-run` (every test target
# of the default members) takes after a small code change to a client file, and separately to
# a mock server file; and how long the mock's own tests take to build after the mock change
# (`-p orchestrate-mock` on the workspace; the library's tests on the single crate, where the
# mock's tests live). Each change follows a warm-up build, so only the rebuild is timed. The
# change is a private function appended to the file (a comment alone lets incremental
# compilation skip nearly everything); the files are restored on exit, whatever happens.
# Works on the single-crate layout (src/mock/) and the workspace one (crates/mock/).
#
# Usage: scripts/build-times.sh        (prints `client`, `mock` and `mock alone` in seconds)
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
  cargo test --no-run --quiet "$@" >/dev/null 2>&1 || {
    echo "error: cargo test --no-run failed; run it by hand to see why" >&2
    exit 1
  }
}

# Seconds that `cargo test --no-run [ARGS]` takes after appending a function to $1.
time_change() {
  local file=$1
  shift
  build "$@" # warm-up: everything is up to date before the change
  printf '\n#[allow(dead_code, reason = "build-times.sh")]\nfn build_times_probe() -> u64 {\n    %s\n}\n' "$(date +%s%N)" >>"$file"
  local start end
  start=$(date +%s.%N)
  build "$@"
  end=$(date +%s.%N)
  restore_one "$file"
  awk -v s="$start" -v e="$end" 'BEGIN { printf "%.1f", e - s }'
}
restore_one() {
  if [ "$1" = "$client_file" ]; then cp "$backup/client.rs" "$1"; else cp "$backup/mock.rs" "$1"; fi
}

client=$(time_change "$client_file")
echo "client: $client s  ($client_file)"
mock=$(time_change "$mock_file")
echo "mock: $mock s  ($mock_file)"
if [ -d crates/mock ]; then
  alone=$(time_change "$mock_file" -p orchestrate-mock)
  echo "mock alone: $alone s  (cargo test -p orchestrate-mock --no-run)"
else
  alone=$(time_change "$mock_file" --lib)
  echo "mock alone: $alone s  (cargo test --lib --no-run: the mock's tests are the library's)"
fi
