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
# run_pair NAME SERVER_CMD... -- CLIENT_CMD...: server in the background, client after it
# listens; both must exit 0. Output in $T/NAME.server and $T/NAME.client. PAIR_SERVER_NS and
# PAIR_CLIENT_NS run either side in a network namespace; PAIR_LABEL is added to the results.
run_pair() {
  local name=$1
  shift
  local server=() client=() sns=() cns=()
  while [[ $1 != -- ]]; do server+=("$1"); shift; done
  shift
  client=("$@")
  [[ -z ${PAIR_SERVER_NS:-} ]] || sns=(ip netns exec "$PAIR_SERVER_NS")
  [[ -z ${PAIR_CLIENT_NS:-} ]] || cns=(ip netns exec "$PAIR_CLIENT_NS")
  timeout 120 "${sns[@]}" "$RUN" "${server[@]}" >"$T/$name.server" 2>&1 &
  local spid=$!
  wait_listening ${PAIR_SERVER_NS:+"ns:$PAIR_SERVER_NS"} "${server[@]}"
  timeout 100 "${cns[@]}" "$RUN" "${client[@]}" >"$T/$name.client" 2>&1
  local crc=$?
  wait $spid
  local src=$?
  if ((crc == 0 && src == 0)); then
    ok "$name${PAIR_LABEL:-}"
  else
    bad "$name${PAIR_LABEL:-} (server exit $src, client exit $crc)"
    tail -n 5 "$T/$name.server" "$T/$name.client"
  fi
}
