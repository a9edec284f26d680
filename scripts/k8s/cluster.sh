#!/usr/bin/env bash
# A real single-node Kubernetes for the tests of the Kubernetes backend: etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler, containerd (runtime
# handlers `runc` and `runsc` = gVisor) and kubelet (node `localhost`), all
# built by scripts/k8s/build.sh, all state under target/k8s/run/, every port
# on 127.0.0.1.
#   usage: scripts/k8s/cluster.sh start   # fresh cluster, waits for node Ready,
#                                         # prints `export KUBECONFIG=...` lines
#          scripts/k8s/cluster.sh stop    # kills it all, restores the host
#          scripts/k8s/cluster.sh env     # prints the export lines again
# start saves the host state kubelet/CNI change (sysctls, iptables) and stop
# restores it; stop is idempotent and also cleans up after a crash.
set -euo pipefail
self=$(readlink -f "$0")
cd "$(dirname "$self")/../.."
root=$PWD
RUN=$root/target/k8s/run
PKI=$RUN/pki
HOST=$RUN/host                    # saved host state, kept until stop restores it
BRIDGE=burrowk8s0                 # CNI bridge
POD_SUBNET=10.244.0.0/24
SYSCTLS="vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.ip_forward net.ipv6.conf.all.forwarding"
# Host paths kubelet/containerd/libcni write to whatever their configuration
# says; stop removes them again if start created them.
HOST_DIRS="/var/log/containers /var/lib/cni /var/lib/kubelet /run/containerd"
COMPONENTS="etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet"
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export KUBECACHEDIR=$RUN/kubectl-cache # not ~/.kube/cache

say() { echo "==> [${SECONDS}s] $*" >&2; }
warn() { echo "warning: $*" >&2; }
kc() { "$BIN/kubectl" --kubeconfig "$RUN/kubeconfig" "$@"; }
ctr_() { "$BIN/ctr" --address "$RUN/containerd/containerd.sock" -n k8s.io "$@"; }

print_env() {
  echo "export KUBECONFIG=$RUN/kubeconfig"
  echo "export BURROW_K8S_BIN=$BIN"
  echo "export CONTAINERD_ADDRESS=$RUN/containerd/containerd.sock"
  echo "export CONTAINERD_NAMESPACE=k8s.io"
  # Registry host configurations (hosts.toml per HOST:PORT, read at each
  # pull): a test's local registry is reached over plain HTTP through one.
  echo "export BURROW_K8S_REGISTRY_HOSTS=$RUN/containerd/certs.d"
  echo "export KUBECACHEDIR=$RUN/kubectl-cache"
}

# ---------------------------------------------------------------- processes

pid_of() { # pid_of NAME: the recorded pid, if that process still runs our binary
  local f=$RUN/pids/$1.pid pid exe
  [ -f "$f" ] || return 1
  pid=$(cat "$f")
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
  case $exe in "$root/target/k8s/"*) echo "$pid" ;; *) return 1 ;; esac
}

launch() { # launch NAME CMD...: runs CMD detached, logs to logs/NAME.log
  local name=$1
  shift
  setsid "$@" </dev/null >"$RUN/logs/$name.log" 2>&1 9>&- &
  echo $! >"$RUN/pids/$name.pid"
}

stop_one() { # stop_one NAME: SIGTERM, then SIGKILL after 10 s
  local pid i
  pid=$(pid_of "$1") || { rm -f "$RUN/pids/$1.pid"; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 100); do [ -e "/proc/$pid" ] && [ "$(state "$pid")" != Z ] || break; sleep 0.1; done
  [ -e "/proc/$pid" ] && kill -KILL "$pid" 2>/dev/null || true
  rm -f "$RUN/pids/$1.pid"
}

state() { sed 's/.*) \(.\).*/\1/' "/proc/$1/stat" 2>/dev/null || echo X; }

# Every process of the stack that may be left: binaries under target/k8s/
# (shims, runsc sandboxes and gofers, ...), runc with its root under $RUN,
# waiters of the runsc wrapper, and whatever lives in kubelet's pod cgroups.
leftovers() {
  local p pid exe
  for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    [ "$pid" = $$ ] || [ "$pid" = "$BASHPID" ] && continue
    [ "$(state "$pid")" = Z ] && continue
    exe=$(readlink "$p/exe" 2>/dev/null) || continue
    case $exe in
      "$root/target/k8s/"*) echo "$pid" ;;
      */runc) tr '\0' '\n' <"$p/cmdline" 2>/dev/null | grep -q "^$RUN/" && echo "$pid" ;;
      */bash) [ "$(tr '\0' '\n' <"$p/cmdline" 2>/dev/null | sed -n 2p)" = "$RUN/bin/runsc" ] && echo "$pid" ;;
    esac
  done
  if [ -f "$HOST/saved" ] && [ ! -f "$HOST/kubepods-existed" ]; then
    find /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods -name cgroup.procs \
      -exec cat {} + 2>/dev/null | while read -r pid; do
      [ "$(state "$pid")" != Z ] && echo "$pid"
    done
  fi
  return 0
}

kill_leftovers() {
  local i pids
  for i in $(seq 50); do
    pids=$(leftovers | sort -u | tr '\n' ' ')
    [ -n "${pids// /}" ] || return 0
    [ "$i" = 1 ] && say "killing leftover processes: $pids"
    kill -KILL $pids 2>/dev/null || true
    sleep 0.2
  done
  warn "processes still alive: $pids"
}

# ---------------------------------------------------------------- host state

save_host() {
  [ -f "$HOST/saved" ] && return 0 # an unrestored earlier save is the real host state
  mkdir -p "$HOST"
  local s d
  for s in $SYSCTLS; do
    [ -e "/proc/sys/${s//.//}" ] && echo "$s=$(sysctl -n "$s")"
  done >"$HOST/sysctl.conf"
  iptables-save >"$HOST/iptables.v4"
  ip6tables-save >"$HOST/iptables.v6"
  if command -v nft >/dev/null; then nft list tables >"$HOST/nft-tables"; fi
  for d in $HOST_DIRS; do [ -e "$d" ] || echo "$d"; done >"$HOST/created-dirs"
  for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
    if [ -d "$d" ]; then touch "$HOST/kubepods-existed"; fi # not ours: leave those alone
  done
  touch "$HOST/saved"
}

restore_host() {
  [ -f "$HOST/saved" ] || return 0
  say "restoring host sysctls and iptables"
  local s t d
  while IFS= read -r s; do sysctl -q -w "$s" || warn "could not restore $s"; done <"$HOST/sysctl.conf"
  # Delete the nftables tables (iptables-nft ones included) that did not exist,
  # then load the saved iptables rules back into the ones that did.
  if [ -f "$HOST/nft-tables" ]; then
    nft list tables | while read -r t; do
      grep -qxF "$t" "$HOST/nft-tables" || nft delete $t
    done
  fi
  if grep -q '^\*' "$HOST/iptables.v4"; then iptables-restore <"$HOST/iptables.v4"; fi
  if grep -q '^\*' "$HOST/iptables.v6"; then ip6tables-restore <"$HOST/iptables.v6"; fi
  if [ ! -f "$HOST/kubepods-existed" ]; then # kubelet's cgroups, children first
    find /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods -depth -type d \
      -exec rmdir {} \; 2>/dev/null || true
  fi
  # kubelet's /var/log/containers links, libcni's result cache, and (in paths
  # that did not exist) kubelet's device-plugin socket and containerd's shim sockets.
  find /var/log/containers -maxdepth 1 -type l -lname "$RUN/*" -delete 2>/dev/null || true
  rm -f /var/lib/cni/results/burrow-k8s-* /var/lib/cni/results/cni-loopback-*
  while IFS= read -r d; do
    case $d in
      /run/containerd) pgrep -x containerd >/dev/null || rm -rf /run/containerd ;;
      /var/lib/kubelet) rm -f /var/lib/kubelet/device-plugins/kubelet.sock /var/lib/kubelet/device-plugins/kubelet_internal_checkpoint ;;
    esac
    find "$d" -depth -type d -empty -delete 2>/dev/null || true
  done <"$HOST/created-dirs"
  rm -rf "$HOST"
}

unmount_all() { # everything mounted under $RUN, deepest first
  local i m mounts
  for i in $(seq 10); do
    mounts=$(awk -v r="$RUN" '$5 == r || index($5, r "/") == 1 { print $5 }' /proc/self/mountinfo | sort -ru)
    [ -n "$mounts" ] || return 0
    for m in $mounts; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
  done
  warn "still mounted: $mounts"
  return 1
}

remove_bridge() {
  local v
  ip link show "$BRIDGE" >/dev/null 2>&1 || return 0
  for v in $(ip -o link show master "$BRIDGE" | awk -F': ' '{ print $2 }' | cut -d@ -f1); do
    ip link del "$v" 2>/dev/null || true
  done
  ip link del "$BRIDGE"
}

# What a failed test needs to know about the cluster it ran on: components
# that exited before the stop (with their last log lines), and the node's
# taints and conditions when they are not the healthy ones.
report_health() {
  local c f node
  for c in $COMPONENTS; do
    f=$RUN/pids/$c.pid
    [ -f "$f" ] && ! pid_of "$c" >/dev/null || continue
    warn "$c had exited before the stop; the end of its log:"
    tail -n 20 "$RUN/logs/$c.log" >&2 || true
  done
  BIN=$(cat "$RUN/bindir" 2>/dev/null) || return 0
  node=$(timeout 10 "$BIN/kubectl" --kubeconfig "$RUN/kubeconfig" --request-timeout=5s get node localhost \
    -o go-template='{{range .spec.taints}}taint {{.key}}:{{.effect}}{{"\n"}}{{end}}{{range .status.conditions}}{{if eq .type "Ready"}}{{if ne .status "True"}}condition {{.type}}={{.status}} ({{.reason}}: {{.message}}){{"\n"}}{{end}}{{else if ne .status "False"}}condition {{.type}}={{.status}} ({{.reason}}: {{.message}}){{"\n"}}{{end}}{{end}}' \
    2>/dev/null) || return 0
  if [ -n "$node" ]; then warn "node localhost at the stop:"; echo "$node" >&2; fi
}

stop_all() {
  [ -d "$RUN" ] || return 0
  if [ -d "$RUN/pids" ]; then
    report_health
    say "stopping the cluster"
  fi
  local c
  for c in kubelet kube-scheduler kube-controller-manager kube-apiserver etcd containerd; do stop_one "$c"; done
  kill_leftovers # pods, shims, runsc sandboxes and gofers
  unmount_all || true
  remove_bridge
  restore_host
  rm -rf "$RUN/pids" "$RUN/bindir"
}

# ---------------------------------------------------------------- start

ensure_host_tools() {
  local pkgs=""
  [ -x /usr/lib/cni/bridge ] && [ -x /usr/lib/cni/host-local ] && [ -x /usr/lib/cni/loopback ] ||
    pkgs="$pkgs containernetworking-plugins"
  command -v runc >/dev/null || pkgs="$pkgs runc"
  command -v openssl >/dev/null || pkgs="$pkgs openssl"
  command -v iptables-save >/dev/null || pkgs="$pkgs iptables"
  command -v nft >/dev/null || pkgs="$pkgs nftables"
  command -v curl >/dev/null || pkgs="$pkgs curl"
  [ -z "$pkgs" ] && return 0
  say "installing$pkgs"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q $pkgs >&2 ||
    { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $pkgs >&2; }
}

pick_ports() { # sets ETCD_PORT ETCD_PEER_PORT API_PORT CM_PORT SCHED_PORT KUBELET_PORT KUBELET_HEALTHZ_PORT
  local used v p
  used=$(ss -Htan | awk '{ n = split($4, a, ":"); print a[n] }')
  for v in ETCD_PORT ETCD_PEER_PORT API_PORT CM_PORT SCHED_PORT KUBELET_PORT KUBELET_HEALTHZ_PORT; do
    while p=$((20000 + RANDOM % 30000)); grep -qx "$p" <<<"$used"; do :; done
    used+=$'\n'$p
    printf -v "$v" %s "$p"
    echo "$v=$p"
  done >"$RUN/ports.env"
}

gen_certs() { # CA, serving and client certs, service-account key pair (kept across starts)
  [ -f "$PKI/.complete" ] && return 0
  say "generating certificates"
  local d=$PKI.tmp
  rm -rf "$d" && mkdir -p "$d"
  openssl genrsa -out "$d/ca.key" 2048 2>/dev/null
  openssl req -x509 -new -key "$d/ca.key" -subj /CN=burrow-k8s-ca -days 3650 -sha256 \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign,digitalSignature \
    -out "$d/ca.crt" 2>/dev/null
  cert() { # cert NAME SUBJECT EXTENDED-KEY-USAGE [SANS]
    openssl genrsa -out "$d/$1.key" 2048 2>/dev/null
    openssl req -new -key "$d/$1.key" -subj "$2" -out "$d/$1.csr"
    { echo "basicConstraints=critical,CA:FALSE"
      echo "keyUsage=critical,digitalSignature,keyEncipherment"
      echo "extendedKeyUsage=$3"
      [ -z "${4:-}" ] || echo "subjectAltName=$4"; } >"$d/$1.ext"
    openssl x509 -req -in "$d/$1.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -set_serial "0x$(openssl rand -hex 16)" \
      -days 3650 -sha256 -extfile "$d/$1.ext" -out "$d/$1.crt" 2>/dev/null
    rm "$d/$1.csr" "$d/$1.ext"
  }
  cert apiserver /CN=kube-apiserver serverAuth \
    IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
  cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
  cert admin "/O=system:masters/CN=burrow-admin" clientAuth
  cert controller-manager /CN=system:kube-controller-manager clientAuth
  cert scheduler /CN=system:kube-scheduler clientAuth
  cert kubelet "/O=system:nodes/CN=system:node:localhost" clientAuth
  cert kubelet-serving /CN=localhost serverAuth DNS:localhost,IP:127.0.0.1
  openssl genrsa -out "$d/sa.key" 2048 2>/dev/null
  openssl rsa -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
  chmod 600 "$d"/*.key
  touch "$d/.complete"
  rm -rf "$PKI" && mv "$d" "$PKI"
}

kubeconfig() { # kubeconfig FILE CERT: a kubeconfig for client cert CERT, data inlined
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: burrow
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $(base64 -w0 "$PKI/$2.crt")
    client-key-data: $(base64 -w0 "$PKI/$2.key")
contexts:
- name: burrow
  context:
    cluster: burrow
    user: $2
current-context: burrow
EOF
  chmod 600 "$1"
}

wait_for() { # wait_for WHAT SECONDS LOG CMD...: polls CMD every 0.2 s
  local what=$1 secs=$2 log=$3 i why
  why="timed out waiting for $what"
  shift 3
  for i in $(seq $((secs * 5))); do
    "$@" >/dev/null 2>&1 && return 0
    if ! pid_of "$log" >/dev/null; then why="$log exited while waiting for $what"; break; fi
    sleep 0.2
  done
  echo "$why; last lines of $RUN/logs/$log.log:" >&2
  tail -n 25 "$RUN/logs/$log.log" >&2 || true
  return 1
}

write_configs() {
  local runc
  runc=$(command -v runc)
  mkdir -p "$RUN/containerd/certs.d" "$RUN/cni/conf" "$RUN/cni/networks" "$RUN/bin" "$RUN/kubelet" "$RUN/pod-logs" "$RUN/logs/runsc"
  # gVisor as the OCI runtime of containerd's runc shim (gVisor's own shim
  # sets oom_score_adj -999, refused here without CAP_SYS_RESOURCE).
  { echo '#!/bin/bash'
    echo "RUNSC=$BIN/runsc STATE=$RUN/runsc-io DEBUG_LOG=$RUN/logs/runsc/"
    cat <<'EOF'
# runsc behind containerd's io.containerd.runc.v2 shim, which expects runc's
# model: the pid in --pid-file lives exactly as long as the container, and the
# container's stdio is create's stdio. runsc's pod sandbox ("pause") container
# fits; a pod's other containers (subcontainers joining that sandbox) do not:
# runsc writes the sandbox's pid and hands start's stdio to the container. So
# for those, create leaves a waiter process holding create's stdio whose pid
# goes into --pid-file; start gives runsc the waiter's stdio, then the waiter
# drops it, runs `runsc wait` and exits with the container's exit status,
# which the shim (a subreaper) reaps as the container's exit.
set -u
runsc=("$RUNSC" --platform=systrap --debug-log="$DEBUG_LOG")
globals=() cmd=
while [ $# -gt 0 ]; do
  case $1 in
    --root | --log | --log-format) globals+=("$1" "$2"); shift 2 ;;
    -*) globals+=("$1"); shift ;;
    *) cmd=$1; shift; break ;;
  esac
done
args=("$@") id=
[ $# -gt 0 ] && id=${args[-1]}
w=$STATE/$id
waiting() { [ -p "$w.fifo" ] && waiter=$(cat "$w.waiter" 2>/dev/null); }
case $cmd in
  create)
    bundle=. pidfile=
    for ((i = 0; i < $#; i++)); do
      case ${args[i]} in
        --bundle | -b) bundle=${args[i + 1]} ;;
        --pid-file) pidfile=${args[i + 1]} ;;
      esac
    done
    if [ -n "$pidfile" ] && grep -q '"io.kubernetes.cri.container-type": *"container"' "$bundle/config.json"; then
      mkdir -p "$STATE" && rm -f "$w.fifo" && mkfifo "$w.fifo"
      (
        read -r _ <"$w.fifo" # start has taken the container's stdio
        exec </dev/null >/dev/null 2>&1
        out=$("${runsc[@]}" "${globals[@]}" wait "$id")
        st=$(sed -n 's/.*"exitStatus": *\([0-9]*\).*/\1/p' <<<"$out")
        exit "${st:-255}"
      ) &
      waiter=$!
      "${runsc[@]}" "${globals[@]}" create "${args[@]}" || { rc=$?; kill -9 $waiter; rm -f "$w".*; exit $rc; }
      echo $waiter >"$w.waiter"
      printf %s $waiter >"$pidfile"
      exit 0
    fi
    ;;
  start)
    if waiting; then
      "${runsc[@]}" "${globals[@]}" start "${args[@]}" </proc/"$waiter"/fd/0 >/proc/"$waiter"/fd/1 2>/proc/"$waiter"/fd/2
      rc=$?
      echo >"$w.fifo"
      rm -f "$w.fifo"
      exit $rc
    fi
    ;;
  kill)
    if waiting; then # not started: the waiter stands for the container
      kill -9 "$waiter"
      rm -f "$w.fifo"
      "${runsc[@]}" "${globals[@]}" kill "${args[@]}" 2>/dev/null
      exit 0
    fi
    # The shim takes "container not running" (runc's words) for an already
    # stopped container, as after a pod sandbox's exit; runsc says otherwise.
    out=$("${runsc[@]}" "${globals[@]}" kill "${args[@]}" 2>&1) && exit 0
    rc=$?
    case $out in *"is not running"* | *"not found"*) echo "container not running: $out" >&2 ;; *) echo "$out" >&2 ;; esac
    exit $rc
    ;;
  delete)
    if waiting; then kill -9 "$waiter"; fi
    rm -f "$w.fifo" "$w.waiter"
    ;;
esac
exec "${runsc[@]}" "${globals[@]}" "$cmd" "${args[@]}"
EOF
  } >"$RUN/bin/runsc"
  chmod +x "$RUN/bin/runsc"
  cat >"$RUN/containerd/config.toml" <<EOF
version = 3
root = "$RUN/containerd/root"
state = "$RUN/containerd/state"

[grpc]
  address = "$RUN/containerd/containerd.sock"

[ttrpc]
  address = "$RUN/containerd/containerd.sock.ttrpc"

[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    path = "$RUN/containerd/opt"
  [plugins.'io.containerd.nri.v1.nri']
    disable = true
  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    [plugins.'io.containerd.cri.v1.images'.registry]
      config_path = "$RUN/containerd/certs.d"
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = "registry.k8s.io/pause:$(cat "$IMAGES/pause.tag")"
  [plugins.'io.containerd.cri.v1.runtime']
    restrict_oom_score_adj = true # root here lacks CAP_SYS_RESOURCE
    netns_mounts_under_state_dir = true
    enable_cdi = false
    cdi_spec_dirs = []
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ["/usr/lib/cni"]
      conf_dir = "$RUN/cni/conf"
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = "$runc"
          Root = "$RUN/runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runsc]
        runtime_type = "io.containerd.runc.v2"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runsc.options]
          BinaryName = "$RUN/bin/runsc"
          Root = "$RUN/runsc"
EOF
  cat >"$RUN/cni/conf/10-burrow-k8s.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "burrow-k8s",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{ "subnet": "$POD_SUBNET" }]],
        "routes": [{ "dst": "0.0.0.0/0" }],
        "dataDir": "$RUN/cni/networks"
      }
    }
  ]
}
EOF
  cat >"$RUN/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $PKI/ca.crt
authorization:
  mode: Webhook
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
containerRuntimeEndpoint: unix://$RUN/containerd/containerd.sock
cgroupDriver: cgroupfs
failSwapOn: false
podLogsDir: $RUN/pod-logs
resolvConf: /etc/resolv.conf
serializeImagePulls: false
makeIPTablesUtilChains: false # fewer host iptables changes (they are restored anyway)
# A test node on a shared build machine: no image GC and no eviction. With
# any threshold, a build that fills the disk or the page cache (kubelet counts
# active file pages as used memory) gives the node a DiskPressure or
# MemoryPressure taint, and every later pod stays Pending, unschedulable.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {}
EOF
}

start_failed() {
  local rc=$?
  [ $rc = 0 ] && return
  echo "start failed; logs in $RUN/logs" >&2
  stop_all
  exit $rc
}

start_all() {
  local t0=$SECONDS out i c running=1
  for c in $COMPONENTS; do pid_of "$c" >/dev/null || running=; done
  if [ -n "$running" ] && BIN=$(cat "$RUN/bindir") && kc get --raw /readyz >/dev/null 2>&1; then
    say "already running"
    print_env
    return 0
  fi
  stop_all # clean up whatever an earlier run left
  ensure_host_tools
  out=$(bash scripts/k8s/build.sh | tail -n 1)
  BIN=$out/bin IMAGES=$out/images

  mkdir -p "$RUN"
  save_host
  # Fresh state each start; only the certificates and the saved host state stay.
  unmount_all
  find "$RUN" -mindepth 1 -maxdepth 1 ! -name pki ! -name host -exec rm -rf --one-file-system {} +
  mkdir -p "$RUN/pids" "$RUN/logs"
  echo "$BIN" >"$RUN/bindir"
  trap start_failed EXIT # cleared once the cluster is up
  gen_certs
  pick_ports
  mkdir -p "$RUN/kubeconfigs"
  kubeconfig "$RUN/kubeconfig" admin
  for c in controller-manager scheduler kubelet; do kubeconfig "$RUN/kubeconfigs/$c" $c; done
  write_configs

  say "starting etcd"
  launch etcd "$BIN/etcd" --name burrow --data-dir "$RUN/etcd" --unsafe-no-fsync \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "burrow=http://127.0.0.1:$ETCD_PEER_PORT"
  wait_for etcd 30 etcd curl -fsS "http://127.0.0.1:$ETCD_PORT/health"

  say "starting kube-apiserver"
  launch kube-apiserver "$BIN/kube-apiserver" --bind-address=127.0.0.1 --secure-port="$API_PORT" \
    --advertise-address=127.0.0.1 --endpoint-reconciler-type=none \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" --cert-dir="$RUN/apiserver" \
    --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
    --client-ca-file="$PKI/ca.crt" --service-cluster-ip-range=10.0.0.0/24 \
    --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction --allow-privileged=true \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
    --kubelet-certificate-authority="$PKI/ca.crt" --kubelet-preferred-address-types=Hostname \
    --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$PKI/apiserver-kubelet-client.key" --profiling=false
  wait_for kube-apiserver 90 kube-apiserver kc get --raw /readyz

  say "starting kube-controller-manager and kube-scheduler"
  launch kube-controller-manager "$BIN/kube-controller-manager" --bind-address=127.0.0.1 \
    --secure-port="$CM_PORT" --cert-dir="$RUN/controller-manager" --leader-elect=false \
    --kubeconfig="$RUN/kubeconfigs/controller-manager" \
    --authentication-kubeconfig="$RUN/kubeconfigs/controller-manager" \
    --authorization-kubeconfig="$RUN/kubeconfigs/controller-manager" \
    --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
    --use-service-account-credentials=true --profiling=false \
    --node-monitor-grace-period=10m # a kubelet starved of CPU for a while is not an unreachable node
  launch kube-scheduler "$BIN/kube-scheduler" --bind-address=127.0.0.1 --secure-port="$SCHED_PORT" \
    --cert-dir="$RUN/scheduler" --leader-elect=false --kubeconfig="$RUN/kubeconfigs/scheduler" \
    --authentication-kubeconfig="$RUN/kubeconfigs/scheduler" \
    --authorization-kubeconfig="$RUN/kubeconfigs/scheduler" --profiling=false

  say "starting containerd"
  launch containerd "$BIN/containerd" --config "$RUN/containerd/config.toml"
  wait_for containerd 30 containerd ctr_ version
  say "importing the pause and busybox images"
  for i in pause busybox; do
    out=$(ctr_ images import --platform linux/amd64 "$IMAGES/$i.tar" 2>&1) || { echo "$out" >&2; exit 1; }
  done

  say "starting kubelet"
  launch kubelet "$BIN/kubelet" --config="$RUN/kubelet/config.yaml" \
    --kubeconfig="$RUN/kubeconfigs/kubelet" --hostname-override=localhost \
    --root-dir="$RUN/kubelet" --cert-dir="$RUN/kubelet/pki" --oom-score-adj=0 --v=1
  wait_for "node localhost" 60 kubelet kc get node localhost
  wait_for "node localhost Ready" 120 kubelet kc wait --for=condition=Ready node/localhost --timeout=2s
  kc apply -f - >/dev/null <<EOF
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata:
  name: gvisor
handler: runsc
EOF
  wait_for "default ServiceAccount" 60 kube-controller-manager kc -n default get serviceaccount default
  wait_for "kube-root-ca.crt" 60 kube-controller-manager kc -n default get configmap kube-root-ca.crt
  trap - EXIT
  say "cluster up in $((SECONDS - t0)) s (logs: $RUN/logs)"
  print_env
}

# ---------------------------------------------------------------- main

mkdir -p "$root/target/k8s"
exec 9>"$root/target/k8s/cluster.lock" # one start/stop at a time; daemons get 9>&-
flock 9
case ${1:-} in
  start) start_all ;;
  stop) stop_all ;;
  env)
    if [ -f "$RUN/bindir" ]; then BIN=$(cat "$RUN/bindir"); else BIN=$(bash scripts/k8s/build.sh | tail -n 1)/bin; fi
    print_env
    ;;
  *) echo "usage: $0 start|stop|env" >&2; exit 2 ;;
esac
