# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# shellcheck shell=bash
# The siw interop harness: a qemu guest running Debian's kernel with siw (built by
# build-guest.sh), joined to the host by a tap device inside a network namespace of our own, and
# uiwarp on the host side of that tap. Sourced by run.sh; see README.md in this folder.
#
# Addresses: the guest is 10.0.2.15 (siw0 on eth0), the host side of the tap is 10.0.2.2 (uiwarp1
# on siwtap0). Tap, not qemu's user networking: slirp ends the guest's TCP connection and opens a
# new one, so the host would see slirp's segments, not siw's.
#
# Needs: UIWARP_RUN, UIWARP_CLI (built binaries), root, /dev/net/tun, qemu-system-x86_64, ip.

SIW_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$SIW_HERE/../../../scripts/lib/common.sh" # state_dir, uiwarpd_stop, wait_listen
SIW_CACHE=${UIWARP_SIW_CACHE:-/var/cache/uiwarp-siw}
GUEST=10.0.2.15
HOST=10.0.2.2
# Guest commands and qemu's TCG are slow and share the machine: generous, not tight, timeouts.
# (One program pair normally takes 3-15 s; a pair that hits siw's start-up race never ends.)
SIW_TIMEOUT=${SIW_TIMEOUT:-90}
BOOTS=0

log() { echo "[$(date +%H:%M:%S)] $*"; }
die() { echo "siw-interop: error: $*" >&2; exit 1; }
SKIP_AS=siw-interop # skip(): scripts/lib/common.sh

siw_require() {
  [[ $(id -u) == 0 ]] || skip "needs root (network namespace and tap device)"
  [[ -c /dev/net/tun ]] || skip "needs /dev/net/tun"
  local t
  for t in qemu-system-x86_64 ip ss tshark python3; do
    command -v "$t" >/dev/null || skip "needs $t (scripts/deps installs it)"
  done
  [[ -x ${UIWARP_RUN:-} && -x ${UIWARP_CLI:-} ]] || die "UIWARP_RUN and UIWARP_CLI must name the built uiwarp-run and uiwarp"
}

# siw_setup WORKDIR: the namespace, the tap in it, uiwarp1 on the tap, a state dir of our own.
siw_setup() {
  SW=$1
  mkdir -p "$SW"
  NS=uwsiw$$
  state_dir "$SW/state"
  ip netns add "$NS"
  ip -n "$NS" link set lo up
  ip -n "$NS" tuntap add dev siwtap0 mode tap
  ip -n "$NS" addr add $HOST/24 dev siwtap0
  ip -n "$NS" link set siwtap0 up
  ip netns exec "$NS" "$UIWARP_CLI" link add uiwarp1 netdev siwtap0 >/dev/null
  trap siw_teardown EXIT
}

siw_teardown() {
  siw_halt || true
  uiwarpd_stop
  ip netns pids "$NS" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
  ip netns del "$NS" 2>/dev/null || true
}

# uiwarp_policy KEY=VALUE...: the uiwarpd policy for the next connections (see
# cm/daemon/config.hpp); stops our daemon (uiwarpd_stop) so that the next one reads it. Always with
# first-fpdu-delay-ms (SIW_FIRST_FPDU_DELAY_MS, default 50; 0 to see siw's start-up race):
# as initiator, uiwarp then sends its first FPDU 50 ms after siw's MPA Reply, by when siw
# reads its socket (README.md).
uiwarp_policy() {
  echo "first-fpdu-delay-ms = ${SIW_FIRST_FPDU_DELAY_MS:-50}" >"$SW/uiwarpd.conf"
  local kv
  for kv in "$@"; do echo "${kv%%=*} = ${kv#*=}" >>"$SW/uiwarpd.conf"; done
  export UIWARPD_CONFIG=$SW/uiwarpd.conf
  uiwarpd_stop
}

# h TIMEOUT CMD...: CMD over uiwarp on the host side of the tap.
h() {
  local to=$1
  shift
  timeout "$to" ip netns exec "$NS" "$UIWARP_RUN" "$@"
}

# siw_boot VARIANT [PCAP]: boots the guest with siw-VARIANT loaded (stock, crc, gso, p2p), the
# serial console on a fifo we write commands to, and optionally qemu's filter-dump of every frame
# on the tap into PCAP (both directions, from the first byte of every connection). vnet_hdr=off:
# filter-dump would otherwise write the virtio-net header in front of each frame, and the guest
# would hand TSO super-segments to the tap; without it the frames are the MTU-sized ones of a wire.
siw_boot() {
  local variant=$1 pcap=${2:-} initrd=$SIW_CACHE/initrd.cpio.gz
  SIW_VARIANT=$variant SIW_PCAP=$pcap
  ((++BOOTS))
  # One capture file per boot (qemu starts its file afresh); capture_check reads them all.
  [[ -z $pcap ]] || pcap=${pcap%.pcap}.$BOOTS.pcap
  if [[ $variant != stock ]]; then
    # The variant's siw-VARIANT.ko as a second cpio appended to the initramfs (the kernel
    # unpacks concatenated archives in order).
    local v=$SW/initrd-$variant
    rm -rf "$v.d" && mkdir -p "$v.d/lib/modules/$(cut -d' ' -f1 "$SIW_CACHE/key")/updates"
    cp "$SIW_CACHE/siw-$variant.ko" "$v.d/lib/modules/$(cut -d' ' -f1 "$SIW_CACHE/key")/updates/"
    { cat "$initrd"; (cd "$v.d" && find . | cpio -o -H newc --quiet | gzip -1); } >"$v.cpio.gz"
    initrd=$v.cpio.gz
  fi
  if [[ -n ${SIW_EXTRA_INITRD:-} ]]; then
    # More files for the guest (guest_uiwarp_cpio): appended the same way.
    cat "$initrd" "$SIW_EXTRA_INITRD" >"$SW/initrd-extra.cpio.gz"
    initrd=$SW/initrd-extra.cpio.gz
  fi
  CON=$SW/console
  rm -f "$CON.in" "$SW/qemu.pid"
  : >"$CON.log"
  mkfifo "$CON.in"
  # Keeps the fifo's write end open between our writes, so the guest never reads EOF.
  sleep infinity >"$CON.in" &
  HOLDER=$!
  local t=$SECONDS
  # /dev/kvm on these machines is kvm-pvm, which runs only PVM-aware guests: TCG (docs/interop-siw.md).
  # shellcheck disable=SC2086
  ip netns exec "$NS" qemu-system-x86_64 ${SIW_ACCEL:--accel tcg,thread=multi -cpu max} -m 1024 -smp 2 \
    -display none -monitor none -serial stdio -no-reboot -pidfile "$SW/qemu.pid" \
    -kernel "$SIW_CACHE/vmlinuz" -initrd "$initrd" \
    -append "console=ttyS0 quiet loglevel=3 panic=-1 siwvariant=$variant" \
    -netdev tap,id=n0,ifname=siwtap0,script=no,downscript=no,vnet_hdr=off -device virtio-net-pci,netdev=n0,romfile= \
    ${pcap:+-object filter-dump,id=f0,netdev=n0,file=$pcap} <"$CON.in" >"$CON.log" 2>&1 &
  QEMU=$!
  con_wait "^SIW-READY" 120 || { tail -n 20 "$CON.log"; die "the guest did not come up"; }
  grep -q SIW-FAILED "$CON.log" && { tail -n 20 "$CON.log"; die "siw did not come up in the guest"; }
  log "guest up with siw ($variant) in $((SECONDS - t)) s"
}

# A fresh guest with the same siw, for after siw's start-up race has wedged the old one.
siw_reboot() {
  log "rebooting the guest"
  siw_halt
  siw_boot "$SIW_VARIANT" "$SIW_PCAP"
}

# siw_wedged: whether the guest shows siw's passive-side start-up race (README.md): the iw_cm
# BUG() that follows when the stalled connection is torn down.
siw_wedged() { tr -d '\r' <"$CON.log" | grep -q "kernel BUG at drivers/infiniband/core/iwcm.c"; }

siw_halt() {
  [[ -n ${QEMU:-} ]] || return 0
  # Only to a qemu that still runs: opening the fifo for writing waits for a reader, and one
  # whose guest never came up (a kernel panic at boot under a starved TCG) has none left.
  if kill -0 "$QEMU" 2>/dev/null; then
    timeout 5 sh -c 'echo "poweroff -f" >"$1"' sh "$CON.in" 2>/dev/null || true
  fi
  local i
  for i in $(seq 50); do kill -0 "$QEMU" 2>/dev/null || break; sleep 0.2; done
  kill "$QEMU" 2>/dev/null || true
  wait "$QEMU" 2>/dev/null || true
  kill "$HOLDER" 2>/dev/null || true
  QEMU=
}

# con_wait REGEX SECONDS: waits for a console line matching REGEX (the guest's serial output
# has CR LF line ends).
con_wait() {
  local end=$((SECONDS + $2))
  while ((SECONDS < end)); do
    tr -d '\r' <"$CON.log" | grep -qE "$1" && return 0
    kill -0 "$QEMU" 2>/dev/null || return 1
    sleep 0.2
  done
  return 1
}

# g TIMEOUT CMD: runs the shell line CMD in the guest; prints its output, returns its status
# (124 if it did not finish within TIMEOUT seconds). The guest's shell never blocks on CMD: it
# runs it in the background and polls, killing it at the deadline, so a program stuck in the
# kernel (siw) cannot take the console with it.
g() {
  local to=$1 id
  shift
  # Unique even when g runs in a subshell (a pipeline), where a counter would not advance.
  id=$(date +%s%N)
  echo "echo @@B$id; ( $* ) >/tmp/g.out 2>&1 & p=\$!; $(gpoll "$to" '$p') cat /tmp/g.out; echo @@E$id rc=\$r" >"$CON.in"
  con_wait "^@@E$id rc=[0-9]+$" "$((to + 15))" || { echo "(the guest did not answer: $*)"; return 124; }
  tr -d '\r' <"$CON.log" | sed -n "/^@@B$id\$/,/^@@E$id rc=/p" | sed '1d;$d'
  return "$(tr -d '\r' <"$CON.log" | sed -n "s/^@@E$id rc=\([0-9]*\)$/\1/p")"
}

# gpoll TIMEOUT PID: guest shell code that waits for the background job PID up to TIMEOUT s and
# leaves its exit status in r. When it overstays: r=124, the kernel stacks of the RDMA programs
# (which show where siw holds them) and the end of the kernel log are printed, and they are killed.
gpoll() {
  echo "i=0; while kill -0 $2 2>/dev/null && [ \$i -lt $(($1 * 5)) ]; do sleep 0.2; i=\$((i+1)); done;" \
    "if kill -0 $2 2>/dev/null; then echo \"(timed out after $1 s)\";" \
    "for d in /proc/[0-9]*; do case \"\$(cat \$d/comm 2>/dev/null)\" in rping|ib_*|iperf3)" \
    "echo \"\$d \$(cat \$d/comm) kernel stack:\"; cat \$d/stack; kill -9 \${d#/proc/};; esac; done;" \
    "dmesg | tail -n 15; kill -9 $2; r=124; else wait $2; r=\$?; fi;"
}

# gbg NAME CMD: starts CMD in the guest in the background (output in the guest's /tmp/NAME.log).
gbg() {
  local name=$1
  shift
  echo "( $* ) >/tmp/$name.log 2>&1 & echo \$! >/tmp/$name.pid" >"$CON.in"
}

# gwait NAME TIMEOUT: waits for the background job NAME; prints its output, returns its status.
gwait() {
  local id
  id=$(date +%s%N)
  echo "echo @@B$id; p=\$(cat /tmp/$1.pid); $(gpoll "$2" '$p') cat /tmp/$1.log; echo @@E$id rc=\$r" >"$CON.in"
  con_wait "^@@E$id rc=[0-9]+$" "$(($2 + 15))" || { echo "(the guest did not answer)"; return 124; }
  tr -d '\r' <"$CON.log" | sed -n "/^@@B$id\$/,/^@@E$id rc=/p" | sed '1d;$d'
  return "$(tr -d '\r' <"$CON.log" | sed -n "s/^@@E$id rc=\([0-9]*\)$/\1/p")"
}

# Waits until a TCP port listens: in the guest (its /proc/net/tcp, state 0A) or on the host
# side of the tap (ss in our namespace). Listening is what makes the other side's connect safe.
guest_listening() {
  local hex
  hex=$(printf ':%04X ' "$1")
  g 60 "i=0; until grep -q '$hex.* 0A ' /proc/net/tcp; do i=\$((i+1)); [ \$i -lt 200 ] || exit 1; sleep 0.2; done" >/dev/null
}
host_listening() { wait_listen -n "$NS" -t 40 "$1"; }

# guest_uiwarp_cpio BUILD-DIR OUT: a cpio (gzip) that puts uiwarp, as `cmake --install` lays it
# out under /usr/local, into the guest, with the shared libraries it needs that the guest's
# root lacks (ISA-L, libsystemd and its own), and sockperf for a TCP ping-pong when the host has
# it (scripts/bench-siw requires it; ci.sh does not use it). Append it with
# SIW_EXTRA_INITRD=OUT before siw_boot.
guest_uiwarp_cpio() {
  local b=$1 out=$2 st=$SW/guest-uiwarp have f lib
  rm -rf "$st"
  DESTDIR=$st cmake --install "$b" >/dev/null || die "cmake --install $b failed"
  rm -rf "$st/usr/local/share" "$st/usr/local/include"
  find "$st" -type f \( -perm -u+x -o -name '*.so' \) -exec strip --strip-debug {} +
  mkdir -p "$st/usr/bin"
  if command -v sockperf >/dev/null; then cp "$(command -v sockperf)" "$st/usr/bin/"; fi
  have=$(gzip -dc "$SIW_CACHE/initrd.cpio.gz" | cpio -t --quiet 2>/dev/null | sed 's#^#/#')
  for f in $(find "$st" -type f -perm -u+x) "$st"/usr/local/lib/*/*.so; do
    for lib in $(ldd "$f" 2>/dev/null | awk '$3 ~ /^\// {print $3}'); do
      # The host's /lib is /usr/lib (merged /usr); the guest's root keeps the packages' paths.
      grep -qx -e "$lib" -e "/usr$lib" -e "${lib#/usr}" <<<"$have" && continue
      mkdir -p "$st/usr/lib/x86_64-linux-gnu"
      cp -L "$lib" "$st/usr/lib/x86_64-linux-gnu/"
    done
  done
  (cd "$st" && find . | cpio -o -H newc --quiet | gzip -1) >"$out"
}

# Guest shell words that run the command after them as nobody (uid 65534, build-guest.sh's
# /etc/passwd), keeping the environment: a user without CAP_SYS_PTRACE, which Yama's
# ptrace_scope restricts (it never restricts root). Busybox has su, not setuidgid or chpst; the
# "--" keeps su from taking the command's options (-R) for its own.
GUEST_AS_NOBODY="su -s /bin/sh -c 'exec \"\$@\"' -- nobody sh"
# The guest's Yama knob (Debian's kernel has Yama; its default is 0).
GUEST_YAMA=/proc/sys/kernel/yama/ptrace_scope

# guest_samehost_paths STATE-DIR: the closed connections of the guest's uiwarpd of nobody's
# STATE-DIR (`uiwarp conn show --closed`, newest first), one line each as "KEY<TAB>PATH": KEY
# is the line up to " ended " (addresses, pid, program, QP: unique per connection), PATH what
# follows "; path " (the provider's words: "same-host (granted)", "tcp: why"), or "-" while the
# provider had not named one. Nothing if that uiwarpd never ran.
guest_samehost_paths() {
  local out line
  out=$(g 30 "UIWARP_STATE_DIR=$1 $GUEST_AS_NOBODY /usr/local/bin/uiwarp conn show --closed") || return 0
  while IFS= read -r line; do
    [[ $line == "  "*" ended "* ]] || continue
    if [[ $line == *"; path "* ]]; then
      printf '%s\t%s\n' "${line%% ended *}" "${line#*; path }"
    else
      printf '%s\t-\n' "${line%% ended *}"
    fi
  done <<<"$out"
}
