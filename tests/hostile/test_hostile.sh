#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# The hostile-peer cases of hostile_peer.py (spec §7, HX rows) over real TCP against stock rping
# under uiwarp-run, once per uiwarpd policy ("mode": P2P on/off x CRC on/off, markers, MPA rev 1),
# each with its own state directory, uiwarpd and persistent `rping -s -P`. The tool plays the
# initiator against that server and the responder to one `rping -c` per case, and after each case
# runs a fresh rping against the server. Afterwards the server must still run, with no sanitizer
# report, and uiwarpd must still answer.
# HOSTILE_MODES (default: all) and HOSTILE_ARGS (e.g. --quick, --cases HX-03) select.
# The programs run with UIWARP_RECV_WAIT_MS=0: a Send that finds no receive buffer gets the
# Terminate at once (HX-059's baseline). By default uiwarp first waits for a buffer (HX-059's
# transparent recovery), and rping, which re-posts its receive after each message, would then
# simply get the Send; tests/unit/test_qp_hold.cpp and the qperf consumer cases cover that.
export UIWARP_RECV_WAIT_MS=0
source "$(dirname "$0")/../cm/lib.sh"
PY=${PYTHON:-python3}
TOOL=$(dirname "$0")/hostile_peer.py
command -v rping >/dev/null || { echo "SKIP: rping (rdmacm-utils) not installed"; exit 77; }
command -v "$PY" >/dev/null || { echo "SKIP: $PY not found"; exit 77; }
# shellcheck disable=SC2206
args=(${HOSTILE_ARGS:-})
for mode in ${HOSTILE_MODES:-p2p-crc nop2p-crc p2p-nocrc nop2p-nocrc markers rev1}; do
  state_dir "$T/state-$mode"
  export UIWARPD_CONFIG="$T/uiwarpd-$mode.conf"
  "$PY" "$TOOL" --config-for "$mode" >"$UIWARPD_CONFIG"
  p=$(free_port)
  "$RUN" rping -s -P -a 127.0.0.1 -p "$p" -v >"$T/server-$mode" 2>&1 &
  spid=$!
  wait_listen "$p"
  HOSTILE_SERVER_PID=$spid "$PY" "$TOOL" --mode "$mode" --server-port "$p" --logdir "$T" \
    "${args[@]}" >"$T/$mode.out" 2>&1
  cat "$T/$mode.out"
  PASS=$((PASS + $(grep -c '^ok - ' "$T/$mode.out")))
  FAIL=$((FAIL + $(grep -c '^FAIL - ' "$T/$mode.out")))
  grep -q '^[0-9]* passed, [0-9]* failed' "$T/$mode.out" || bad "hostile_peer.py [$mode] did not finish"
  check "rping -s -P [$mode] still serves after every case" kill -0 "$spid"
  if [[ -n ${UIWARP_CLI:-} ]]; then
    st=$("$UIWARP_CLI" status 2>&1)
    expect_match "uiwarpd [$mode] answers, its listener in place" "listeners: 1" "$st"
    grep -E '^(policy|counters):' <<<"$st"
  fi
  kill "$spid" 2>/dev/null
  wait "$spid" 2>/dev/null
  check "no sanitizer report from rping -s -P [$mode]" \
    bash -c "! grep -qE 'Sanitizer|runtime error:' '$T/server-$mode'"
  uiwarpd_stop
done
finish
