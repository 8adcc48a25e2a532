# Sourced by the client bench scripts (bench-client.sh, ab-client.sh, recv-floor.sh).

# Wait until the mock server on 127.0.0.1:$1 answers /health (10 s at most).
wait_for_mock() {
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$1/health" >/dev/null && return 0
    sleep 0.1
  done
  echo "the mock server on port $1 did not answer /health within 10 s" >&2
  return 1
}
