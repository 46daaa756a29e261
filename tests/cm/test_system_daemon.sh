#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# The system-wide uiwarpd (uiwarpd.socket): uiwarpd takes its socket from systemd (here
# systemd-socket-activate stands in) and reports READY=1; uiwarp-run picks it only when its
# uiwarpd.netns names this network namespace, and UIWARPD_SOCKET still wins; rping runs over it.
source "$(dirname "$0")/lib.sh"
UIWARPD_BIN=${UIWARPD_BIN:?UIWARPD_BIN must name uiwarpd}
command -v systemd-socket-activate >/dev/null || { echo "SKIP: no systemd-socket-activate"; exit 77; }
sys=$T/sys
sock=$sys/uiwarpd.sock
mkdir -m 755 "$sys"
sapid=
trap 'kill $sapid 2>/dev/null; scratch_cleanup' EXIT
# sd_notify: a datagram socket that records the daemon's first message.
python3 - "$sys/notify" "$T/notify.log" <<'PY' &
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
open(sys.argv[2], "w").write(s.recv(4096).decode() + "\n")
PY
for i in $(seq 50); do [[ -S $sys/notify ]] && break; sleep 0.1; done
systemd-socket-activate --seqpacket -l "$sock" -E NOTIFY_SOCKET="$sys/notify" "$UIWARPD_BIN" \
  >"$T/uiwarpd.log" 2>&1 &
sapid=$!
for i in $(seq 50); do [[ -S $sock ]] && break; sleep 0.1; done
export UIWARP_SYSTEM_SOCKET=$sock
pick() { UIWARP_DEBUG=1 "$RUN" true 2>&1 | sed -n 's/^uiwarp-run: uiwarpd //p'; }

expect_match "no uiwarpd.netns: a per-user daemon" "^$UIWARP_STATE_DIR/.*per-user daemon" "$(pick)"
echo 1 >"$sys/uiwarpd.netns"
expect_match "uiwarpd.netns of another namespace: a per-user daemon" "does not name this network" \
  "$(pick)"
uiwarpd_stop
netns_inode >"$sys/uiwarpd.netns"
expect_eq "this namespace: the system daemon" "$sock: the system daemon (uiwarpd.socket)" "$(pick)"
for i in $(seq 50); do [[ -s $T/notify.log ]] && break; sleep 0.1; done
expect_match "socket-activated uiwarpd sent READY=1" "READY=1" "$(cat "$T/notify.log" 2>/dev/null)"
expect_match "UIWARPD_SOCKET wins" "^$T/mine.sock: UIWARPD_SOCKET" "$(UIWARPD_SOCKET=$T/mine.sock pick)"
expect_match "... unless an outer uiwarp-run set it in another namespace" "^$sock: the system" \
  "$(UIWARPD_SOCKET=$T/mine.sock UIWARPD_SOCKET_NETNS=1 pick)"
expect_match "UIWARP_SYSTEM_SOCKET= turns the system daemon off" "per-user daemon" \
  "$(UIWARP_SYSTEM_SOCKET= pick)"
uiwarpd_stop "$T" # the per-user daemons: of the state dir and of UIWARPD_SOCKET=$T/mine.sock

p=$(free_port)
run_pair rping-system rping -s -a 127.0.0.1 -p "$p" -C 10 -v -- rping -c -a 127.0.0.1 -p "$p" -C 10 -v
expect_eq "rping over the system daemon: 10 pings verified" 10 "$(grep -c '^ping data' "$T/rping-system.client")"
check "no per-user daemon was started" test ! -e "$UIWARP_STATE_DIR/netns-$(netns_inode)/uiwarpd.sock"

# A client from another network namespace is refused (its TCP would be made in ours).
if [[ $(id -u) == 0 ]] && unshare --net true 2>/dev/null; then
  unshare --net python3 -c 'import socket,sys,time
s=socket.socket(socket.AF_UNIX,socket.SOCK_SEQPACKET); s.connect(sys.argv[1]); time.sleep(0.3)' "$sock"
  check "uiwarpd refused a client from another network namespace" \
    eventually 5 grep -q "from another network namespace" "$T/uiwarpd.log"
fi

# The system daemon killed (kill -9) under a listening rping -s -P, then started again as
# systemd would on the next connection to its socket (here: a new systemd-socket-activate on the
# same path). The shim connects again and registers its listener; nobody starts a per-user one.
p=$(free_port)
timeout 60 "$RUN" rping -s -P -a 127.0.0.1 -p "$p" -v >"$T/restart.server" 2>&1 &
rspid=$!
wait_listen "$p"
kill -9 "$sapid" # systemd-socket-activate became uiwarpd (exec) at the first connection
wait "$sapid" 2>/dev/null
sleep 0.3
systemd-socket-activate --seqpacket -l "$sock" "$UIWARPD_BIN" >"$T/uiwarpd2.log" 2>&1 &
sapid=$!
wait_listed "$UIWARP_CLI" "$p" --socket "$sock"
expect_eq "restarted system daemon: rping's listener registered again (${LISTED_MS} ms)" 0 $?
timeout 60 "$RUN" rping -c -a 127.0.0.1 -p "$p" -C 10 -v >"$T/restarted.client" 2>&1
crc=$(rping_exit $? "$T/restarted.client")
expect_eq "... and a new client connects: exit 0, 10 pings" "0 10" \
  "$crc $(grep -c '^ping data' "$T/restarted.client")"
check "... still with no per-user daemon" test ! -e "$UIWARP_STATE_DIR/netns-$(netns_inode)/uiwarpd.sock"

# Two users of the one system daemon: root (user A) holds the listener above and a connection;
# nobody (user B) sees neither in `uiwarp status` / `uiwarp conn show`, and cannot listen on A's
# port. (Sessions refuse another client's Accept, Reject or Unlisten: tests/unit/test_sessions.cpp.)
as_b=(setpriv --reuid=65534 --regid=65534 --clear-groups env -u UIWARP_STATE_DIR -u XDG_RUNTIME_DIR
  HOME=/ UIWARP_SYSTEM_SOCKET="$sock")
if [[ $(id -u) == 0 ]] && command -v setpriv >/dev/null &&
  "${as_b[@]}" test -x "$RUN" -a -r "$UIWARP_CLI"; then
  chmod 755 "$T" && chmod 666 "$sock" # the socket reachable by B (systemd: SocketMode=0666)
  q=$(free_port)
  timeout 60 "$RUN" rping -s -a 127.0.0.1 -p "$q" -C 100000 >"$T/a.server" 2>&1 &
  aspid=$!
  wait_listen "$q"
  timeout 60 "$RUN" rping -c -a 127.0.0.1 -p "$q" -C 100000 >"$T/a.client" 2>&1 &
  acpid=$!
  a_connected() { "$UIWARP_CLI" status --socket "$sock" 2>&1 | grep -q "connections: [1-9]"; }
  eventually 10 a_connected
  a_view=$("$UIWARP_CLI" status --socket "$sock" 2>&1)
  b_view=$("${as_b[@]}" "$UIWARP_CLI" status --socket "$sock" 2>&1)
  expect_match "user A (root) sees its listener in uiwarp status" "127\.0\.0\.1:$p pid" "$a_view"
  expect_match "... and its connections" "connections: [1-9]" "$a_view"
  expect_match "user B (nobody) sees no listener of A's" "listeners: 0" "$b_view"
  expect_match "... and no connection of A's" "connections: 0" "$b_view"
  expect_eq "user B's uiwarp conn show lists nothing of A's" "connections: 0" \
    "$("${as_b[@]}" "$UIWARP_CLI" conn show --socket "$sock" 2>&1 | head -n 1)"
  "${as_b[@]}" timeout 20 "$RUN" rping -s -a 127.0.0.1 -p "$p" >"$T/b.server" 2>&1
  brc=$?
  check "user B cannot listen on the port A's listener holds (rping -s exit $brc)" \
    test "$brc" -ne 0 -a "$brc" -ne 124
  check "... the error says the address is in use" grep -qi "address already in use" "$T/b.server"
  timeout 30 "$RUN" rping -c -a 127.0.0.1 -p "$p" -C 3 -v >"$T/a.again" 2>&1
  expect_eq "A's listener still takes connections" 3 "$(grep -c '^ping data' "$T/a.again")"
  kill "$acpid" "$aspid" 2>/dev/null
  wait "$acpid" "$aspid" 2>/dev/null
else
  echo "# two-user checks skipped: need root, setpriv and a build tree nobody can read"
fi
kill "$rspid" 2>/dev/null
wait "$rspid" 2>/dev/null
finish
