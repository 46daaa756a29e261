#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# Stock ibv_devices / ibv_devinfo -v list uiwarp0 as iWARP with an ACTIVE port and a GID, also
# as an unprivileged user; ibv_rc_pingpong without a GID fails with a clear message.
source "$(dirname "$0")/../../scripts/lib/common.sh"
test_init
RUN=${UIWARP_RUN:?}
state_dir
out=$("$RUN" ibv_devices 2>&1)
expect_match "ibv_devices lists uiwarp0" "uiwarp0" "$out"
out=$("$RUN" ibv_devinfo -v 2>&1)
expect_match "transport iWARP" "transport:[[:space:]]+iWARP" "$out"
expect_match "port ACTIVE" "state:[[:space:]]+PORT_ACTIVE" "$out"
expect_match "link layer Ethernet" "link_layer:[[:space:]]+Ethernet" "$out"
expect_match "a GID" "GID\[ *0\]:[[:space:]]+fe80" "$out"
if [[ $(id -u) == 0 ]] && command -v setpriv >/dev/null; then
  chmod 755 "$T"
  # A state directory of nobody's own under $T, so that its uiwarpd goes with the test's.
  install -d -m 700 -o 65534 -g 65534 "$T/nobody"
  out=$(UIWARP_STATE_DIR=$T/nobody XDG_RUNTIME_DIR= setpriv --reuid=65534 --regid=65534 \
    --clear-groups env HOME=/ "$RUN" ibv_devinfo 2>&1)
  expect_match "ibv_devinfo as uid 65534" "transport:[[:space:]]+iWARP" "$out"
fi
# ibv_rc_pingpong without -g: server and client on loopback; they exchange LIDs over TCP, then
# the INIT->RTR move with a LID-only address vector must fail with an explanation (a warning:
# shown at VERBS_LOG_LEVEL 2, rdma-core's convention), not hang or crash. With -g 1 it runs
# (IB-style connect: tests/cm/test_ib_connect.sh).
port=$(free_port)
VERBS_LOG_LEVEL=2 timeout 20 "$RUN" ibv_rc_pingpong -p "$port" >"$T/pp.server" 2>&1 &
wait_listen "$port" # its own TCP socket, for the exchange of addresses
VERBS_LOG_LEVEL=2 timeout 20 "$RUN" ibv_rc_pingpong -p "$port" 127.0.0.1 >"$T/pp.client" 2>&1
rc=$?
wait
check "ibv_rc_pingpong fails (not a hang: exit $rc)" test "$rc" -ne 0 -a "$rc" -ne 124 -a "$rc" -lt 128
expect_match "ibv_rc_pingpong says why" "needs the peer's GID .*-g 1" "$(cat "$T/pp.server" "$T/pp.client")"
finish
