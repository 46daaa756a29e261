#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# Stock rping over uiwarp on loopback: every ping verified (-v), large and small.
source "$(dirname "$0")/lib.sh"
p=$(free_port)
run_pair rping-64k rping -s -a 127.0.0.1 -p "$p" -C 1000 -S 65535 -v -- \
  rping -c -a 127.0.0.1 -p "$p" -C 1000 -S 65535 -v
expect_eq "rping client verified 1000 pings of 64 KiB - 1 (rping 44 rejects 65536 itself)" 1000 "$(grep -c '^ping data' "$T/rping-64k.client")"
expect_eq "rping server verified 1000 pings" 1000 "$(grep -c '^server ping data' "$T/rping-64k.server")"
p=$(free_port)
run_pair rping-small rping -s -a 127.0.0.1 -p "$p" -C 200 -v -- rping -c -a 127.0.0.1 -p "$p" -C 200 -v
expect_eq "rping client verified 200 small pings" 200 "$(grep -c '^ping data' "$T/rping-small.client")"
# ucmatose (rdmacm-utils): connections, Sends and disconnects through the RDMA CM.
p=$(free_port)
run_pair ucmatose ucmatose -p "$p" -- ucmatose -s 127.0.0.1 -p "$p"
check "ucmatose client: test complete" grep -q "test complete" "$T/ucmatose.client"
# rdma_server/rdma_client (rdmacm-utils): the synchronous RDMA CM (rdma_create_ep,
# rdma_get_request, which moves each new id to a channel of its own with MIGRATE_ID).
p=$(free_port)
run_pair rdma_server rdma_server -p "$p" -- rdma_client -s 127.0.0.1 -p "$p"
check "rdma_client: end 0" grep -q "rdma_client: end 0" "$T/rdma_server.client"
check "rdma_server: end 0" grep -q "rdma_server: end 0" "$T/rdma_server.server"
finish
