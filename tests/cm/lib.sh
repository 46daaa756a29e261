# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# Helpers for the connection tests: stock rdma-core binaries over uiwarp-run, each test with
# its own state directory (so its own uiwarpd), stopped at the end.
source "$(dirname "${BASH_SOURCE[0]}")/../integration/lib.sh"
RUN=${UIWARP_RUN:?UIWARP_RUN must name uiwarp-run}
export UIWARP_STATE_DIR="$T/state"
mkdir -m 700 -p "$UIWARP_STATE_DIR"
# A free TCP port on loopback for this test.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# wait_listening [NETNS] ARGS...: waits (up to 30 s) until the port given with -p in ARGS has a TCP
# listener (uiwarpd's, once the server's rdma_listen returned), so a loaded machine does not
# start a client too early. Without -p it sleeps a second.
wait_listening() {
  local ns=() port=
  if [[ $1 == ns:* ]]; then ns=(ip netns exec "${1#ns:}"); shift; fi
  while (($#)); do
    [[ $1 == -p ]] && port=$2
    shift
  done
  if [[ -z $port ]]; then sleep 1; return; fi
  for _ in $(seq 300); do
    "${ns[@]}" ss -Htln "sport = :$port" | grep -q . && return
    sleep 0.1
  done
}
stop_daemons() { pkill -f "uiwarpd --socket $UIWARP_STATE_DIR" 2>/dev/null || true; }
trap 'stop_daemons; chmod -R u+w "$T" 2>/dev/null; rm -rf "$T"' EXIT
# perftest_lost_listen_race FILE: the client output FILE shows Debian's perftest 4.5-0.17
# losing the race between its server's rdma_listen (after their TCP hand-shake) and its client's
# rdma_connect, then crashing in its own retry path: the retry reuses the RDMA CM ids it has just
# destroyed (fixed upstream in perftest 3d9d8d0, "Fix crashes and logical flaws in RDMA CM
# connection retry"). The refused connect is right (the kernel's iw_cm reports the same REJECTED,
# -ECONNREFUSED); only the crash after it is perftest's.
perftest_lost_listen_race() {
  grep -q 'RDMA_CM_EVENT_REJECTED; error: -111' "$1" && grep -q 'Failed to connect RDMA CM events' "$1"
}
# run_pair NAME SERVER_CMD... -- CLIENT_CMD...: server in the background, client after it
# listens; both must exit 0. Output in $T/NAME.server and $T/NAME.client. PAIR_SERVER_NS and
# PAIR_CLIENT_NS run either side in a network namespace; PAIR_LABEL is added to the results.
# A pair whose perftest client lost the listen race and crashed (above) is run again, up to
# twice, and the result says so.
run_pair() {
  local name=$1
  shift
  local server=() client=() sns=() cns=() attempt retried=
  while [[ $1 != -- ]]; do server+=("$1"); shift; done
  shift
  client=("$@")
  [[ -z ${PAIR_SERVER_NS:-} ]] || sns=(ip netns exec "$PAIR_SERVER_NS")
  [[ -z ${PAIR_CLIENT_NS:-} ]] || cns=(ip netns exec "$PAIR_CLIENT_NS")
  for attempt in 1 2 3; do
    timeout 120 "${sns[@]}" "$RUN" "${server[@]}" >"$T/$name.server" 2>&1 &
    local spid=$!
    wait_listening ${PAIR_SERVER_NS:+"ns:$PAIR_SERVER_NS"} "${server[@]}"
    timeout 100 "${cns[@]}" "$RUN" "${client[@]}" >"$T/$name.client" 2>&1
    local crc=$?
    if ((crc == 139)) && ((attempt < 3)) && perftest_lost_listen_race "$T/$name.client"; then
      # Its server waits for a connection that will not come (timeout passes the TERM on).
      kill "$spid" 2>/dev/null
      wait $spid 2>/dev/null
      retried+=" $attempt"
      continue
    fi
    wait $spid
    local src=$?
    break
  done
  local note=${retried:+" (attempt${retried} lost perftest's listen race and crashed in perftest's retry; run again)"}
  if ((crc == 0 && src == 0)); then
    ok "$name${PAIR_LABEL:-}$note"
  else
    bad "$name${PAIR_LABEL:-} (server exit $src, client exit $crc)$note"
    tail -n 12 "$T/$name.server" "$T/$name.client"
  fi
}
