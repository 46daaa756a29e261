#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# A peer killed with kill -9 mid-connection: the surviving side's outstanding receives all
# complete with IBV_WC_WR_FLUSH_ERR, its QP is in ERR, its CM reports DISCONNECTED; its event
# channel runs O_NONBLOCK under epoll (EAGAIN when empty, readable when an event is queued).
source "$(dirname "$0")/lib.sh"
PEER=${CM_PEER:?CM_PEER must name the cm-peer test program}
p=$(free_port)
timeout 60 "$RUN" "$PEER" server "$p" >"$T/server" 2>&1 &
spid=$!
for _ in $(seq 50); do grep -q listening "$T/server" && break; sleep 0.1; done
"$RUN" "$PEER" client 127.0.0.1 "$p" >"$T/client" 2>&1 &
cpid=$!
for _ in $(seq 100); do grep -q "client: sent" "$T/client" && break; sleep 0.1; done
check "the client sent its message" grep -q "client: sent" "$T/client"
# rdma_set_option(RDMA_OPTION_ID_TOS) reaches the TCP connection, as with the kernel's iWARP.
check "the client's TCP connection carries TOS 0x20" \
  grep -q "tos:0x20" <(ss -Htn --tos state established "( dport = :$p )")
kill -9 $cpid
wait $spid
src=$?
cat "$T/server"
expect_eq "the server exits 0" 0 "$src"
check "empty O_NONBLOCK channel: EAGAIN, not readable" grep -q "empty channel: EAGAIN and not readable" "$T/server"
check "the message arrived" grep -q 'received "hello before I vanish"' "$T/server"
check "the CM reported DISCONNECTED" grep -q "server: RDMA_CM_EVENT_DISCONNECTED" "$T/server"
check "all 15 other receives flushed" grep -q "15 receives flushed (IBV_WC_WR_FLUSH_ERR), 0 other" "$T/server"
check "the QP is in ERR" grep -q "QP state ERR" "$T/server"
finish
