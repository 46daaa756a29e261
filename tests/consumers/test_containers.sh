#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# test_containers.sh: uiwarp where no kernel module can be loaded and nothing is privileged.
#  1. unshare: an unprivileged user (nobody, when started as root) in a new user and network
#     namespace (unshare -Urn), with every capability dropped afterwards (noroot securebits, empty
#     bounding set) and ulimit -l 0: uiwarp-run ibv_devinfo, rping and ib_write_bw -R on lo.
#  2. podman: the same in a rootless container (podman run --rootfs, no image registry) on a
#     root filesystem made here by copying the programs and their libraries and installing uiwarp
#     (cmake --install) into it; --cap-drop all, --network none, --ulimit memlock=0, and no
#     --privileged, --cap-add or --device. Skipped where podman is not installed.
source "$(dirname "$0")/lib.sh"
need ibverbs-utils ibv_devinfo
need rdmacm-utils rping
need perftest ib_write_bw
need util-linux unshare setpriv
BUILD=$(cd "$(dirname "$RUN")/.." && pwd)

# The workload, the same in both: prints one marker line per program that did its job.
cat >"$T/workload.sh" <<'EOF'
#!/bin/sh
# workload.sh UIWARP-RUN: the programs of the container test, on lo, one marker per success.
run=$1
# listening PORT: a socket of this network namespace listens on PORT (state 0A), within 10 s.
listening() {
  hex=$(printf ':%04X ' "$1") i=0
  until grep -q "^ *[0-9]*: [0-9A-F]*$hex[0-9A-F:]* 0A " /proc/net/tcp; do
    i=$((i + 1)); [ $i -lt 100 ] || return 1; sleep 0.1
  done
}
echo "caps $(grep CapEff /proc/self/status | tr -d '\t') memlock $(ulimit -l) uid $(id -u)"
$run ibv_devinfo >/tmp/devinfo 2>&1 && grep -q "PORT_ACTIVE" /tmp/devinfo &&
  grep -q "transport:.*iWARP" /tmp/devinfo && echo "OK ibv_devinfo"
$run rping -s -a 127.0.0.1 -p 7781 -C 20 -v >/tmp/rping.s 2>&1 &
listening 7781
$run rping -c -a 127.0.0.1 -p 7781 -C 20 -v >/tmp/rping.c 2>&1
rc=$?
# rping 44's own exit race (rping_lost_exit_race in scripts/lib/common.sh; rdma-core PR #1622).
[ $rc = 255 ] && grep -q 'DISCONNECT EVENT' /tmp/rping.c &&
  [ "$(grep -v '^ping data' /tmp/rping.c | tail -n 1)" = "rdma_get_cm_event: Bad file descriptor" ] &&
  rc=0
[ $rc = 0 ] && [ "$(grep -c '^ping data' /tmp/rping.c)" = 20 ] && echo "OK rping"
wait
$run ib_write_bw -R -p 7782 -n 200 >/tmp/bw.s 2>&1 &
listening 7782
$run ib_write_bw -R -p 7782 -n 200 127.0.0.1 >/tmp/bw.c 2>&1 && grep -qE '^ 65536 +200 ' /tmp/bw.c &&
  echo "OK ib_write_bw $(awk '$1 == 65536 { print $4 " MB/s" }' /tmp/bw.c)"
wait
cat /tmp/rping.c /tmp/bw.c | tail -n 5 >&2
EOF
chmod 755 "$T/workload.sh"

# As nobody when started as root (the build tree must be readable by it), else as ourselves.
as_user=()
if [[ $(id -u) == 0 ]]; then
  as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups env -u XDG_RUNTIME_DIR HOME=/)
  for f in "$RUN" "$BUILD/providers/uiwarp/libuiwarp-rdmav34.so"; do
    "${as_user[@]}" test -r "$f" || { echo "skipped: $f is not readable by uid 65534"; exit 77; }
  done
  chmod 755 "$T"
fi
expect_workload() {
  local what=$1 out=$2
  expect_match "$what: no capabilities, memlock 0" "^caps CapEff:0+ memlock 0 uid 0" \
    "$(grep '^caps' "$out")"
  check "$what: uiwarp-run ibv_devinfo (uiwarp0, iWARP, PORT_ACTIVE)" grep -q "^OK ibv_devinfo" "$out"
  check "$what: rping, 20 pings verified" grep -q "^OK rping" "$out"
  check "$what: ib_write_bw -R" grep -q "^OK ib_write_bw" "$out"
  ((FAIL == 0)) || cat "$out"
  sed -n "s/^OK ib_write_bw /note - $what: ib_write_bw -R 64 KiB: /p" "$out"
}

# 1. unshare -Urn as an unprivileged user.
if ! "${as_user[@]}" unshare -Urn true 2>/dev/null; then
  echo "note - unshare -Urn is not allowed here (unprivileged user namespaces off)"
else
  state=$T/unshare-state
  mkdir -p "$state" && [[ -z ${as_user[*]} ]] || chown 65534:65534 "$state"
  "${as_user[@]}" unshare -Urn sh -c '
    ip link set lo up || exit 1
    ulimit -l 0
    exec setpriv --securebits +noroot,+noroot_locked,+keep_caps_locked --bounding-set -all \
      --inh-caps -all --ambient-caps -all env UIWARP_STATE_DIR="$1" "$2" "$3"' \
    sh "$state" "$T/workload.sh" "$RUN" >"$T/unshare.out" 2>&1
  expect_workload "unshare -Urn" "$T/unshare.out"
fi

# 2. Rootless podman with a root filesystem made here.
if ! command -v podman >/dev/null; then
  echo "note - podman is not installed: the rootless container case is skipped"
  finish
fi
R=$T/rootfs
mkdir -p "$R"/{etc/libibverbs.d,tmp,proc,sys,dev,run}
copy() {
  local f
  for f in "$@"; do
    [[ -e $R$f ]] && continue
    mkdir -p "$R$(dirname "$f")"
    cp -L "$f" "$R$f"
  done
}
DESTDIR=$R cmake --install "$BUILD" >/dev/null
for p in /bin/sh /bin/grep /bin/sleep /bin/cat /bin/tail /usr/bin/tr /usr/bin/id /usr/bin/awk /usr/bin/env \
  /usr/bin/ibv_devinfo /usr/bin/rping /usr/bin/ib_write_bw $(find "$R/usr" -type f -perm -u+x) \
  "$R"/usr/local/lib/*/*.so; do
  [[ $p == "$R"/* ]] || copy "$(readlink -f "$p")" "$p"
  for l in $(ldd "$p" 2>/dev/null | grep -oE '/[^ ]+' | grep -v "^$BUILD"); do copy "$l"; done
done
copy /lib64/ld-linux-x86-64.so.2 /etc/passwd /etc/group
cp "$T/workload.sh" "$R/workload.sh"
touch "$R"/etc/{hosts,hostname,resolv.conf} "$R/run/.containerenv"
ln -s ../proc/self/mounts "$R/etc/mtab"
[[ -z ${as_user[*]} ]] || chown -R 65534:65534 "$R"
home=$T/podman-home
mkdir -p "$home"
[[ -z ${as_user[*]} ]] || chown 65534:65534 "$home"
# A rootless podman's own state under $home; cgroupfs and runc, which also work on hosts with
# cgroup v1 controllers mounted (crun refuses those "hybrid" hosts).
podman=(podman --root "$home/storage" --runroot "$home/run" --cgroup-manager cgroupfs)
command -v runc >/dev/null && podman+=(--runtime runc)
timeout 300 "${as_user[@]}" env XDG_RUNTIME_DIR="$home/xdg" XDG_CONFIG_HOME="$home/config" \
  HOME="$home" "${podman[@]}" run --rm --network none --cap-drop all --read-only --tmpfs /tmp \
  --ulimit memlock=0:0 --security-opt no-new-privileges -e UIWARP_STATE_DIR=/tmp/uiwarp \
  --rootfs "$R" /workload.sh /usr/local/bin/uiwarp-run >"$T/podman.out" 2>&1
grep -v 'level=warning' "$T/podman.out" >"$T/podman.clean"
if grep -qE '^Error: ' "$T/podman.clean"; then
  echo "note - podman cannot run a rootless container here: $(grep -m1 '^Error: ' "$T/podman.clean")"
else
  expect_workload "podman run --rootfs (rootless)" "$T/podman.clean"
fi
finish
