#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# Stock rping and ib_read_bw over uiwarp on loopback under each MPA policy uiwarpd offers (its
# configuration file, through UIWARPD_CONFIG): RFC 5044 rev 1 with and without CRC, rev 2 without
# peer-to-peer mode, with the Read RTR, with markers, with siw's large-FPDU flag, and with the
# initiator holding its first FPDU (first-fpdu-delay-ms, for siw's start-up race). Both ends use
# the same daemon, so each policy meets itself.
# rev 1 carries no IRD/ORD (RFC 6581 §9.1 is rev 2's): the CONNECT_REQUEST then reports
# uiwarpd's own IRD/ORD, not 0, or rping's server (rdma_accept with no parameters, so its ORD
# is the peer IRD reported) could post no RDMA Read ("post send error 22"; found against siw,
# which reports 0).
source "$(dirname "$0")/lib.sh"
for policy in "mpa-revision=1" "mpa-revision=1 crc=off" "p2p=off" "rtr=read" "markers=on" \
  "large-fpdu=off" "first-fpdu-delay-ms=100"; do
  conf="$T/uiwarpd-${policy// /_}.conf"
  : >"$conf"
  for kv in $policy; do echo "${kv%%=*} = ${kv#*=}" >>"$conf"; done
  # A daemon of its own for each policy: a state dir of its own.
  export UIWARPD_CONFIG=$conf
  state_dir "$T/state-${policy// /_}"
  label=" [$policy]"
  p=$(free_port)
  PAIR_LABEL=$label run_pair "rping-${policy// /_}" rping -s -a 127.0.0.1 -p "$p" -C 100 -S 4096 -v -- \
    rping -c -a 127.0.0.1 -p "$p" -C 100 -S 4096 -v
  expect_eq "rping client verified 100 pings$label" 100 "$(grep -c '^ping data' "$T/rping-${policy// /_}.client")"
  expect_eq "rping server verified 100 pings$label" 100 "$(grep -c '^server ping data' "$T/rping-${policy// /_}.server")"
  p=$(free_port)
  PAIR_LABEL=$label run_pair "read-${policy// /_}" ib_read_bw -R -p "$p" -n 200 -- ib_read_bw -R -p "$p" -n 200 127.0.0.1
  check "ib_read_bw reports a result line$label" grep -qE '^ *65536 +200 ' "$T/read-${policy// /_}.client"
  uiwarpd_stop
done
finish
