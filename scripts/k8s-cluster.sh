#!/usr/bin/env bash
# A real one-node Kubernetes 1.20 cluster on this machine, the test bed of the Kubernetes
# provider (src/provider/kubernetes; tests/it/kubernetes.rs starts it itself). etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler and a kubelet (node `localhost`,
# built-in Docker runtime, so pods are containers of the local Docker Engine) run as
# processes; certificates and kubeconfigs are generated under the run directory. Usage:
#   scripts/k8s-cluster.sh build        # builds + caches the binaries (instant when cached)
#   scripts/k8s-cluster.sh start DIR    # starts the cluster; writes DIR/kubeconfig
#   scripts/k8s-cluster.sh stop DIR     # kills it, removes the pods' containers, restores sysctls
# Then `export KUBECONFIG=DIR/kubeconfig`. The binaries come from Debian bookworm's
# `kubernetes` source package (1.20.2, Go dependencies vendored) built with Debian's golang-go,
# cached in ORCHESTRATE_K8S_CACHE (default ~/.cache/orchestrate/k8s-1.20.2). Needs root,
# Docker, golang-go, etcd-server, socat, dpkg-dev, openssl (.ci/run installs them) and a Debian
# mirror for `apt-get source`. The API server listens on K8S_TEST_PORT (default 16443).
set -euo pipefail
cmd=${1:?build|start|stop}
cache=${ORCHESTRATE_K8S_CACHE:-$HOME/.cache/orchestrate/k8s-1.20.2}
bins=(kube-apiserver kube-controller-manager kube-scheduler kubelet)
port=${K8S_TEST_PORT:-16443}
pause=orchestrate/k8s-pause:3.4

# What the cached binaries were built with; a change rebuilds them.
stamp="kubernetes 1.20.2, oom_score_adj clamped, reflect2 1.0.2"

have_bins() {
  [ "$(cat "$cache/bin/BUILT" 2>/dev/null)" = "$stamp" ] || return 1
  for b in "${bins[@]}"; do [ -x "$cache/bin/$b" ] || return 1; done
}

build() {
  have_bins && return 0
  mkdir -p "$cache/src" "$cache/bin"
  local apt="$cache/apt"
  mkdir -p "$apt"
  # deb-src in a private apt config, so the host's sources stay as they are.
  uri=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
  uri=${uri:-http://deb.debian.org/debian}
  printf 'deb-src %s bookworm main\n' "$uri" >"$apt/sources.list"
  aptopt=(-o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache")
  mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial"
  src=$(ls -d "$cache"/src/kubernetes-*/ 2>/dev/null | head -1 || true)
  if [ -z "$src" ]; then
    apt-get "${aptopt[@]}" update -q
    (cd "$cache/src" && apt-get "${aptopt[@]}" source -q kubernetes)
    src=$(ls -d "$cache"/src/kubernetes-*/ | head -1)
  fi
  # This machine withholds CAP_SYS_RESOURCE from root, so no negative oom_score_adj can be set;
  # dockershim asks -998 for sandboxes and -997 for guaranteed pods: clamp both to 0.
  sed -i 's/defaultSandboxOOMAdj int = -998/defaultSandboxOOMAdj int = 0/' \
    "$src/pkg/kubelet/dockershim/docker_sandbox.go"
  sed -i 's/^\(\t*\)createConfig.HostConfig.OomScoreAdj = int(rOpts.OomScoreAdj)$/\1if rOpts.OomScoreAdj > 0 { createConfig.HostConfig.OomScoreAdj = int(rOpts.OomScoreAdj) }/' \
    "$src/pkg/kubelet/dockershim/helpers_linux.go"
  grep -q 'if rOpts.OomScoreAdj > 0' "$src/pkg/kubelet/dockershim/helpers_linux.go" ||
    { echo "k8s-cluster: the oom_score_adj patch did not apply" >&2; exit 1; }
  # The vendored reflect2 1.0.1 reads Go's map iterator with the layout of Go < 1.18: with
  # golang-go 1.19 the API server dies (SIGSEGV in mapiterinit) at its first sorted-map JSON.
  # Debian's golang-github-modern-go-reflect2-dev (1.0.2) has the fix; vendor it instead.
  reflect2=/usr/share/gocode/src/github.com/modern-go/reflect2
  [ -f "$reflect2/go_above_118.go" ] ||
    { echo "k8s-cluster: apt-get install golang-github-modern-go-reflect2-dev (reflect2 1.0.2)" >&2; exit 1; }
  rsync -a --delete --exclude go.mod "$reflect2/" "$src/vendor/github.com/modern-go/reflect2/"
  # Not GOFLAGS=-p=2: it leaks into -tags.
  for b in "${bins[@]}"; do
    (cd "$src" && HOME=${HOME:-/root} GOMAXPROCS=2 CGO_ENABLED=0 KUBE_STATIC_OVERRIDES=kubelet \
      nice -n 10 make WHAT="cmd/$b")
    cp "$src/_output/bin/$b" "$cache/bin/$b.tmp" && mv "$cache/bin/$b.tmp" "$cache/bin/$b"
  done
  echo "$stamp" >"$cache/bin/BUILT"
  # The build tree is not needed once the binaries are cached.
  rm -rf "$src/_output"
}

build_pause() { # kubelet's pod sandbox: Kubernetes' own pause.c, linked statically
  [ -x "$cache/bin/pause" ] && return 0
  src=$(ls -d "$cache"/src/kubernetes-*/ | head -1)
  gcc -Os -static -o "$cache/bin/pause.tmp" "$src/build/pause/linux/pause.c"
  mv "$cache/bin/pause.tmp" "$cache/bin/pause"
}

pki() { # CA, API server cert, admin client cert (system:masters), service-account key pair
  local p="$dir/pki"
  [ -s "$p/admin.crt" ] && return 0
  mkdir -p "$p"
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=orchestrate-test-ca" \
    -keyout "$p/ca.key" -out "$p/ca.crt" 2>/dev/null
  cat >"$p/apiserver.ext" <<EXT
subjectAltName=DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:127.0.0.1,IP:10.0.0.1
extendedKeyUsage=serverAuth
EXT
  printf 'extendedKeyUsage=clientAuth\n' >"$p/admin.ext"
  for who in apiserver:/CN=kube-apiserver admin:/O=system:masters/CN=admin; do
    name=${who%%:*}
    openssl req -newkey rsa:2048 -nodes -subj "${who#*:}" -keyout "$p/$name.key" \
      -out "$p/$name.csr" 2>/dev/null
    openssl x509 -req -in "$p/$name.csr" -CA "$p/ca.crt" -CAkey "$p/ca.key" -CAcreateserial \
      -days 3650 -extfile "$p/$name.ext" -out "$p/$name.crt" 2>/dev/null
  done
  openssl genrsa -out "$p/sa.key" 2048 2>/dev/null
  openssl rsa -in "$p/sa.key" -pubout -out "$p/sa.pub" 2>/dev/null
}

kubeconfig() {
  cat >"$dir/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: orchestrate-test
  cluster:
    server: https://127.0.0.1:$port
    certificate-authority: $dir/pki/ca.crt
users:
- name: admin
  user:
    client-certificate: $dir/pki/admin.crt
    client-key: $dir/pki/admin.key
contexts:
- name: orchestrate-test
  context:
    cluster: orchestrate-test
    user: admin
    namespace: default
current-context: orchestrate-test
KC
}

pause_image() { # a static pause binary in an image FROM scratch (kubelet's pod sandbox)
  docker image inspect "$pause" >/dev/null 2>&1 && return 0
  local root
  root=$(mktemp -d)
  cp "$cache/bin/pause" "$root/pause"
  tar -C "$root" -c . | docker import --change 'ENTRYPOINT ["/pause"]' - "$pause" >/dev/null
  rm -rf "$root"
}

api() { # GET an API path as admin; prints the pretty JSON
  curl -sf --cacert "$dir/pki/ca.crt" --cert "$dir/pki/admin.crt" --key "$dir/pki/admin.key" \
    "https://127.0.0.1:$port$1?pretty=true"
}

daemon() { # name, command...: started in its own session, pid in DIR/NAME.pid, log in DIR/log
  local name=$1
  shift
  setsid "$@" >"$dir/log/$name.log" 2>&1 </dev/null &
  echo $! >"$dir/$name.pid"
}

wait_for() { # what, seconds, command...
  local what=$1 secs=$2
  shift 2
  for _ in $(seq $((secs * 2))); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  echo "k8s-cluster: $what not up after $secs s; logs in $dir/log" >&2
  tail -n 20 "$dir"/log/*.log >&2 || true
  return 1
}

node_ready() { api /api/v1/nodes/localhost | grep -A1 '"type": "Ready"' | grep -q '"status": "True"'; }

start() {
  build
  build_pause
  # Another test cluster's kubelet (one left by a killed test run) shares the Docker Engine
  # and the node name, and kills this cluster's pod containers as orphans: refuse plainly.
  local other
  other=$( (pgrep -f "$cache/bin/kubelet --kubeconfig " || true) | while read -r pid; do
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "--kubeconfig $dir/" || echo "$pid"
  done | head -1 || true)
  if [ -n "$other" ]; then
    echo "k8s-cluster: another test cluster's kubelet runs (pid $other: $(tr '\0' ' ' <"/proc/$other/cmdline" | cut -c1-120)); stop it first: $0 stop <its dir>" >&2
    exit 1
  fi
  mkdir -p "$dir/log" "$dir/etcd" "$dir/kubelet"
  pki
  kubeconfig
  pause_image
  # The kubelet changes these host sysctls; stop puts them back.
  [ -s "$dir/sysctl.saved" ] || for k in vm.overcommit_memory kernel.panic kernel.panic_on_oops; do
    echo "$k=$(sysctl -n "$k")"
  done >"$dir/sysctl.saved"
  local b=$cache/bin p=$dir/pki
  daemon etcd etcd --name orchestrate-test --data-dir "$dir/etcd" \
    --listen-client-urls "http://127.0.0.1:$((port + 1))" \
    --advertise-client-urls "http://127.0.0.1:$((port + 1))" \
    --listen-peer-urls "http://127.0.0.1:$((port + 2))" \
    --initial-advertise-peer-urls "http://127.0.0.1:$((port + 2))" \
    --initial-cluster "orchestrate-test=http://127.0.0.1:$((port + 2))"
  daemon kube-apiserver "$b/kube-apiserver" --etcd-servers "http://127.0.0.1:$((port + 1))" \
    --bind-address 127.0.0.1 --secure-port "$port" --insecure-port 0 \
    --advertise-address 127.0.0.1 --endpoint-reconciler-type none \
    --service-cluster-ip-range 10.0.0.0/24 --authorization-mode RBAC \
    --client-ca-file "$p/ca.crt" --tls-cert-file "$p/apiserver.crt" \
    --tls-private-key-file "$p/apiserver.key" \
    --service-account-key-file "$p/sa.pub" --service-account-signing-key-file "$p/sa.key" \
    --service-account-issuer https://kubernetes.default.svc \
    --kubelet-client-certificate "$p/admin.crt" --kubelet-client-key "$p/admin.key" \
    --kubelet-preferred-address-types Hostname,InternalIP
  wait_for kube-apiserver 90 api /readyz
  daemon kube-controller-manager "$b/kube-controller-manager" --kubeconfig "$dir/kubeconfig" \
    --leader-elect=false --port 0 --secure-port 0 \
    --service-account-private-key-file "$p/sa.key" --root-ca-file "$p/ca.crt" \
    --cluster-signing-cert-file "$p/ca.crt" --cluster-signing-key-file "$p/ca.key"
  daemon kube-scheduler "$b/kube-scheduler" --kubeconfig "$dir/kubeconfig" \
    --leader-elect=false --port 0 --secure-port 0
  # --sync-frequency 5s: the 1.20 kubelet's pod worker was seen here to act on a pod's
  # deletion only at its next periodic sync (default 1m), so a teardown took up to 100 s.
  daemon kubelet "$b/kubelet" --kubeconfig "$dir/kubeconfig" --hostname-override localhost \
    --container-runtime docker --cgroup-driver cgroupfs --pod-infra-container-image "$pause" \
    --root-dir "$dir/kubelet" --cert-dir "$dir/kubelet/pki" --address 127.0.0.1 \
    --port "$((port + 3))" --read-only-port 0 --healthz-port 0 --fail-swap-on=false \
    --cgroups-per-qos=false --enforce-node-allocatable= --eviction-hard= \
    --image-gc-high-threshold 100 --image-gc-low-threshold 99 --make-iptables-util-chains=false \
    --sync-frequency 5s
  wait_for "node localhost Ready" 120 node_ready
  wait_for "service account default/default" 60 api /api/v1/namespaces/default/serviceaccounts/default
  echo "k8s-cluster: ready; export KUBECONFIG=$dir/kubeconfig"
}

stop() {
  local pids=()
  for name in kubelet kube-scheduler kube-controller-manager kube-apiserver etcd; do
    pid=$(cat "$dir/$name.pid" 2>/dev/null || true)
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && pids+=("$pid")
    rm -f "$dir/$name.pid"
  done
  for _ in $(seq 50); do # up to 10 s, then SIGKILL
    alive=()
    for p in "${pids[@]}"; do
      state=$(ps -o stat= -p "$p" 2>/dev/null || true)
      case "$state" in "" | Z*) ;; *) alive+=("$p") ;; esac
    done
    [ ${#alive[@]} = 0 ] && break
    sleep 0.2
  done
  for p in "${alive[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  # The pods' containers (kubelet names them k8s_*), sandboxes included.
  ids=$(docker ps -aq --filter label=io.kubernetes.pod.name 2>/dev/null || true)
  [ -z "$ids" ] || docker rm -f $ids >/dev/null 2>&1 || true
  if [ -s "$dir/sysctl.saved" ]; then
    while IFS= read -r kv; do sysctl -q -w "$kv" >/dev/null || true; done <"$dir/sysctl.saved"
    rm -f "$dir/sysctl.saved"
  fi
  # kubelet's volume mounts (secrets, tmpfs) under its root dir.
  grep -o " $dir/kubelet[^ ]*" /proc/mounts 2>/dev/null | sort -r | while read -r m; do
    umount "$m" 2>/dev/null || true
  done
}

case "$cmd" in
build) build && build_pause ;;
start) dir=$(realpath -m "${2:?directory}") && start ;;
stop) dir=$(realpath -m "${2:?directory}") && stop ;;
*) echo "k8s-cluster: unknown command $cmd (build|start|stop)" >&2; exit 2 ;;
esac
