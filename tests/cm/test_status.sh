#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# `uiwarp status` and `uiwarp conn show` against the real uiwarpd while stock rping runs:
# the listener, both ends of the connection with their owners, negotiated options and TCP
# state, and the counters; then the connection is gone from the list once rping exits, and
# `conn show --closed` says how it ended.
# Then uiwarpd stops: a connection already handed over carries on; a connect still in the MPA
# exchange fails at once (CONNECT_ERROR).
source "$(dirname "$0")/lib.sh"
UIWARP=${UIWARP_CLI:?UIWARP_CLI must name the uiwarp CLI}
out=$("$UIWARP" status 2>&1)
check "status without a daemon says so" grep -q "uiwarpd is not running" <<<"$out"
p=$(free_port)
timeout 60 "$RUN" rping -s -a 127.0.0.1 -p "$p" -C 1000000 -S 65535 >"$T/server" 2>&1 &
spid=$!
wait_listen "$p"
timeout 60 "$RUN" rping -c -a 127.0.0.1 -p "$p" -C 1000000 -S 65535 >"$T/client" 2>&1 &
cpid=$!
check "conn show lists both ends in use" wait_conns "$UIWARP" 2
"$UIWARP" status >"$T/status" 2>&1
"$UIWARP" conn show >"$T/conn" 2>&1
"$UIWARP" -j status >"$T/status.json" 2>&1
"$UIWARP" -j -p conn >"$T/conn.json" 2>&1
cat "$T/status"
check "status names the listener and its owner" grep -qE "^  127\.0\.0\.1:$p pid [0-9]+ \(rping\)" "$T/status"
check "status counts the connection (connect 1, established 1)" grep -q "connect 1 (established 1," "$T/status"
check "status counts the request (requests 1 (accepted 1)" grep -q "requests 1 (accepted 1," "$T/status"
check "status shows the policy" grep -q "^policy: MPA rev 2, crc on" "$T/status"
check "status shows the default MPA startup timeout (10 s)" grep -q "startup timeout 10000 ms" "$T/status"
check "status shows the same-host path on by default" grep -q ", same-host on, " "$T/status"
check "status lists lo among the links" grep -qE "^  lo up 127\.0\.0\.1" "$T/status"
expect_eq "conn show lists both ends" "connections: 2" "$(head -n 1 "$T/conn")"
check "conn show: the active end, its owner and TCP state" \
  grep -qE "127\.0\.0\.1:[0-9]+ 127\.0\.0\.1:$p pid [0-9]+ \(rping\) qp 0x[0-9a-f]{6} dev uiwarp[0-9]+ RTS active IETF crc on .* tcp established" "$T/conn"
check "conn show: the passive end" \
  grep -qE "127\.0\.0\.1:$p 127\.0\.0\.1:[0-9]+ pid [0-9]+ \(rping\) qp 0x[0-9a-f]{6} dev uiwarp[0-9]+ RTS passive IETF crc on .* tcp established" "$T/conn"
# How each moves its RDMA Writes and Reads, last on its line: between two uiwarp processes on
# one host the same-host path, or TCP with the reason (the provider's word, or the shim's).
expect_eq "conn show: both ends name their path (same-host, or tcp: why)" 2 \
  "$(grep -cE '; path (same-host \(.+\)(, stream in shared memory)?(, copies into a shared .+)?|tcp: .+)$' "$T/conn")"
# The client goes; the server sees the connection end and exits by itself (it served one).
# -j: one JSON document each, with the fields its schema names (rdma -j's way).
schema=$(python3 - "$T/status.json" "$T/conn.json" "$p" 2>&1 <<'PY'
import json, sys
st = json.load(open(sys.argv[1]))
cs = json.load(open(sys.argv[2]))
port = sys.argv[3]
def need(obj, keys, where):
    for k in keys:
        assert k in obj, f"{where}: no '{k}' in {sorted(obj)}"
need(st, ["pid", "up_s", "socket", "policy", "counters", "clients", "listeners", "connections",
          "starting", "links", "recent_link_events"], "status")
need(st["policy"], ["mpa_revision", "crc", "markers", "p2p", "rtr", "ird", "ord", "permissive",
                    "large_fpdu", "rfc7306", "same_host", "startup_timeout_ms", "recv_wait_ms"],
     "policy")
need(st["counters"], ["connects", "established", "requests", "accepted", "mpa_errors"], "counters")
assert st["counters"]["established"] == 1, st["counters"]
assert any(l["addr"].endswith(":" + port) and "(rping)" in l["process"] for l in st["listeners"])
need(cs, ["connections", "starting"], "conn show")
assert len(cs["connections"]) == 2, cs
for c in cs["connections"]:
    need(c, ["local", "peer", "process", "qpn", "device", "state", "role", "mpa", "age_s", "path",
             "tcp"], "connection")
    assert c["path"].startswith("same-host (") or c["path"].startswith("tcp: "), c["path"]
    assert c["state"] == "RTS" and isinstance(c["qpn"], int) and c["device"].startswith("uiwarp"), c
    need(c["mpa"], ["version", "crc", "markers_tx", "markers_rx", "p2p", "rtr", "ird", "ord",
                    "large_fpdu", "rfc7306", "same_host", "recv_wait_ms"], "connection mpa")
    need(c["tcp"], ["state", "send_queue", "recv_queue", "retransmits", "rtt_us", "bytes_sent",
                    "bytes_received"], "connection tcp")
    assert c["tcp"]["bytes_sent"] > 0 and c["tcp"]["bytes_received"] > 0, c["tcp"]
assert sorted(c["role"] for c in cs["connections"]) == ["active", "passive"]
print("ok")
PY
)
expect_eq "uiwarp -j status and -j -p conn: JSON with every field of the schema" ok "$schema"
kill "$cpid" 2>/dev/null
timeout 20 tail --pid="$spid" -f /dev/null
kill "$spid" 2>/dev/null
wait 2>/dev/null
expect_eq "conn show: nothing left after rping exits" "connections: 0" "$("$UIWARP" conn show | head -n 1)"
# The end of each, and why, stays: the provider of each side reported it to uiwarpd.
closed_re="^  127\.0\.0\.1:[0-9]+ 127\.0\.0\.1:[0-9]+ pid [0-9]+ \(rping\) qp 0x[0-9a-f]{6} ended [0-9]+s ago after [0-9]+s: .+; drive: posts [0-9]+ sent at once, [0-9]+ held.*; path (same-host \(.+\)(, stream in shared memory)?(, copies into a shared .+)?|tcp: .+)$"
for _ in $(seq 100); do
  "$UIWARP" conn show --closed >"$T/closed" 2>&1
  grep -qE "$closed_re" "$T/closed" && break
  sleep 0.1
done
cat "$T/closed"
check "conn show --closed: the connection that ended, its owner, QPN, why and its path" grep -qE "$closed_re" "$T/closed"
check "conn show --closed: a header that counts them" grep -qE "^closed connections: [12] \(the last 64 are kept\)" "$T/closed"
closed_json=$("$UIWARP" -j conn show --closed | python3 -c 'import json, sys
c = json.load(sys.stdin)["closed"][0]
assert set(c) == {"local", "peer", "process", "qpn", "ended_s_ago", "lived_s", "reason", "drive",
                  "path"}, c
assert c["drive"].startswith("posts "), c
assert c["path"].startswith("same-host (") or c["path"].startswith("tcp: "), c
print(c["reason"])' 2>&1)
check "uiwarp -j conn show --closed: the same, as JSON ($closed_json)" test -n "$closed_json" -a "${closed_json#Traceback}" = "$closed_json"
# The per-user uiwarpd's log, beside its socket, says the same.
log=$(find "$UIWARP_STATE_DIR" -name uiwarpd.log | head -n 1)
check "uiwarpd.log in the state directory records the end and why" \
  grep -qE "uiwarpd: connection 127\.0\.0\.1:[0-9]+ -> 127\.0\.0\.1:[0-9]+ of pid [0-9]+ \(rping\) ended: .+" "${log:-/dev/null}"

# Connections already handed over do not depend on uiwarpd: stop it mid-transfer, rping finishes.
# 5,000 pings take about 2 s alone; each is four completion-channel wake-ups, which a loaded
# 2-core machine can stretch 20 times, hence the generous timeout.
p=$(free_port)
run_pair_bg() { timeout 120 "$RUN" "$@"; }
run_pair_bg rping -s -a 127.0.0.1 -p "$p" -C 5000 -S 4096 -v >"$T/r.server" 2>&1 &
spid=$!
wait_listen "$p"
run_pair_bg rping -c -a 127.0.0.1 -p "$p" -C 5000 -S 4096 -v -d >"$T/r.client" 2>&1 &
cpid=$!
for _ in $(seq 100); do
  [[ $("$UIWARP" conn show 2>/dev/null | head -n 1) == "connections: 2" ]] && break
  sleep 0.1
done
uiwarpd_stop
wait $cpid
crc=$?
wait $spid
src=$?
crc=$(rping_exit "$crc" "$T/r.client")
src=$(rping_exit "$src" "$T/r.server")
expect_eq "rping completes after uiwarpd stops (client and server exit)" "0 0" "$crc $src"
expect_eq "... with every ping verified" 5000 "$(grep -c '^ping data' "$T/r.client")"
((crc == 0)) || grep -v '^ping data' "$T/r.client" | tail -n 20

# uiwarpd goes away while a connect waits in the MPA exchange (the peer is a TCP listener that
# never answers): the application gets CONNECT_ERROR at once instead of waiting forever.
p=$(free_port)
python3 -c 'import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(1); c, _ = s.accept(); time.sleep(30)' "$p" &
mute=$!
wait_listen "$p"
timeout 60 "$RUN" rping -c -a 127.0.0.1 -p "$p" -C 1 >"$T/gone.client" 2>&1 &
cpid=$!
for _ in $(seq 100); do
  [[ $("$UIWARP" conn show 2>/dev/null | tail -n 1) == *"awaiting MPA reply"* ]] && break
  sleep 0.1
done
uiwarpd_stop
wait $cpid
crc=$?
kill $mute 2>/dev/null
check "the connect fails when uiwarpd goes away (rping exit $crc, not a timeout)" test "$crc" -ne 124 -a "$crc" -ne 0
check "... with CONNECT_ERROR and the cause on stderr" \
  grep -q "uiwarpd went away while connecting" "$T/gone.client"
grep -q "uiwarpd went away while connecting" "$T/gone.client" || cat "$T/gone.client"
finish
