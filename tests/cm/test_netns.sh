#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# Two test hosts: network namespaces joined by a veth pair, each with its own uiwarp device
# (uiwarp link add) and its own uiwarpd. Stock rping and perftest across them; no same-host path
# between them (the peer's address is another host's), the same-host path within one of them
# over its veth address, and TCP with the reason when the server has a pid namespace of its own;
# then one side is killed (kill -9) mid-transfer: the other side's work requests flush, its CM
# sees DISCONNECTED, and its uiwarpd keeps serving.
source "$(dirname "$0")/lib.sh"
two_hosts 10.231.7
UIWARP=$UIWARP_CLI
A=$HOST_A B=$HOST_B
SRV=$IP_B
# pair NAME SERVER_ARGS... -- CLIENT_ARGS...: run_pair with the server in B, the client in A.
pair() { PAIR_SERVER_NS=$B PAIR_CLIENT_NS=$A PAIR_LABEL=" across namespaces" run_pair "$@"; }
pair rping rping -s -a $SRV -p 7001 -C 1000 -S 65535 -v -- rping -c -a $SRV -p 7001 -C 1000 -S 65535 -v
expect_eq "rping verified 1000 pings across namespaces" 1000 "$(grep -c '^ping data' "$T/rping.client")"
pair rdma_server rdma_server -p 7005 -- rdma_client -s $SRV -p 7005
check "rdma_client: end 0 across namespaces" grep -q "rdma_client: end 0" "$T/rdma_server.client"
pair ucmatose ucmatose -p 7006 -- ucmatose -s $SRV -p 7006
check "ucmatose: test complete across namespaces" grep -q "test complete" "$T/ucmatose.client"
port=7010
for t in ib_write_bw ib_read_bw ib_send_bw ib_write_lat ib_read_lat ib_send_lat; do
  port=$((port + 1))
  pair "$t" "$t" -R -p $port -n 500 -- "$t" -R -p $port -n 500 $SRV
done
pair ib_write_bw-a ib_write_bw -R -a -n 5 -p 7008 -- ib_write_bw -R -a -n 5 -p 7008 $SRV
expect_eq "ib_write_bw -a covers 2 B .. 8 MiB across namespaces" 23 "$(grep -cE '^ *[0-9]+ +5 ' "$T/ib_write_bw-a.client")"
pair ib_read_bw-q8 ib_read_bw -R -q 8 -n 200 -p 7009 -- ib_read_bw -R -q 8 -n 200 -p 7009 $SRV

# The same-host path goes only to a peer on the host, whose address is the host's own: across the
# veth pair each end's peer has another host's address, so both run over TCP, and `uiwarp conn
# show` says why at each end while the connection runs; within one namespace, over its veth
# address (not loopback), the Writes are copied (the client's drive counters in `uiwarp conn show
# --closed` count them). A server in a pid namespace of its own (unshare --pid) on that host
# cannot be reached so: TCP, and the client says why.
timeout 60 ip netns exec "$B" "$RUN" rping -s -a $SRV -p 7020 -C 100000 -S 64 >/dev/null 2>&1 &
spid=$!
wait_listen -n "$B" 7020
timeout 60 ip netns exec "$A" "$RUN" rping -c -a $SRV -p 7020 -C 100000 -S 64 >/dev/null 2>&1 &
cpid=$!
# both_paths: each namespace's uiwarp conn show names its connection's path (kept in $T).
both_paths() {
  ip netns exec "$A" "$UIWARP" conn show >"$T/off-host.a" 2>&1
  ip netns exec "$B" "$UIWARP" conn show >"$T/off-host.b" 2>&1
  grep -q "; path " "$T/off-host.a" && grep -q "; path " "$T/off-host.b"
}
eventually 5 both_paths
kill $cpid $spid 2>/dev/null
wait $cpid $spid 2>/dev/null
check "across namespaces, the client's path: tcp, the peer's address is not this host's" \
  grep -qE "^  $IP_A:[0-9]+ $IP_B:7020 .*; path tcp: the peer's address is not this host's$" "$T/off-host.a"
check "across namespaces, the server's path: tcp, the peer's address is not this host's" \
  grep -qE "^  $IP_B:7020 $IP_A:[0-9]+ .*; path tcp: the peer's address is not this host's$" "$T/off-host.b"
PAIR_SERVER_NS=$B PAIR_CLIENT_NS=$B PAIR_LABEL=" within a namespace, over $IP_B" \
  run_pair same-host ib_write_bw -R -p 7022 -n 2000 -- ib_write_bw -R -p 7022 -n 2000 $SRV
ip netns exec "$B" "$UIWARP" conn show --closed >"$T/same-host.closed" 2>&1
check "same-host path within a namespace, over its veth address: 2000 Writes copied" \
  grep -qE ":7022 .*same-host Writes and Reads 2000, .*path same-host \\(process_vm\\)" "$T/same-host.closed"
timeout 60 ip netns exec "$B" unshare --pid --fork "$RUN" ib_write_bw -R -p 7021 -n 500 >"$T/pidns.server" 2>&1 &
spid=$!
wait_listen -n "$B" 7021
timeout 60 ip netns exec "$B" "$RUN" ib_write_bw -R -p 7021 -n 500 $SRV >"$T/pidns.client" 2>&1
crc=$?
wait $spid
expect_eq "ib_write_bw to a server in another pid namespace: client and server exit 0" "0 0" "$crc $?"
ip netns exec "$B" "$UIWARP" conn show --closed >"$T/pidns.closed" 2>&1
check "uiwarp conn show --closed: TCP, the peer is in another pid namespace" \
  grep -qE ":7021 .*path tcp: the peer is in another pid namespace" "$T/pidns.closed"

# kill -9 of the client mid-transfer. (The flushing of outstanding work requests is checked
# byte for byte in the unit tests, HX-038; rping itself only reports the disconnect.)
bino=$(ip netns exec "$B" stat -L -c %i /proc/self/ns/net)
before=$(dpid "$bino")
timeout 60 ip netns exec "$B" "$RUN" rping -s -a $SRV -p 7003 -C 100000 -S 65535 -v >"$T/kill.server" 2>&1 &
spid=$!
wait_listen -n "$B" 7003
ip netns exec "$A" "$RUN" rping -c -a $SRV -p 7003 -C 100000 -S 65535 >"$T/kill.client" 2>&1 &
cpid=$!
# Mid-transfer: once the server has verified a few pings.
check "the transfer is under way" eventually 30 \
  sh -c "test \$(grep -c 'ping data' '$T/kill.server') -ge 10"
kill -9 $cpid
wait $spid
src=$?
check "the server exits on its own after the client is killed (exit $src)" test "$src" -ne 124
check "the server's CM saw DISCONNECTED" grep -q "DISCONNECT EVENT" "$T/kill.server"
# The same uiwarpd serves a new connection.
pair rping-after-kill rping -s -a $SRV -p 7004 -C 10 -v -- rping -c -a $SRV -p 7004 -C 10 -v
check "uiwarpd in the surviving namespace is still the same process" test -n "$before" -a "$(dpid "$bino")" = "$before"

# Routes come from rtnetlink through uiwarpd: with no route, the application is told why.
timeout 30 ip netns exec "$A" "$RUN" rping -c -a 10.99.99.99 -p 7007 -C 1 >"$T/noroute" 2>&1
check "no route: rping fails and the cause is named" grep -q "no route to 10.99.99.99" "$T/noroute"
# Link changes reach uiwarpd (rtnetlink multicast) and show in `uiwarp status`.
ip -n "$B" link set "$DEV_B" down
link_down_seen() {
  ip netns exec "$B" "$UIWARP" status >"$T/status-b" 2>&1
  grep -q "^  link $DEV_B down" "$T/status-b"
}
check "uiwarpd saw the link go down" eventually 5 link_down_seen
check "uiwarp status shows it down" grep -q "^  $DEV_B down $IP_B" "$T/status-b"
finish
