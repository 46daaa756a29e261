#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# Stock perftest with the RDMA CM (-R) over uiwarp on loopback: every test type, the size sweep
# (-a) and several QPs (-q).
source "$(dirname "$0")/lib.sh"
for t in ib_write_bw ib_read_bw ib_send_bw ib_write_lat ib_read_lat ib_send_lat; do
  p=$(free_port)
  run_pair "$t" "$t" -R -p "$p" -n 200 -- "$t" -R -p "$p" -n 200 127.0.0.1
  check "$t reports a result line" grep -qE '^ *[0-9]+ +[0-9]+ +[0-9.]+' "$T/$t.client"
done
p=$(free_port)
run_pair "ib_write_bw-a" ib_write_bw -R -a -n 50 -p "$p" -- ib_write_bw -R -a -n 50 -p "$p" 127.0.0.1
expect_eq "ib_write_bw -a covers 2 B .. 8 MiB" 23 "$(grep -cE '^ *[0-9]+ +50 ' "$T/ib_write_bw-a.client")"
p=$(free_port)
run_pair "ib_write_bw-q8" ib_write_bw -R -q 8 -n 200 -p "$p" -- ib_write_bw -R -q 8 -n 200 -p "$p" 127.0.0.1
check "ib_write_bw -q 8 reports a result line" grep -qE '^ *65536 +[0-9]+ ' "$T/ib_write_bw-q8.client"
finish
