#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# test_qperf.sh loopback|netns [TEST...]: qperf's RC tests over the RDMA CM (-cm1), one second
# each, on loopback or across two network namespaces; each must report a non-zero bandwidth or
# latency and exit 0.
#
# Debian's qperf 0.4.11 has two bugs of its own, both fixed upstream after that release:
#  - its server sends the client the RDMA CM port before calling rdma_listen (fixed by
#    linux-rdma/qperf 118a571 "Fix rdmacm race"), so a quick client's connect can be refused
#    ("unexpected event from RDMA CM: Event rejected"); such a run is repeated, up to four times
#    (each try is a new server child and a new race, which a loaded machine loses often), and
#    the result says so;
#  - its server destroys the QP through the listening cm_id at the end of a test (fixed by
#    83bc16e, "Use the rdma_cm_id from CMINFO rather than from the event"): the server's child
#    for that test dies with SIGSEGV in rdma_destroy_qp after the results were exchanged. Only
#    the client's exit status and output are checked.
source "$(dirname "$0")/lib.sh"
need qperf qperf
TESTS=${*:2}
# rc_rdma_write_bw/_lat use RDMA Write with Immediate: RFC 7306, which uiwarp peers negotiate.
TESTS=${TESTS:-rc_lat rc_rdma_read_bw rc_rdma_read_lat rc_rdma_write_bw rc_rdma_write_lat}
if [[ $MODE == netns ]]; then
  two_hosts 10.231.22
  SRV=$IP_B SNS=(ip netns exec "$HOST_B") CNS=(ip netns exec "$HOST_A")
else
  SRV=127.0.0.1 SNS=() CNS=()
fi
label=$(where)
port=$((19800 + RANDOM % 100))
# One server for all the tests (qperf forks a child per test).
timeout 600 "${SNS[@]}" "$RUN" qperf -lp "$port" >"$T/server" 2>&1 &
spid=$!
wait_listen ${SNS:+-n "$HOST_B"} "$port"
for t in $TESTS; do
  tries=()
  for attempt in 1 2 3 4 5; do
    timeout 60 "${CNS[@]}" "$RUN" qperf -lp "$port" -cm1 -t 1 "$SRV" "$t" >"$T/$t" 2>&1
    rc=$?
    if ((rc != 0 && attempt < 5)) && grep -q "unexpected event from RDMA CM: Event rejected" "$T/$t"; then
      tries+=("$attempt")
      continue
    fi
    break
  done
  note=${tries[*]:+" (attempt ${tries[*]} refused by qperf 0.4.11's listen race; run again)"}
  # "bw  =  809 MB/sec", "bw  =  1,000 MB/sec" or "latency  =  101 us"
  value=$(sed -nE 's/^ +(bw|latency) += +([0-9.,]+) .*/\2/p' "$T/$t" | head -n 1 | tr -d ,)
  if ((rc == 0)) && awk -v v="${value:-0}" 'BEGIN { exit !(v > 0) }'; then
    ok "qperf -cm1 $t$label: $(sed -nE 's/^ +((bw|latency) += +.*)/\1/p' "$T/$t" | head -n 1)$note"
  else
    bad "qperf -cm1 $t$label (exit $rc)$note"
    tail -n 5 "$T/$t"
  fi
done
kill "$spid" 2>/dev/null
wait "$spid" 2>/dev/null
finish
