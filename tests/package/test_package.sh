#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# test_package.sh SOURCE_DIR: the Debian packages, end to end.
#  1. Builds them from the source tree's files (tracked and untracked, not ignored: what a clean
#     checkout plus the work in progress has) with `dpkg-buildpackage -us -uc -b`, without the
#     test suite (nocheck), and checks them with lintian (no errors).
#  2. Installs them with `dpkg -i` into a throw-away root: a private mount, PID and network
#     namespace in which /usr, /etc and /var are overlays and /run and /tmp are empty, so that
#     what dpkg writes is seen only there, and the source and build trees are hidden.
#  3. There, as uid 65534 and with only the installed files, runs `uiwarp-run ibv_devinfo` and
#     `uiwarp-run rping` (server and client, loopback): first with the per-user uiwarpd that
#     uiwarp-run starts, then with the system-wide one, run the way uiwarpd.socket runs it; then
#     a package upgrade under a listening rping -s -P (dpkg -i again, the service restarted);
#     and the package's autopkgtest, debian/tests/demo.
# Exit 77 (skipped) when not root or the tools are missing (scripts/deps installs them).
set -u
SRC=$(cd "${1:?usage: test_package.sh SOURCE_DIR}" && pwd)
source "$SRC/scripts/lib/common.sh"
test_init

[[ $(id -u) == 0 ]] || skip "needs root (mount namespaces, dpkg -i)"
for c in dpkg-buildpackage dh lintian unshare setpriv systemd-socket-activate ibv_devinfo rping \
  python3 ip; do
  command -v "$c" >/dev/null || skip "$c not found (scripts/deps installs it)"
done
unshare --mount --pid --fork --net true 2>/dev/null || skip "cannot create namespaces here"

# ---- 1. Build ---------------------------------------------------------------------------------
mkdir "$T/src"
if git -C "$SRC" rev-parse --git-dir >/dev/null 2>&1; then
  (cd "$SRC" && git ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' f; do [[ -e $f || -L $f ]] && printf '%s\0' "$f"; done |
    tar --null -T - -cf -) | tar -C "$T/src" -xf -
else
  tar -C "$SRC" --exclude='./build*' --exclude='./obj-*' -cf - . | tar -C "$T/src" -xf -
fi
start=$SECONDS
(cd "$T/src" && DEB_BUILD_OPTIONS="nocheck parallel=$(nproc)" \
  dpkg-buildpackage -us -uc -b -Pnocheck) >"$T/build.log" 2>&1
rc=$?
echo "dpkg-buildpackage: exit $rc after $((SECONDS - start)) s"
if ((rc != 0)); then
  tail -n 40 "$T/build.log"
  bad "dpkg-buildpackage -us -uc -b"
  finish
fi
ok "dpkg-buildpackage -us -uc -b"
ver=$(dpkg-parsechangelog -l "$T/src/debian/changelog" -S Version)
arch=$(dpkg-architecture -qDEB_HOST_ARCH)
debs=("$T/ibverbs-provider-uiwarp_${ver}_$arch.deb" "$T/uiwarp_${ver}_$arch.deb")
for d in "${debs[@]}"; do check "built $(basename "$d")" test -f "$d"; done

# Lintian on the .changes (both packages and the .buildinfo). Warnings are listed and explained in
# debian/README.source.
lintian --fail-on error --tag-display-limit 0 "$T/uiwarp_${ver}_$arch.changes" >"$T/lintian.log" 2>&1
rc=$?
sed 's/^/  lintian: /' "$T/lintian.log"
expect_eq "lintian: no errors" "0" "$rc"

# The private provider ABI of this system's libibverbs (its IBVERBS_PRIVATE_<n> version node),
# read here without the build's help: the provider must be named for it, and the package's
# libibverbs1 bounds must admit the installed libibverbs1 and end at a later release.
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
pabi=$(grep -aoE 'IBVERBS_PRIVATE_[0-9]+' "/usr/lib/$multiarch/libibverbs.so.1" | sort -u)
pabi=${pabi#IBVERBS_PRIVATE_}
echo "libibverbs.so.1: IBVERBS_PRIVATE_$pabi"
expect_match "the provider is libuiwarp-rdmav$pabi.so" "/libibverbs/libuiwarp-rdmav$pabi\.so\$" \
  "$(dpkg-deb -c "${debs[0]}" | awk '{print $NF}' | grep rdmav)"
provider_deps=$(dpkg-deb -f "${debs[0]}" Depends)
echo "ibverbs-provider-uiwarp Depends: $provider_deps"
installed=$(dpkg-query -W -f='${Version}' "libibverbs1:$(dpkg --print-architecture)")
lower=$(grep -oE 'libibverbs1 \(>= [^)]+\)' <<<"$provider_deps" | sed 's/.*>= //; s/)//' | head -n 1)
upper=$(grep -oE 'libibverbs1 \(<< [^)]+\)' <<<"$provider_deps" | sed 's/.*<< //; s/)//' | head -n 1)
check "a lower bound ($lower) the installed libibverbs1 $installed meets" \
  dpkg --compare-versions "$installed" ge "${lower:-none}"
check "an upper bound ($upper) above the installed libibverbs1 $installed" \
  dpkg --compare-versions "$installed" lt "${upper:-0}"
check "... that is a later rdma-core release" test -n "$upper" -a "${upper%%[.~]*}" -gt "${installed%%.*}"
rm -rf "$T/src" # the installed files only, from here on

# ---- 2. and 3. Install and use, inside the namespaces ------------------------------------------
cat >"$T/inside.sh" <<'INSIDE'
set -u
SRC=$2
PABI=$3  # the private provider ABI of this system's libibverbs
UPPER=$4 # the first libibverbs1 version the provider package refuses
source "$SRC/scripts/lib/common.sh" # ok/bad/check/expect_*/finish
exec >"$1/inside.log" 2>&1
mount --make-rprivate /
mount -t tmpfs -o mode=755 tmpfs /run
mkdir -p /run/pkgtest/t /run/pkgtest/ov
mount --bind "$1" /run/pkgtest/t
TT=/run/pkgtest/t
for d in usr etc var lib lib64 bin sbin; do
  [[ -d /$d && ! -L /$d ]] || continue  # merged-/usr symlinks follow /usr
  mkdir -p "/run/pkgtest/ov/$d.up" "/run/pkgtest/ov/$d.work"
  mount -t overlay overlay \
    -o "lowerdir=/$d,upperdir=/run/pkgtest/ov/$d.up,workdir=/run/pkgtest/ov/$d.work" "/$d" ||
    { bad "overlay on /$d"; finish; }
done
# The package's autopkgtest, kept before the source tree is hidden (run below).
cp "$SRC/debian/tests/demo" "$TT/autopkgtest-demo"
# Hide the source tree and anything under /tmp (build trees, other tests' state).
mount -t tmpfs -o mode=755,ro tmpfs "$SRC"
mount -t tmpfs -o mode=1777 tmpfs /tmp
cd /
P=$TT
ip link set lo up
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
as_nobody() {
  setpriv --reuid=65534 --regid=65534 --clear-groups \
    env -i PATH=/usr/bin:/bin HOME=/nonexistent LANG=C.UTF-8 "$@"
}
check "the source tree is hidden" test ! -e "$SRC/CMakeLists.txt"

# A root with uiwarp already installed is made fresh (in the overlay only).
dpkg --purge uiwarp ibverbs-provider-uiwarp >/dev/null 2>&1
check "no uiwarp-run before the install" test ! -e /usr/bin/uiwarp-run
check "dpkg -i the two packages" dpkg -i "$P"/ibverbs-provider-uiwarp_*.deb "$P"/uiwarp_*.deb
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
check "provider in libibverbs' provider dir" \
  test -f "/usr/lib/$multiarch/libibverbs/libuiwarp-rdmav$PABI.so"
expect_eq "driver file" "driver uiwarp" "$(cat /etc/libibverbs.d/uiwarp.driver)"
expect_match "uiwarpd.conf is a conffile" "/etc/uiwarp/uiwarpd.conf [0-9a-f]{32}" \
  "$(dpkg-query -W -f='${Conffiles}' uiwarp)"
check "uiwarpd.socket enabled" test -L /etc/systemd/system/sockets.target.wants/uiwarpd.socket
for m in uiwarp-run.1 uiwarpd.conf.5 uiwarp.7 uiwarp.8 uiwarpd.8; do
  check "man page $m" test -f "/usr/share/man/man${m##*.}/$m.gz"
done
# /lib/systemd/system on Debian 12, /usr/lib/systemd/system from Debian 13 on.
unitdir=$(dirname "$(dpkg -L uiwarp | grep '/uiwarpd\.socket$')")
check "the units where systemd looks ($unitdir)" \
  test "$unitdir" = "$(pkg-config --variable=systemdsystemunitdir systemd 2>/dev/null || echo "$unitdir")"
if command -v systemd-analyze >/dev/null; then
  check "systemd-analyze verify the units" \
    systemd-analyze verify "$unitdir/uiwarpd.socket" "$unitdir/uiwarpd.service"
fi

# apt refuses a libibverbs1 the provider was not built for while the provider is installed: a
# libibverbs1 of the first release past its bounds (a stand-in, control file only) would remove
# the provider.
mkdir -p "$TT/fake/DEBIAN"
cat >"$TT/fake/DEBIAN/control" <<CTL
Package: libibverbs1
Version: ${UPPER%\~}.0-1
Architecture: $(dpkg --print-architecture)
Multi-Arch: same
Maintainer: test <test@localhost>
Description: stand-in for the libibverbs1 of a later rdma-core release
CTL
dpkg-deb --build "$TT/fake" "$TT/libibverbs1_next.deb" >/dev/null
apt_out=$(apt-get install -s -o Debug::NoLocking=1 "$TT/libibverbs1_next.deb" 2>&1)
expect_match "apt: libibverbs1 ${UPPER%\~}.0-1 removes ibverbs-provider-uiwarp" \
  "Remv ibverbs-provider-uiwarp" "$apt_out"

# --- per-user daemon (no system socket) ---
out=$(as_nobody UIWARP_DEBUG=1 /usr/bin/uiwarp-run ibv_devinfo 2>&1)
echo "$out"
expect_match "ibv_devinfo (as nobody): uiwarp0" "hca_id:[[:space:]]+uiwarp0" "$out"
expect_match "ibv_devinfo: iWARP transport" "transport:[[:space:]]+iWARP" "$out"
expect_match "ibv_devinfo: port active" "PORT_ACTIVE" "$out"
expect_match "uiwarp-run used the installed files" "uiwarp-run: installed files" "$out"
expect_match "uiwarp-run started a per-user uiwarpd" "uiwarpd /tmp/uiwarp-65534/.*per-user" "$out"
check "the per-user uiwarpd runs as nobody" pgrep -u 65534 -f "^/usr/sbin/uiwarpd --socket"

rping_pair() { # NAME PORT: rping server and client as nobody, -C 10 -v, loopback
  as_nobody timeout 60 /usr/bin/uiwarp-run rping -s -a 127.0.0.1 -p "$2" -C 10 -v \
    >"$TT/$1.server" 2>&1 &
  local spid=$!
  wait_listen "$2"
  as_nobody timeout 60 /usr/bin/uiwarp-run rping -c -a 127.0.0.1 -p "$2" -C 10 -v \
    >"$TT/$1.client" 2>&1
  local crc=$?
  wait $spid
  local src=$?
  crc=$(rping_exit "$crc" "$TT/$1.client")
  src=$(rping_exit "$src" "$TT/$1.server")
  expect_eq "$1: rping server and client exit 0" "0 0" "$src $crc"
  expect_eq "$1: rping client verified 10 pings" "10" "$(grep -c '^ping data' "$TT/$1.client")"
  expect_eq "$1: rping server verified 10 pings" "10" \
    "$(grep -c '^server ping data' "$TT/$1.server")"
}
# stop_user_daemon: ends nobody's per-user uiwarpd and waits until it is gone.
no_user_daemon() { ! pgrep -u 65534 -f "^/usr/sbin/uiwarpd --socket" >/dev/null; }
stop_user_daemon() {
  pkill -u 65534 -f "^/usr/sbin/uiwarpd --socket" || return 0
  eventually 5 no_user_daemon
}
rping_pair rping-per-user 7174
stop_user_daemon
# debian/tests/demo, as autopkgtest runs it against the installed packages (it becomes nobody).
sh "$TT/autopkgtest-demo" >"$TT/autopkgtest.log" 2>&1
rc=$?
expect_eq "debian/tests/demo (autopkgtest): ibv_devinfo, rping, ib_write_bw -R as nobody" 0 "$rc"
((rc == 0)) || tail -n 20 "$TT/autopkgtest.log"
stop_user_daemon

# --- the system daemon, run as uiwarpd.socket/.service say (systemd-socket-activate stands in
# for systemd: PID 1 here need not be systemd) ---
unit=$unitdir/uiwarpd.socket
sock=$(sed -n 's/^ListenSequentialPacket=//p' "$unit")
mode=$(sed -n 's/^SocketMode=//p' "$unit")
post=$(sed -n 's/^ExecStartPost=//p' "$unit")
exec_start=$(sed -n 's/^ExecStart=//p' "$unitdir/uiwarpd.service")
expect_eq "the socket unit's socket" "/run/uiwarp/uiwarpd.sock" "$sock"
mkdir -m 755 -p "$(dirname "$sock")"
# sd_notify: a datagram socket that records what the daemon says.
python3 - "/run/pkgtest/notify.sock" "$TT/notify.log" <<'PY' &
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1]); os.chmod(sys.argv[1], 0o666)
with open(sys.argv[2], "w") as f:
    f.write(s.recv(4096).decode() + "\n")
PY
eventually 5 test -S /run/pkgtest/notify.sock
# The service's DynamicUser stands as uid 61234.
systemd-socket-activate --seqpacket -l "$sock" -E NOTIFY_SOCKET="/run/pkgtest/notify.sock" \
  setpriv --reuid=61234 --regid=61234 --clear-groups $exec_start >"$TT/uiwarpd.log" 2>&1 &
sapid=$!
eventually 5 test -S "$sock"
chmod "$mode" "$sock"
sh -c "${post//%%/%}"
expect_eq "ExecStartPost wrote this network namespace's inode" \
  "$(stat -L -c %i /proc/self/ns/net)" "$(cat /run/uiwarp/uiwarpd.netns)"
out=$(as_nobody UIWARP_DEBUG=1 /usr/bin/uiwarp-run ibv_devinfo 2>&1)
expect_match "ibv_devinfo with the system daemon" "hca_id:[[:space:]]+uiwarp0" "$out"
expect_match "uiwarp-run chose the system daemon" "uiwarpd /run/uiwarp/uiwarpd.sock: the system" "$out"
eventually 5 test -s "$TT/notify.log"
expect_match "uiwarpd told systemd READY=1" "READY=1" "$(cat "$TT/notify.log")"
check "the system uiwarpd runs as its own user" pgrep -u 61234 -x uiwarpd
rping_pair rping-system 7175
check "no per-user uiwarpd was started" test -z "$(pgrep -u 65534 uiwarpd)"

# --- a package upgrade under a listening program: dpkg -i over the installed packages, then
# the restart systemd does (the socket unit restarted on upgrade stops the service it activated:
# SIGTERM; the next connection to the socket starts the new uiwarpd). The listener's shim
# registers again with the new daemon, and new connections succeed within a second.
as_nobody timeout 120 /usr/bin/uiwarp-run rping -s -P -a 127.0.0.1 -p 7176 -v \
  >"$TT/upgrade.server" 2>&1 &
upspid=$!
wait_listen -t 5 7176
check "dpkg -i again (an upgrade) while a program listens" \
  dpkg -i "$P"/ibverbs-provider-uiwarp_*.deb "$P"/uiwarp_*.deb
old=$(pgrep -u 61234 -x uiwarpd)
kill -TERM "$old" 2>/dev/null
wait "$sapid" 2>/dev/null
rm -f "$sock" # systemd makes the socket anew; so the mode below is set on the new one
systemd-socket-activate --seqpacket -l "$sock" \
  setpriv --reuid=61234 --regid=61234 --clear-groups $exec_start >"$TT/uiwarpd2.log" 2>&1 &
eventually 5 test -S "$sock"
chmod "$mode" "$sock"
check "after the upgrade's restart (uiwarpd $old stopped) the listener is registered again" \
  wait_listed /usr/bin/uiwarp 7176 --socket "$sock"
check "... within a second (${LISTED_MS} ms)" test "$LISTED_MS" -lt 1000
as_nobody timeout 60 /usr/bin/uiwarp-run rping -c -a 127.0.0.1 -p 7176 -C 10 -v \
  >"$TT/upgrade.client" 2>&1
crc=$(rping_exit $? "$TT/upgrade.client")
expect_eq "... and a new client connects to it: exit 0, 10 pings" "0 10" \
  "$crc $(grep -c '^ping data' "$TT/upgrade.client")"
kill "$upspid" 2>/dev/null
wait "$upspid" 2>/dev/null
out=$(unshare --net setpriv --reuid=65534 --regid=65534 --clear-groups \
  env -i PATH=/usr/bin:/bin UIWARP_DEBUG=1 /usr/bin/uiwarp-run true 2>&1)
expect_match "another network namespace gets a per-user daemon" \
  "per-user daemon \(/run/uiwarp/uiwarpd.netns does not name" "$out"
echo "uiwarpd log:"
cat "$TT/uiwarpd.log"
echo "uiwarpd log after the upgrade:"
cat "$TT/uiwarpd2.log"
finish
INSIDE
unshare --mount --pid --fork --mount-proc --net bash "$T/inside.sh" "$T" "$SRC" "$pabi" "$upper"
rc=$?
cat "$T/inside.log"
summary=$(tail -n 1 "$T/inside.log")
if [[ $summary =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
  PASS=$((PASS + BASH_REMATCH[1]))
  FAIL=$((FAIL + BASH_REMATCH[2]))
else
  bad "the installed-root part did not finish (exit $rc)"
fi
((rc == 0)) || [[ $FAIL != 0 ]] || bad "the installed-root part exited $rc"
finish
