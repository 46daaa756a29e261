#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# A per-user uiwarpd exits once idle (uiwarpd.conf idle-exit-s; 1 s here): after uiwarp-run
# started it for a program that never used it, and in a network namespace that is then left
# with nothing running. A daemon with a listening program stays. A program whose daemon idled
# out between uiwarp-run's start of it and the program's first RDMA CM call gets a new one from
# its shim, and works.
source "$(dirname "$0")/lib.sh"
printf 'idle-exit-s = 1\n' >"$T/uiwarpd.conf"
export UIWARPD_CONFIG=$T/uiwarpd.conf
gone() { [[ -z $(dpid) ]]; } # no uiwarpd of this test's state directory left
gone_within() { eventually "$1" gone; }

"$RUN" true
check "uiwarp-run started a uiwarpd" test -n "$(dpid)"
check "... which exits after 1 s without a client (idle-exit-s = 1)" gone_within 5

# The daemon uiwarp-run starts for the server idles out before rping calls rdma_listen.
p=$(free_port)
timeout 60 "$RUN" sh -c "sleep 3; exec rping -s -a 127.0.0.1 -p $p -C 5" >"$T/server" 2>&1 &
spid=$!
check "the daemon started for a program that has not used it yet is gone" gone_within 3
wait_listen "$p"
check "rping -s listens: its shim started uiwarpd again" test -n "$(dpid)"
held=$(dpid)
sleep 2.5 # twice idle-exit-s: time in which an idle daemon would have gone
expect_eq "a daemon with a listening program does not exit" "$held" "$(dpid)"
timeout 60 "$RUN" rping -c -a 127.0.0.1 -p "$p" -C 5 -v >"$T/client" 2>&1
crc=$(rping_exit $? "$T/client")
wait $spid
src=$(rping_exit $? "$T/server")
expect_eq "rping client and server exit 0, 5 verified pings" "0 0 5" \
  "$crc $src $(grep -c '^ping data' "$T/client")"
check "once both are gone, so is uiwarpd" gone_within 5

if [[ $(id -u) == 0 ]] && command -v unshare >/dev/null; then
  # A daemon started inside a network namespace does not keep it alive.
  unshare -n sh -c "ip link set lo up; \"$RUN\" true"
  check "the daemon of a network namespace (unshare -n) exits too" gone_within 5
fi
finish
