#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# Stock perftest with the RDMA CM (-R) over uiwarp on loopback: every test type, each also with
# the size sweep (-a); the bandwidth tests also with several QPs (-q 8); the RFC 7306 atomics.
source "$(dirname "$0")/lib.sh"
for t in ib_write_bw ib_read_bw ib_send_bw ib_write_lat ib_read_lat ib_send_lat; do
  p=$(free_port)
  run_pair "$t" "$t" -R -p "$p" -n 200 -- "$t" -R -p "$p" -n 200 127.0.0.1
  check "$t reports a result line" grep -qE '^ *[0-9]+ +[0-9]+ +[0-9.]+' "$T/$t.client"
  p=$(free_port)
  run_pair "$t-a" "$t" -R -a -n 5 -p "$p" -- "$t" -R -a -n 5 -p "$p" 127.0.0.1
  expect_eq "$t -a covers 2 B .. 8 MiB" 23 "$(grep -cE '^ *[0-9]+ +5 ' "$T/$t-a.client")"
  [[ $t == *_bw ]] || continue
  p=$(free_port)
  run_pair "$t-q8" "$t" -R -q 8 -n 200 -p "$p" -- "$t" -R -q 8 -n 200 -p "$p" 127.0.0.1
  check "$t -q 8 reports a result line" grep -qE '^ *65536 +[0-9]+ ' "$T/$t-q8.client"
done
# RFC 7306 atomics, which two uiwarp peers negotiate (uiwarpd's rfc7306, a uiwarp extension):
# fetch-and-add and compare-and-swap, ORD of them in flight (bw) and one at a time (lat).
for t in ib_atomic_bw ib_atomic_lat; do
  for op in FETCH_AND_ADD CMP_AND_SWAP; do
    p=$(free_port)
    run_pair "$t-$op" "$t" -R -A "$op" -p "$p" -n 200 -- "$t" -R -A "$op" -p "$p" -n 200 127.0.0.1
    check "$t -A $op reports a result line" grep -qE '^ *8 +200 +[0-9.]+' "$T/$t-$op.client"
  done
done
finish
