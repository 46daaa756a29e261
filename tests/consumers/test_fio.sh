#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# test_fio.sh loopback|netns [VERB...]: fio's rdma engine (Debian's fio) over uiwarp, on loopback
# or across two network namespaces. For each VERB (default: write read send) a server
#   fio --ioengine=rdma --port=P --rw=read ...
# and a client
#   fio --ioengine=rdma --hostname=SERVER --port=P --rw=write --verb=VERB ...
# with 64 KiB blocks, iodepth 16; both must exit 0, the client must have moved every octet of
# its --size and report a non-zero bandwidth (printed in the result, in MB/s of 2^20 octets).
# The figure is fio's: its time includes the 0.5 s the engine sleeps after connecting
# (fio_rdmaio_connect, so that the server can post its receives), most of a 256 MiB run here;
# tests/bench/fio_rdma.sh measures for longer.
#
# How fio's engine (engines/rdma.c) works, which shapes the command lines: the server is the job
# that reads (rw=read) and the client the one that writes (rw=write), whatever the verb; the
# client names the verb and sends it to the server in its first Send. For write and read the
# server registers its iodepth buffers of its block size and sends their addresses and rkeys;
# the client RDMA-Writes to or RDMA-Reads from them and at the end Sends a "finish" message, so
# the server's --size does not matter (but its --bs and --iodepth must be at least the
# client's). For send the server posts its blocks as receive buffers and is done after --size
# octets, so both sides get the same --size. The server binds the wildcard address (fio's
# --bindname for a server takes only the first character of the name: engines/rdma.c,
# fio_rdmaio_setup_listen).
#
# fio's server posts receive buffers only as fast as its loop requeues them, so a send run may
# make uiwarp hold a Send that finds no receive buffer until one is posted (the provider says so
# on stderr; an iWARP RNIC would terminate the connection there, README.md "Pending cases").
source "$(dirname "$0")/lib.sh"
need fio fio
VERBS=${*:2}
VERBS=${VERBS:-write read send}
BS=${FIO_BS:-64k}
SIZE=${FIO_SIZE:-256m}
if [[ $MODE == netns ]]; then
  two_hosts 10.231.27
  SRV=$IP_B SNS=(ip netns exec "$HOST_B") CNS=(ip netns exec "$HOST_A")
else
  SRV=127.0.0.1 SNS=() CNS=()
fi
label=$(where)
port=$((20400 + RANDOM % 200))

for verb in $VERBS; do
  port=$((port + 1))
  common=(--ioengine=rdma --port="$port" --bs="$BS" --size="$SIZE" --output-format=json)
  # The server's iodepth above the client's: it posts more receive buffers for send.
  timeout 120 "${SNS[@]}" "$RUN" fio --name=server "${common[@]}" --rw=read --iodepth=32 \
    >"$T/$verb.server" 2>"$T/$verb.server.err" &
  spid=$!
  if ! wait_listen ${SNS:+-n "$HOST_B"} "$port"; then
    bad "fio rdma $verb $BS$label: the server did not listen on port $port"
    kill "$spid" 2>/dev/null
    wait "$spid" 2>/dev/null
    cat "$T/$verb.server.err"
    continue
  fi
  timeout 100 "${CNS[@]}" "$RUN" fio --name=client "${common[@]}" --hostname="$SRV" --rw=write \
    --verb="$verb" --iodepth=16 >"$T/$verb.client" 2>"$T/$verb.client.err"
  crc=$?
  wait "$spid"
  src=$?
  # The client's job: octets moved, bandwidth (MiB/s, perftest's MB/s) and fio's own error.
  read -r bytes mbs ms err < <(python3 -c '
import json, sys
try:
    j = json.load(open(sys.argv[1]))["jobs"][0]
    w = j["write"]
    print(w["io_bytes"], "%.1f" % (w["bw_bytes"] / 2**20), w["runtime"], j["error"])
except Exception:
    print(0, 0, 0, -1)' "$T/$verb.client")
  want=$(numfmt --from=iec "${SIZE^^}")
  note=""
  grep -q "a Send arrived with no receive posted" "$T/$verb".*.err &&
    note=" (uiwarp held a Send until fio's server posted a receive buffer)"
  if ((crc == 0 && src == 0 && err == 0 && bytes == want)) && awk -v v="$mbs" 'BEGIN { exit !(v > 0) }'; then
    ok "fio rdma $verb $BS$label: $mbs MB/s ($((bytes / 1048576)) MiB in $ms ms, iodepth 16)$note"
  else
    bad "fio rdma $verb $BS$label (server exit $src, client exit $crc, fio error $err, $bytes of $want octets)"
    tail -n 5 "$T/$verb.server.err" "$T/$verb.client.err"
  fi
done
finish
