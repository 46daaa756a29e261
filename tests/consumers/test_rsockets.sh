#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# test_rsockets.sh loopback|netns [CASE...]: rsockets (librdmacm's socket API over RDMA) over
# uiwarp: rstream and riostream with a fixed transfer size (-S) in blocking (sync) and
# non-blocking modes, riostream also asynchronous (rpoll), all with data verification (-T v);
# and unmodified TCP programs over librspreload (LD_PRELOAD after uiwarp-run's shim): nc sends a
# file to a Python socket server, a Python client to the same server, checked by SHA-256, and
# iperf3 (with select() through poll(): Debian 12's librspreload select() is broken, README.md).
#
# CASE names one case (the CMake list of pending cases runs those that wait for a fix):
#   rstream-b rstream-n rstream-a riostream-b riostream-n riostream-a rspreload-nc
#   rspreload-python rspreload-iperf3
#   rstream-sweep      rstream without -S (its size sweep)
#   riostream-sweep    riostream without -S
source "$(dirname "$0")/lib.sh"
need rdmacm-utils rstream riostream
RSPRELOAD=/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so
CASES=${*:2}
CASES=${CASES:-rstream-b rstream-n rstream-a riostream-b riostream-n riostream-a rspreload-nc rspreload-python rspreload-iperf3}
if [[ $MODE == netns ]]; then
  two_hosts 10.231.23
  SRV=$IP_B
  export PAIR_SERVER_NS=$HOST_B PAIR_CLIENT_NS=$HOST_A
else
  SRV=127.0.0.1
fi
export PAIR_LABEL=$(where)
port=$((7600 + RANDOM % 200))

# stream_case NAME PROGRAM OPTION [ARGS...]: PROGRAM with -T OPTION -T v, server and client.
stream_case() {
  local name=$1 prog=$2 opt=$3
  shift 3
  port=$((port + 1))
  run_pair "$name" "$prog" -p "$port" -T "$opt" -T v "$@" -- \
    "$prog" -s "$SRV" -p "$port" -T "$opt" -T v "$@"
  # The result line: name bytes xfers iters total time Gb/sec usec/xfer
  local row
  row=$(grep -E '^custom ' "$T/$name.client" | head -n 1)
  expect_match "$name: a result line$PAIR_LABEL" "^custom +[0-9.]+[km]? +[0-9]+ " "$row"
  # name bytes xfers iters total time Gb/sec usec/xfer
  [[ -z $row ]] || echo "note - $name$PAIR_LABEL: $(awk '{ print $7 " Gb/s, " $8 " us/xfer" }' <<<"$row")"
}

# The socket programs of the rspreload cases: a server that prints the byte count and SHA-256
# of what it receives, and a client that sends a file.
cat >"$T/server.py" <<'EOF'
import hashlib, socket, sys
s = socket.socket()
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(1)
c, _ = s.accept()
h, n = hashlib.sha256(), 0
while True:
    b = c.recv(65536)
    if not b:
        break
    h.update(b)
    n += len(b)
print(n, h.hexdigest())
EOF
cat >"$T/client.py" <<'EOF'
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
c.sendall(open(sys.argv[3], "rb").read())
c.close()
EOF
head -c 3000000 /dev/urandom >"$T/data"
want="3000000 $(sha256sum <"$T/data" | cut -d' ' -f1)"
# The preload, after the shim that uiwarp-run puts in LD_PRELOAD.
cat >"$T/rspreload" <<EOF
#!/bin/sh
LD_PRELOAD="\$LD_PRELOAD:$RSPRELOAD" exec "\$@"
EOF
# For iperf3: select() through poll() (rspreload_select.c) before librspreload.
cat >"$T/rspreload-select" <<EOF
#!/bin/sh
LD_PRELOAD="\$LD_PRELOAD:${UIWARP_RSPRELOAD_SELECT:?UIWARP_RSPRELOAD_SELECT must name rspreload-select}:$RSPRELOAD" exec "\$@"
EOF
chmod +x "$T/rspreload" "$T/rspreload-select"

# preload_case NAME CLIENT...: the Python server under librspreload, CLIENT under it too.
preload_case() {
  local name=$1
  shift
  port=$((port + 1))
  PAIR_PORT=$port run_pair "$name" "$T/rspreload" /usr/bin/python3 "$T/server.py" "$SRV" "$port" -- \
    "$T/rspreload" "$@"
  expect_eq "$name: every byte arrived (SHA-256)$PAIR_LABEL" "$want" "$(tail -n 1 "$T/$name.server")"
}

for c in $CASES; do
  case $c in
  rstream-b | rstream-n)
    stream_case "$c" rstream "${c#rstream-}" -S 65536 -C 100 ;;
  rstream-a)
    # The server async (rpoll for accept, POLLIN and POLLOUT), the client blocking: an async
    # client fails by rstream's own race (exit 16): its do_poll() fails on POLLHUP even with
    # POLLIN, and the server's disconnect follows its last data at once (README.md).
    port=$((port + 1))
    run_pair "$c" rstream -p "$port" -T a -T v -S 65536 -C 100 -- \
      rstream -s "$SRV" -p "$port" -T b -T v -S 65536 -C 100
    check "$c: the server's result line$PAIR_LABEL" grep -qE '^custom +64k +100 ' "$T/$c.server" ;;
  riostream-b | riostream-n | riostream-a)
    stream_case "$c" riostream "${c#riostream-}" -S 65536 -C 100 ;;
  rstream-sweep | riostream-sweep)
    port=$((port + 1))
    run_pair "$c" "${c%-sweep}" -p "$port" -- "${c%-sweep}" -s "$SRV" -p "$port"
    check "$c: the 1m_bw line$PAIR_LABEL" grep -qE '^1m_bw ' "$T/$c.client" ;;
  rspreload-nc)
    need netcat-openbsd nc
    # nc as the client only: as a server it sets SO_REUSEPORT, which rsockets does not offer.
    preload_case "$c" sh -c "exec nc -N '$SRV' \"\$0\" <'$T/data'" "$((port + 1))" ;;
  rspreload-python)
    preload_case "$c" /usr/bin/python3 "$T/client.py" "$SRV" "$((port + 1))" "$T/data" ;;
  rspreload-iperf3)
    need iperf3 iperf3
    port=$((port + 1))
    PAIR_PORT=$port run_pair "$c" "$T/rspreload-select" iperf3 -s -1 -p "$port" -- \
      "$T/rspreload-select" iperf3 -c "$SRV" -p "$port" -t 2
    # The server's byte count as the client's summary reports it: more than none.
    expect_match "$c: the server received data$PAIR_LABEL" \
      ' [0-9.]*[1-9][0-9.]* [KMG]Bytes .* receiver$' "$(grep -E 'receiver$' "$T/$c.client")" ;;
  *) bad "unknown case $c" ;;
  esac
done
finish
