#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# A per-user uiwarpd killed (kill -9) under programs that use it: the shim of a listening
# `rping -s -P` starts a new daemon and registers its listener again (its socket kept listening
# meanwhile), so new connections succeed again at once; an `ib_write_bw` already running carries
# on. Twice, to show the second restart is like the first.
source "$(dirname "$0")/lib.sh"
UIWARP=${UIWARP_CLI:?UIWARP_CLI must name the uiwarp CLI}
p=$(free_port)
timeout 120 "$RUN" rping -s -P -a 127.0.0.1 -p "$p" -v >"$T/server" 2>&1 &
spid=$!
wait_listen "$p"
# A transfer in flight across the first kill (ib_write_bw -D 4: four seconds of RDMA Writes).
q=$(free_port)
timeout 60 "$RUN" ib_write_bw -R -p "$q" -D 4 >"$T/bw.server" 2>&1 &
bws=$!
wait_listen "$q"
timeout 60 "$RUN" ib_write_bw -R -p "$q" -D 4 127.0.0.1 >"$T/bw.client" 2>&1 &
bwc=$!
check "the transfer is under way" wait_conns "$UIWARP" 2
for round in 1 2; do
  before=$(dpid)
  kill -9 "$before"
  t0=$(date +%s%N)
  after= listed=no
  # No client starts a daemon here: only the shim of rping -s can.
  for _ in $(seq 150); do
    after=$(dpid)
    if [[ -n $after && $after != "$before" ]] &&
      "$UIWARP" status 2>/dev/null | grep -qE "^  127\.0\.0\.1:$p pid [0-9]+ \(rping\)"; then
      listed=yes
      break
    fi
    sleep 0.02
  done
  ms=$((($(date +%s%N) - t0) / 1000000))
  check "[$round] the shim of rping -s started a new uiwarpd (pid $before -> ${after:-none})" \
    test -n "$after" -a "$after" != "$before"
  expect_eq "[$round] ... which lists rping's listener again" yes "$listed"
  check "[$round] ... within a second (${ms} ms)" test "$ms" -lt 1000
  timeout 60 "$RUN" rping -c -a 127.0.0.1 -p "$p" -C 10 -v >"$T/client$round" 2>&1
  crc=$(rping_exit $? "$T/client$round")
  expect_eq "[$round] a new rping client connects: exit 0, 10 pings" "0 10" \
    "$crc $(grep -c '^ping data' "$T/client$round")"
  if ((round == 1)); then
    wait $bwc
    bc=$?
    wait $bws
    expect_eq "ib_write_bw across the kill: server and client exit 0" "0 0" "$? $bc"
    check "... with its result" grep -qE '^ 65536 +[0-9]+ ' "$T/bw.client"
  fi
done
check "rping -s -P still runs" kill -0 "$spid"
kill "$spid" 2>/dev/null
wait "$spid" 2>/dev/null
finish
