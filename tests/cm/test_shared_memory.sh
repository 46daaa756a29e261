#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# RDMA Writes and Reads into memory both processes map go by loads and stores into the
# initiator's own mapping of it, no system call per copy (samehost/backing.hpp, mapping.hpp):
# uiwarp-shared-lat's ping-pong between two processes whose buffers are a sealed memfd, a SysV
# segment or anonymous memory checks every octet of every Write, and a Read back; `uiwarp conn
# show --closed` names the memory each end copied into. With ptrace, and under the seccomp
# filter that refuses it (uiwarp-no-ptrace), where the peer still opens the memfd as
# /proc/PID/fd/N and attaches the segment by its id.
# Env: SHARED_LAT (uiwarp-shared-lat), UIWARP_NO_PTRACE (the launcher).
source "$(dirname "$0")/lib.sh"
: "${SHARED_LAT:?uiwarp-shared-lat}" "${UIWARP_NO_PTRACE:?the seccomp launcher}"
UIWARP=$UIWARP_CLI

# paths PORT: the paths conn show --closed lists for the connection on PORT, one a line, sorted;
# without the stream ring's part, which only an end that sent something after set-up has.
paths() {
  local out
  for _ in $(seq 50); do
    out=$("$UIWARP" conn show --closed | grep -E "127\.0\.0\.1:$1 " | grep -o '; path .*' |
      sed 's/, stream in shared memory//' | sort)
    [[ $(wc -l <<<"$out") == 2 ]] && break
    sleep 0.1
  done
  echo "$out"
}

# case LABEL MEMORY SIZE ITERS EXPECTED_PATH [LAUNCHER]
case_() {
  local label=$1 mem=$2 size=$3 iters=$4 want=$5 p
  shift 5
  p=$(free_port)
  PAIR_PORT=$p run_pair "$label" "$@" "$SHARED_LAT" server "$p" "$mem" "$size" "$iters" verify -- \
    "$@" "$SHARED_LAT" client "$p" "$mem" "$size" "$iters" verify
  check "$label: every octet of every Write and of the Read back" grep -qx verified "$T/$label.client"
  expect_eq "$label: conn show names the path of both ends" \
    "$(printf '; path %s\n' "$want" "$want")" "$(paths "$p")"
}

case_ memfd-64 memfd 64 2000 "same-host (process_vm), copies into a shared memfd"
case_ memfd-4m memfd $((4 << 20)) 20 "same-host (process_vm), copies into a shared memfd"
case_ sysv-64k sysv 65536 500 "same-host (process_vm), copies into a shared SysV segment"
case_ anon-64k anon 65536 500 "same-host (process_vm)"
case_ memfd-granted memfd 65536 500 "same-host (granted), copies into a shared memfd" \
  "$UIWARP_NO_PTRACE"
case_ sysv-granted sysv 64 2000 "same-host (granted), copies into a shared SysV segment" \
  "$UIWARP_NO_PTRACE"
# The path off: the same programs over TCP, the same octets.
case_ memfd-tcp memfd 65536 200 "tcp: not agreed in the MPA exchange" env UIWARP_SAME_HOST=off
uiwarpd_stop
finish
