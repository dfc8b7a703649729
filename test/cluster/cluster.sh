#!/usr/bin/env bash
# A simulated cluster on one machine: K "hosts", each a Linux network
# namespace running its own sshd, joined by veth pairs to a bridge in the root
# namespace. Multi-host tests of `hora run` use it. Root only.
#
#   cluster.sh up K [--rate RATE] [--name NAME] [--subnet N]
#       Creates namespaces NAME0..NAME{K-1} (NAME defaults to hc), host i with
#       address 10.77.N.(i+1)/24 on its eth0 (N defaults to 0), loopback up;
#       bridge NAMEbr with 10.77.N.254/24 in the root namespace, so a launcher
#       there reaches every host. --rate (tc syntax: 1gbit, 500mbit) shapes
#       each host's link in both directions. Starts an sshd on port 22 of
#       every host (root login by key only), checks that ssh to each host
#       works, and prints, one per line (also written to STATE/env, which a
#       shell can source):
#         HORA_CLUSTER_NAME=hc
#         HORA_CLUSTER_DIR=/tmp/hora-cluster-hc         (STATE, the state dir)
#         HORA_CLUSTER_SSH_CONFIG=/tmp/hora-cluster-hc/ssh_config
#         HORA_CLUSTER_IDENTITY=/tmp/hora-cluster-hc/id_ed25519
#         HORA_CLUSTER_HOSTS=10.77.0.1,10.77.0.2        (host i's address, in order)
#         HORA_CLUSTER_BRIDGE_ADDR=10.77.0.254           (the root namespace's address)
#         HORA_CLUSTER_SUBNET=10.77.0.0/24
#         HORA_CLUSTER_RATE=1gbit                        (empty when unshaped)
#       STATE/hosts has the addresses one a line. `ssh -F STATE/ssh_config
#       10.77.0.1 cmd` runs cmd as root on host 0. A cluster of the same name
#       that already exists is taken down first. If up fails halfway it takes
#       down what it made and exits non-zero.
#   cluster.sh down [--name NAME]
#       Kills every process in the hosts (sshds, leftover workers), removes
#       the namespaces, the veths, the bridge and STATE. Safe to run at any
#       time, also when nothing or only part of a cluster exists.
#   cluster.sh exec [--name NAME] I cmd [args...]
#       Runs cmd in host I's namespace (as `ip netns exec NAMEI cmd`).
#   cluster.sh env [--name NAME]
#       Prints STATE/env of a cluster that is up.
#
# Clusters up at the same time need different names and different subnets:
# --name keeps a test's cluster apart from one a person left running, and
# --subnet lets it run beside one.
#
# Shaping is rate only: this kernel has tbf and htb but no netem, so no added
# delay or loss. tbf's bucket holds 2 ms at the configured rate (at least 32 KB):
# smaller buckets fall short of the rate (measured with iperf3 at 1gbit: 32 KB
# gave 786 Mbit/s of TCP goodput, 256 KB gave 955, which is line rate for
# 1500-byte frames), larger ones let more through at link speed at the start.
set -euo pipefail

MAX_HOSTS=32
BURST=256kb

die() {
  echo "cluster.sh: $*" >&2
  exit 1
}

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
  exit 2
}

NAME=hc
RATE=""
SUBNET_INDEX=0
CMD=""
POSITIONAL=()
parse_args() {
  while [ $# -gt 0 ]; do
    case "$1" in
      --name)
        [ $# -ge 2 ] || die "--name: missing value"
        NAME=$2
        shift 2
        ;;
      --name=*) NAME=${1#--name=}; shift ;;
      --rate)
        [ $# -ge 2 ] || die "--rate: missing value"
        RATE=$2
        shift 2
        ;;
      --rate=*) RATE=${1#--rate=}; shift ;;
      --subnet)
        [ $# -ge 2 ] || die "--subnet: missing value"
        SUBNET_INDEX=$2
        shift 2
        ;;
      --subnet=*) SUBNET_INDEX=${1#--subnet=}; shift ;;
      -h | --help) usage ;;
      *)
        if [ -z "$CMD" ]; then
          CMD=$1
          shift
        else
          POSITIONAL+=("$1")
          shift
          # exec: everything after the host index is the command, options included.
          if [ "$CMD" = exec ]; then
            POSITIONAL+=("$@")
            break
          fi
        fi
        ;;
    esac
  done
  # Interface names are at most 15 bytes (NAMEv31 must fit), and a name ending
  # in a digit would make its hosts' names ambiguous (hc1 + 0 = hc10).
  [[ "$NAME" =~ ^[a-z]([a-z0-9]{0,6}[a-z])?$ ]] ||
    die "--name \"$NAME\" is invalid: expected 1-8 lower-case letters and digits, starting and ending with a letter"
  if [ -n "$RATE" ]; then
    [[ "$RATE" =~ ^[0-9]+(\.[0-9]+)?([kmgt]?(bit|bps))$ ]] ||
      die "--rate \"$RATE\" is invalid: expected a tc rate such as 1gbit, 500mbit, 100mbps"
  fi
  [[ "$SUBNET_INDEX" =~ ^[0-9]{1,3}$ ]] && [ "$SUBNET_INDEX" -le 255 ] ||
    die "--subnet \"$SUBNET_INDEX\" is invalid: expected N in 0-255 (hosts get 10.77.N.x)"
  SUBNET=10.77.$SUBNET_INDEX
  BRIDGE_ADDR=$SUBNET.254
  STATE=/tmp/hora-cluster-$NAME
}

need_root() {
  [ "$(id -u)" = 0 ] || die "must run as root (network namespaces and sshd need it)"
  command -v ip >/dev/null || die "no 'ip' command: apt-get install iproute2"
}

ensure_sshd() {
  if [ ! -x /usr/sbin/sshd ]; then
    command -v apt-get >/dev/null || die "no /usr/sbin/sshd and no apt-get to install openssh-server"
    echo "cluster.sh: installing openssh-server" >&2
    apt-get -o DPkg::Lock::Timeout=300 update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends openssh-server >/dev/null
  fi
  command -v ssh >/dev/null || die "no ssh client: apt-get install openssh-client"
  command -v ssh-keygen >/dev/null || die "no ssh-keygen: apt-get install openssh-client"
  # sshd refuses to start without its privilege separation directory.
  mkdir -p /run/sshd
  chmod 755 /run/sshd
}

# Namespaces of this cluster, whatever their number (a partial up may have made some).
cluster_namespaces() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${NAME}[0-9]+\$" || true
}

down() {
  local ns pid pids
  for ns in $(cluster_namespaces); do
    # Everything in a host is ours: its sshd, sessions and any worker left over.
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    for pid in $pids; do kill -KILL "$pid" 2>/dev/null || true; done
  done
  # sshds whose namespace is already gone (pid files survive in STATE).
  for pidfile in "$STATE"/host*/sshd.pid; do
    [ -f "$pidfile" ] || continue
    pid=$(cat "$pidfile" 2>/dev/null || true)
    if [ -n "$pid" ] && grep -qs sshd "/proc/$pid/comm"; then kill -KILL "$pid" 2>/dev/null || true; fi
  done
  for ns in $(cluster_namespaces); do
    ip netns del "$ns" 2>/dev/null || true
  done
  # Root ends of veths whose peer never reached a namespace.
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E "^${NAME}v[0-9]+\$" || true); do
    ip link del "$link" 2>/dev/null || true
  done
  ip link del "${NAME}br" 2>/dev/null || true
  rm -rf "$STATE"
}

# Bytes of 2 ms at a tc rate such as 1gbit, 500mbit or 100mbps (bytes), at least 32 KB.
burst_bytes() {
  local rate=$1 unit per_s
  unit=$(sed -E 's/^[0-9.]+//' <<<"$rate")
  case "$unit" in
    bit) per_s=1 ;; kbit) per_s=1000 ;; mbit) per_s=1000000 ;; gbit) per_s=1000000000 ;; tbit) per_s=1000000000000 ;;
    bps) per_s=8 ;; kbps) per_s=8000 ;; mbps) per_s=8000000 ;; gbps) per_s=8000000000 ;; tbps) per_s=8000000000000 ;;
  esac
  awk -v n="${rate%"$unit"}" -v m="$per_s" 'BEGIN { b = n * m / 8 / 500; if (b < 32768) b = 32768; printf "%d\n", b }'
}

# tbf on the egress of one interface: egress of the host's eth0 limits what it
# sends, egress of the bridge port (root end of its veth) what it receives.
# tbf cuts a TCP segmentation (GSO) packet larger than its bucket into
# 1500-byte packets, and every one of those then costs the kernel a trip
# through the bridge, the veth and the receiver's TCP: at 120 Mbit/s a 20 MB
# allreduce cost each simulated host about 300 ms of CPU, taken from the same
# two vCPUs the ranks compute on, where a real host's NIC segments in hardware.
# So the veths build no GSO packet larger than the bucket (less their headers):
# the same rate, one tenth of the CPU (docs/notes/2026-11-26-tfjs-overlap-measured-again.md).
shape() {
  local netns=$1 dev=$2 burst
  burst=$(burst_bytes "$RATE")
  ip ${netns:+-n "$netns"} link set "$dev" txqueuelen 1000
  ip ${netns:+-n "$netns"} link set "$dev" gso_max_size "$(gso_bytes "$burst")"
  tc ${netns:+-n "$netns"} qdisc replace dev "$dev" root tbf rate "$RATE" burst "$burst" latency 20ms
}

# The largest GSO packet that fits a bucket of $1 bytes with the headers of
# its 1448-byte segments (about 5%) counted in; at most the kernel's 65536.
gso_bytes() {
  awk -v b="$1" 'BEGIN { g = int(b * 0.85); if (g > 65536) g = 65536; printf "%d\n", g }'
}

up() {
  local k=$1 i ns addr host_dir hosts=()
  [[ "$k" =~ ^[0-9]+$ ]] && [ "$k" -ge 1 ] && [ "$k" -le "$MAX_HOSTS" ] ||
    die "up: K \"$k\" is invalid: expected a number of hosts 1-$MAX_HOSTS"
  need_root
  [ -z "$RATE" ] || command -v tc >/dev/null || die "--rate needs tc: apt-get install iproute2"
  ensure_sshd

  down
  local other
  other=$(ip -o -4 addr show 2>/dev/null | awk -v a="$BRIDGE_ADDR/" 'index($4, a) == 1 {print $2}' | head -n1)
  [ -z "$other" ] || die "up: $BRIDGE_ADDR is already on interface $other (another cluster: take it down with cluster.sh down --name ${other%br}, or use another --subnet)"

  # From here on a failure takes down whatever was made.
  UP_DONE=0
  trap 'rc=$?; if [ "$UP_DONE" != 1 ]; then echo "cluster.sh: up failed (status $rc); removing what it made" >&2; down; fi; exit $rc' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM

  mkdir -p "$STATE"
  chmod 700 "$STATE"
  ssh-keygen -q -t ed25519 -N '' -C "hora-cluster-$NAME" -f "$STATE/id_ed25519"
  cp "$STATE/id_ed25519.pub" "$STATE/authorized_keys"
  cat >"$STATE/ssh_config" <<EOF
# ssh -F $STATE/ssh_config 10.77.0.1 cmd
Host *
  User root
  IdentityFile $STATE/id_ed25519
  IdentitiesOnly yes
  StrictHostKeyChecking no
  UserKnownHostsFile /dev/null
  LogLevel ERROR
  BatchMode yes
  ConnectTimeout 5
EOF

  ip link add "${NAME}br" type bridge
  ip addr add "$BRIDGE_ADDR/24" dev "${NAME}br"
  ip link set "${NAME}br" up

  for ((i = 0; i < k; i++)); do
    ns=$NAME$i
    addr=$SUBNET.$((i + 1))
    hosts+=("$addr")
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip link add "${NAME}v$i" type veth peer name eth0 netns "$ns"
    ip link set "${NAME}v$i" master "${NAME}br"
    ip link set "${NAME}v$i" up
    ip -n "$ns" addr add "$addr/24" dev eth0
    ip -n "$ns" link set eth0 up
    if [ -n "$RATE" ]; then
      shape "$ns" eth0
      shape "" "${NAME}v$i"
    fi

    host_dir=$STATE/host$i
    mkdir -p "$host_dir"
    ssh-keygen -q -t ed25519 -N '' -C "hora-cluster-$ns" -f "$host_dir/ssh_host_ed25519_key"
    cat >"$host_dir/sshd_config" <<EOF
ListenAddress $addr
Port 22
HostKey $host_dir/ssh_host_ed25519_key
PidFile $host_dir/sshd.pid
AuthorizedKeysFile $STATE/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
# The keys live under /tmp, which is world-writable.
StrictModes no
UseDNS no
PrintMotd no
PrintLastLog no
X11Forwarding no
AllowTcpForwarding no
# A launcher opens one session per worker, all at once.
MaxStartups 200:30:400
MaxSessions 100
LogLevel ERROR
EOF
    ip netns exec "$ns" /usr/sbin/sshd -f "$host_dir/sshd_config" -E "$host_dir/sshd.log"
  done

  # sshd daemonizes before it is certain to be listening: wait until a real login works.
  for addr in "${hosts[@]}"; do
    local tries=0
    until ssh -F "$STATE/ssh_config" -o ConnectTimeout=2 "$addr" true 2>/dev/null; do
      tries=$((tries + 1))
      [ "$tries" -lt 50 ] || die "up: ssh to $addr does not work; sshd log: $(tail -n 3 "$STATE/host$((${addr##*.} - 1))/sshd.log" 2>/dev/null)"
      sleep 0.1
    done
  done

  printf '%s\n' "${hosts[@]}" >"$STATE/hosts"
  local joined
  joined=$(IFS=,; echo "${hosts[*]}")
  cat >"$STATE/env" <<EOF
HORA_CLUSTER_NAME=$NAME
HORA_CLUSTER_DIR=$STATE
HORA_CLUSTER_SSH_CONFIG=$STATE/ssh_config
HORA_CLUSTER_IDENTITY=$STATE/id_ed25519
HORA_CLUSTER_HOSTS=$joined
HORA_CLUSTER_BRIDGE_ADDR=$BRIDGE_ADDR
HORA_CLUSTER_SUBNET=$SUBNET.0/24
HORA_CLUSTER_RATE=$RATE
EOF
  UP_DONE=1
  cat "$STATE/env"
}

main() {
  [ $# -gt 0 ] || usage
  parse_args "$@"
  case "$CMD" in
    up)
      [ ${#POSITIONAL[@]} -eq 1 ] || die "up: expected one argument K, the number of hosts (cluster.sh up K [--rate RATE] [--name NAME])"
      up "${POSITIONAL[0]}"
      ;;
    down)
      [ ${#POSITIONAL[@]} -eq 0 ] || die "down: unexpected argument \"${POSITIONAL[0]}\""
      need_root
      down
      ;;
    exec)
      [ ${#POSITIONAL[@]} -ge 2 ] || die "exec: expected a host index and a command (cluster.sh exec I cmd...)"
      local i=${POSITIONAL[0]}
      [[ "$i" =~ ^[0-9]+$ ]] || die "exec: host index \"$i\" is invalid: expected a number"
      need_root
      ip netns list | awk '{print $1}' | grep -qx "$NAME$i" || die "exec: no host $i in cluster $NAME (namespace $NAME$i)"
      exec ip netns exec "$NAME$i" "${POSITIONAL[@]:1}"
      ;;
    env)
      [ -f "$STATE/env" ] || die "env: cluster $NAME is not up ($STATE/env missing)"
      cat "$STATE/env"
      ;;
    *) die "unknown command \"$CMD\": expected up, down, exec or env (cluster.sh --help)" ;;
  esac
}

main "$@"
