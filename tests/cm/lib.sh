# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# shellcheck shell=bash
# Helpers for the connection tests, on top of scripts/lib/common.sh: stock rdma-core binaries over
# uiwarp-run in pairs (run_pair), two test hosts in network namespaces (two_hosts). Each test has
# its own scratch and state directory (so its own uiwarpd), stopped at the end.
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib/common.sh"
test_init
RUN=${UIWARP_RUN:?UIWARP_RUN must name uiwarp-run}
state_dir
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
# PAIR_CLIENT_NS run either side in a network namespace; PAIR_LABEL is added to the results;
# PAIR_PORT names the port to wait for (by default the one given with -p in SERVER_CMD; without
# one, a second's sleep).
# A pair whose perftest client lost the listen race and crashed (above) is run again, up to
# twice, and the result says so. So is a failed pair for which the function PAIR_RETRY_IF
# (called with the server's and the client's output files) answers true: a known bug of the
# program itself, which PAIR_RETRY_WHY names in the result.
run_pair() {
  local name=$1
  shift
  local server=() client=() sns=() cns=() attempt retried= retried_other= raced=
  while [[ $1 != -- ]]; do server+=("$1"); shift; done
  shift
  client=("$@")
  [[ -z ${PAIR_SERVER_NS:-} ]] || sns=(ip netns exec "$PAIR_SERVER_NS")
  [[ -z ${PAIR_CLIENT_NS:-} ]] || cns=(ip netns exec "$PAIR_CLIENT_NS")
  for attempt in 1 2 3; do
    timeout 120 "${sns[@]}" "$RUN" "${server[@]}" >"$T/$name.server" 2>&1 &
    local spid=$!
    pair_wait_listen "${server[@]}"
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
    # rping's own exit race (rping_lost_exit_race): its work is done; the result says so.
    local c0=$crc s0=$src
    crc=$(rping_exit "$crc" "$T/$name.client")
    src=$(rping_exit "$src" "$T/$name.server")
    ((crc == c0 && src == s0)) || raced=" (rping exited 255 after its last CM event: its own exit race, rdma-core PR #1622)"
    if ((crc != 0 || src != 0)) && ((attempt < 3)) && [[ -n ${PAIR_RETRY_IF:-} ]] &&
      "$PAIR_RETRY_IF" "$T/$name.server" "$T/$name.client"; then
      retried_other+=" $attempt"
      continue
    fi
    break
  done
  local note=${retried:+" (attempt${retried} lost perftest's listen race and crashed in perftest's retry; run again)"}
  note+=${retried_other:+" (attempt${retried_other}: ${PAIR_RETRY_WHY:-a known bug of the program}; run again)"}
  note+=$raced
  if ((crc == 0 && src == 0)); then
    ok "$name${PAIR_LABEL:-}$note"
  else
    bad "$name${PAIR_LABEL:-} (server exit $src, client exit $crc)$note"
    tail -n 12 "$T/$name.server" "$T/$name.client"
  fi
}

# pair_wait_listen SERVER_CMD...: waits for the server of run_pair to listen (wait_listen) on
# PAIR_PORT or the port given with -p in SERVER_CMD (the last one), in PAIR_SERVER_NS. Without
# a port there is nothing to wait on, and the test is wrong: it fails at once.
pair_wait_listen() {
  local port=${PAIR_PORT:-}
  while [[ -z ${PAIR_PORT:-} ]] && (($#)); do
    [[ $1 == -p ]] && port=$2
    shift
  done
  if [[ -z $port ]]; then
    echo "pair_wait_listen: no -p in the server's command and no PAIR_PORT: nothing to wait on" >&2
    exit 1
  fi
  wait_listen ${PAIR_SERVER_NS:+-n "$PAIR_SERVER_NS"} "$port"
}

# two_hosts NET: two test hosts, network namespaces joined by a veth pair, each with its own
# uiwarp device on its end of the pair (uiwarp link add uiwarp1 netdev ...) and, through
# uiwarp-run, its own uiwarpd. Sets HOST_A and HOST_B (the namespaces), DEV_A and DEV_B (the
# veth ends), IP_A=NET.1 and IP_B=NET.2; all of it goes on exit. Skips (77) without root.
# With TWO_HOSTS_LOCALHOST=1 the name localhost resolves to each host's own veth address there
# (/etc/netns/<host>/hosts, which ip netns exec mounts over /etc/hosts), as libfabric's verbs
# provider needs on a host whose RDMA device is not on lo (tests/consumers/README.md).
two_hosts() {
  if [[ $(id -u) != 0 ]] || ! command -v ip >/dev/null; then
    echo "skipped: needs root and iproute2 for network namespaces"
    exit 77
  fi
  local cli=${UIWARP_CLI:?UIWARP_CLI must name the uiwarp CLI}
  HOST_A=uwa$$ HOST_B=uwb$$ DEV_A=va$$ DEV_B=vb$$ IP_A=$1.1 IP_B=$1.2
  trap two_hosts_cleanup EXIT
  ip netns add "$HOST_A" && ip netns add "$HOST_B"
  ip link add "$DEV_A" type veth peer name "$DEV_B"
  ip link set "$DEV_A" netns "$HOST_A" && ip link set "$DEV_B" netns "$HOST_B"
  ip -n "$HOST_A" addr add "$IP_A/24" dev "$DEV_A" && ip -n "$HOST_B" addr add "$IP_B/24" dev "$DEV_B"
  local ns
  for ns in "$HOST_A" "$HOST_B"; do ip -n "$ns" link set lo up; done
  ip -n "$HOST_A" link set "$DEV_A" up && ip -n "$HOST_B" link set "$DEV_B" up
  ip netns exec "$HOST_A" "$cli" link add uiwarp1 netdev "$DEV_A" >/dev/null
  ip netns exec "$HOST_B" "$cli" link add uiwarp1 netdev "$DEV_B" >/dev/null
  if [[ ${TWO_HOSTS_LOCALHOST:-} == 1 ]]; then
    mkdir -p "/etc/netns/$HOST_A" "/etc/netns/$HOST_B"
    printf '%s localhost\n' "$IP_A" >"/etc/netns/$HOST_A/hosts"
    printf '%s localhost\n' "$IP_B" >"/etc/netns/$HOST_B/hosts"
  fi
}
two_hosts_cleanup() {
  local ns
  uiwarpd_stop "$T"
  for ns in "${HOST_A:-}" "${HOST_B:-}"; do
    [[ -n $ns ]] || continue
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9
    ip netns del "$ns" 2>/dev/null
    rm -rf "/etc/netns/$ns"
  done
  scratch_cleanup
}
