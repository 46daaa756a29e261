#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# fio_rdma.sh [-D SECONDS] [-b SIZES] [-v VERBS] [-S SEND_MIB]: fio's rdma engine (Debian's fio)
# over uiwarp on loopback, one server/client pair per verb and block size; prints one line a row,
#   fio rdma VERB SIZE MBPS
# e.g. "fio rdma write 4096 412.3": the client's bandwidth in MB/s of 2^20 octets a second
# (perftest's unit, as scripts/bench shows it), or "nan" when the pair failed. Defaults: -D 3,
# -b "4096 65536", -v "write read send", -S 512 (MiB per send run at 64 KiB, a quarter of it
# at 4 KiB). The uiwarp-run used is $UIWARP_RUN (default build/plain's); UIWARP_STATE_DIR, when
# set, names the uiwarpd to use (scripts/bench gives each build its own), else a private one is
# started and stopped.
#
# write and read run --time_based for -D seconds: their server only waits for the client's
# "finish" Send (fio's engines/rdma.c). A send server instead counts its receives up to its
# --size, so send runs a fixed size on both sides. The figure is fio's own, and fio's time
# includes the 0.5 s its engine sleeps after connecting (fio_rdmaio_connect): with -D 3 the
# write and read rows are a sixth below the rate of the transfer itself (a 64 KiB write here:
# 1823 MiB in -D 1, 5879 in -D 2, 21480 in -D 6, about 3.9 GB/s once the 0.5 s is taken out).
# fio's engine asks for one outstanding RDMA Read (ORD/IRD 1 in its rdma_connect/rdma_accept),
# so its read rows are bound by round trips, unlike ib_read_bw (ORD 16).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../../scripts/lib/common.sh" # free_port, wait_listen, uiwarpd_stop

dur=3 sizes="4096 65536" verbs="write read send" send_mib=512
while (($#)); do
  case $1 in
    -D) dur=$2; shift 2 ;;
    -b) sizes=$2; shift 2 ;;
    -v) verbs=$2; shift 2 ;;
    -S) send_mib=$2; shift 2 ;;
    -h | --help) sed -n '3,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "fio_rdma.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
RUN=${UIWARP_RUN:-$here/../../build/plain/kernel-shim/uiwarp-run}
[[ -x $RUN ]] || { echo "fio_rdma.sh: no uiwarp-run at $RUN (set UIWARP_RUN)" >&2; exit 1; }
command -v fio >/dev/null || { echo "fio_rdma.sh: fio is not installed (Debian package fio)" >&2; exit 1; }

T=$(mktemp -d /tmp/uiwarp-fio.XXXXXX)
own_state=""
if [[ -z ${UIWARP_STATE_DIR:-} ]]; then
  own_state=$T/state
  mkdir -m 700 "$own_state"
  export UIWARP_STATE_DIR=$own_state
fi
cleanup() {
  [[ -z $own_state ]] || uiwarpd_stop "$own_state"
  rm -rf "$T"
}
trap cleanup EXIT

# pair VERB SIZE: prints the client's MB/s, or nan.
pair() {
  local verb=$1 size=$2 port out len
  port=$(free_port)
  out=$T/$verb.$size
  len=(--time_based --runtime="$dur" --size=64m)
  if [[ $verb == send ]]; then
    local mib=$send_mib
    ((size < 65536)) && mib=$((send_mib / 4))
    len=(--size="${mib}m")
  fi
  timeout $((dur + 90)) "$RUN" fio --name=server --ioengine=rdma --port="$port" --rw=read \
    --bs="$size" --iodepth=32 "${len[@]}" --output-format=json >"$out.server" 2>&1 &
  local spid=$!
  if wait_listen "$port"; then
    timeout $((dur + 60)) "$RUN" fio --name=client --ioengine=rdma --hostname=127.0.0.1 \
      --port="$port" --rw=write --verb="$verb" --bs="$size" --iodepth=16 "${len[@]}" \
      --output-format=json >"$out.client" 2>"$out.client.err"
  else
    kill "$spid" 2>/dev/null
  fi
  wait "$spid" 2>/dev/null
  local src=$? mbs
  mbs=$(python3 -c '
import json, sys
try:
    j = json.load(open(sys.argv[1]))["jobs"][0]
    bw = j["write"]["bw_bytes"] / 2**20
    print("%.1f" % bw if j["error"] == 0 and bw > 0 else "nan")
except Exception:
    print("nan")' "$out.client")
  if [[ $mbs == nan ]]; then
    # Why, on stderr (stdout is the rows).
    echo "fio_rdma.sh: $verb $size failed (server exit $src); the ends of its output:" >&2
    tail -n 5 "$out.server" "$out.client.err" >&2
  fi
  echo "$mbs"
}

for size in $sizes; do
  for verb in $verbs; do
    echo "fio rdma $verb $size $(pair "$verb" "$size")"
  done
done
