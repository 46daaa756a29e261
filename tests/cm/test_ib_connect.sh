#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# IB-style connect between uiwarp peers (a uiwarp extension, issue 14): stock programs that
# exchange QPNs and GIDs out of band and move their QPs INIT -> RTR -> RTS themselves, with no
# RDMA CM: ibv_rc_pingpong -g 1, ibv_srq_pingpong -g 1, and perftest without -R (-x 1), on
# loopback and across two network namespaces. The rendezvous port is this test's own
# (ib-connect-port), so a uiwarpd elsewhere on the host is not in the way.
source "$(dirname "$0")/lib.sh"
conf=$T/uiwarpd.conf
echo "ib-connect-port = $(free_port)" >"$conf"
export UIWARPD_CONFIG=$conf

# perftest 4.5-0.17 (Debian 12) deregisters the credit MR of its iWARP Send test only when it
# uses the RDMA CM, so without -R its ibv_dealloc_pd fails with EBUSY after the test has run
# and it exits 1 (the kernel's uverbs refuses the same; fixed upstream in perftest ff1a84a).
send_bw_pd_leak() {
  grep -q 'Failed to deallocate PD' "$1" && grep -q 'Failed to deallocate PD' "$2" &&
    grep -qE '^ *65536 +[0-9]+ ' "$2"
}

# ib_pairs LABEL DEVICE_ARGS...: every program once, server in PAIR_SERVER_NS (or here).
ib_pairs() {
  local label=$1 srv=$2 t p
  shift 2
  p=$(free_port)
  PAIR_LABEL=$label run_pair rc_pingpong ibv_rc_pingpong "$@" -g 1 -p "$p" -- \
    ibv_rc_pingpong "$@" -g 1 -p "$p" "$srv"
  check "ibv_rc_pingpong moved 1000 messages$label" grep -q '^1000 iters' "$T/rc_pingpong.client"
  p=$(free_port)
  PAIR_LABEL=$label run_pair srq_pingpong ibv_srq_pingpong "$@" -g 1 -p "$p" -- \
    ibv_srq_pingpong "$@" -g 1 -p "$p" "$srv"
  check "ibv_srq_pingpong (16 QPs, one SRQ) moved 1000 messages$label" \
    grep -q '^1000 iters' "$T/srq_pingpong.client"
  for t in ib_write_bw ib_read_bw ib_write_lat ib_send_lat ib_read_lat; do
    p=$(free_port)
    PAIR_LABEL=$label run_pair "$t" "$t" "$@" -x 1 -p "$p" -n 500 -- "$t" "$@" -x 1 -p "$p" -n 500 "$srv"
    check "$t reports a result line$label" grep -qE '^ *[0-9]+ +500 +[0-9.]+' "$T/$t.client"
  done
  # ib_send_bw by hand: its exit status is perftest's PD leak (above) when all went well.
  local sns=() cns=()
  [[ -z ${PAIR_SERVER_NS:-} ]] || sns=(ip netns exec "$PAIR_SERVER_NS")
  [[ -z ${PAIR_CLIENT_NS:-} ]] || cns=(ip netns exec "$PAIR_CLIENT_NS")
  p=$(free_port)
  timeout 60 "${sns[@]}" "$RUN" ib_send_bw "$@" -x 1 -p "$p" -n 500 >"$T/send_bw.server" 2>&1 &
  local spid=$!
  PAIR_PORT=$p pair_wait_listen
  timeout 60 "${cns[@]}" "$RUN" ib_send_bw "$@" -x 1 -p "$p" -n 500 "$srv" >"$T/send_bw.client" 2>&1
  local crc=$? src=0
  wait $spid || src=$?
  if ((crc == 0 && src == 0)) || { ((crc == 1 && src == 1)) &&
    send_bw_pd_leak "$T/send_bw.server" "$T/send_bw.client"; }; then
    ok "ib_send_bw reports its result$label (exits $crc: perftest's PD leak when 1)"
  else
    bad "ib_send_bw$label (server exit $src, client exit $crc)"
    tail -n 12 "$T/send_bw.server" "$T/send_bw.client"
  fi
  p=$(free_port)
  PAIR_LABEL=$label run_pair ib_write_bw-q4 ib_write_bw "$@" -x 1 -q 4 -p "$p" -n 500 -- \
    ib_write_bw "$@" -x 1 -q 4 -p "$p" -n 500 "$srv"
  check "ib_write_bw -q 4 reports a result line$label" grep -qE '^ *65536 +[0-9]+ +[0-9.]+' "$T/ib_write_bw-q4.client"
}

ib_pairs "" 127.0.0.1
# VERBS_LOG_LEVEL=3: closing the device context says what the drive policy decided (drive.hpp);
# ib_write_bw posts in bursts, so over TCP some posts are held for the next drive.
p=$(free_port)
VERBS_LOG_LEVEL=3 UIWARP_SAME_HOST=off run_pair write_bw-info ib_write_bw -x 1 -p "$p" -n 2000 -- \
  ib_write_bw -x 1 -p "$p" -n 2000 127.0.0.1
check "VERBS_LOG_LEVEL=3: the drive counters at context close" grep -qE \
  "uiwarp\[[0-9]+\] drive: uiwarp0 context closed: posts [0-9]+ sent at once, [1-9][0-9]* held .*yields [0-9]+" \
  "$T/write_bw-info.client"
check "...and without it, nothing" bash -c "! grep -q 'drive:' '$T/ib_write_bw.client'"
# The two processes are of one host: IB-style connections take the same-host path as the RDMA
# CM's do (the responder's offer goes with its wait at RTR), and the counters count the copies.
# One Write in flight (-t 1): Writes posted before the path is up, and those behind them, go
# through the stream; a queue kept full from the start stays behind it on a loaded machine
# (docs/troubleshooting.md), which is not what this checks.
p=$(free_port)
VERBS_LOG_LEVEL=3 run_pair write_bw-same-host ib_write_bw -x 1 -t 1 -p "$p" -n 2000 -- \
  ib_write_bw -x 1 -t 1 -p "$p" -n 2000 127.0.0.1
check "IB-style connect takes the same-host path: the client's Writes copied or in the ring" \
  grep -qE "drive: uiwarp0 context closed: .*; same-host Writes and Reads ([1-9][0-9]*,|.*stream through shared memory [1-9][0-9]* octets)" \
  "$T/write_bw-same-host.client" ||
  grep -E "drive:|same-host|uiwarp" "$T/write_bw-same-host.client" | tail -n 5 # why not, when not
# The RDMA CM path is unchanged beside it.
p=$(free_port)
run_pair write_bw-R ib_write_bw -R -p "$p" -n 200 -- ib_write_bw -R -p "$p" -n 200 127.0.0.1
two_hosts 10.231.9
PAIR_SERVER_NS=$HOST_B PAIR_CLIENT_NS=$HOST_A ib_pairs " across namespaces" "$IP_B" -d uiwarp1
finish
