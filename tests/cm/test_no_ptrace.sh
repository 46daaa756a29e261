#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# The same-host path where the kernel refuses one process the other's memory: stock rping and
# ib_write_bw under uiwarp-no-ptrace (a seccomp filter refusing process_vm_readv/writev,
# pidfd_getfd and ptrace with EPERM, as strict container profiles and Yama's ptrace_scope do).
# Each end takes the path through its peer's grant of its memory (samehost/grant.hpp), and
# `uiwarp conn show` names it; without the filter the same pair uses process_vm_*.
# Env: UIWARP_NO_PTRACE (the launcher).
source "$(dirname "$0")/lib.sh"
: "${UIWARP_NO_PTRACE:?the seccomp launcher (uiwarp-no-ptrace)}"
UIWARP=$UIWARP_CLI

# both_ends TEXT FILE: uiwarp conn show, into FILE, has TEXT on both ends' lines.
both_ends() {
  "$UIWARP" conn show >"$2" 2>&1
  [[ $(grep -c -- "$1" "$2") == 2 ]]
}
# paths_during LABEL [LAUNCHER]: a long rping (its RDMA Reads and Writes), its connections' paths
# as conn show lists them, one a line.
paths_during() {
  local label=$1 want=${WANT:-'; path same-host'} p
  shift
  p=$(free_port)
  "$RUN" "$@" rping -s -a 127.0.0.1 -p "$p" -C 100000 -S 4096 >/dev/null 2>&1 &
  local s=$!
  wait_listen "$p"
  "$RUN" "$@" rping -c -a 127.0.0.1 -p "$p" -C 100000 -S 4096 >/dev/null 2>&1 &
  local c=$!
  eventually 10 both_ends "$want" "$T/conn-$label"
  kill $c $s 2>/dev/null
  wait $c $s 2>/dev/null
  grep -o '; path .*' "$T/conn-$label" | sort
}

# Each end names its path once it has switched its stream to the ring too.
WANT='stream in shared memory'
out=$(paths_during ptrace)
expect_eq "allowed: both ends copy with process_vm_*, the stream in shared memory" \
  "$(printf '; path same-host (process_vm), stream in shared memory\n%.0s' 1 2)" "$out"
out=$(paths_during no-ptrace "$UIWARP_NO_PTRACE")
expect_eq "refused: both ends copy through the peer's grant; the ring needs no ptrace either" \
  "$(printf '; path same-host (granted), stream in shared memory\n%.0s' 1 2)" "$out"
# UIWARP_SAME_HOST=copy: the copies alone, the stream on TCP.
out=$(WANT='; path same-host' paths_during copy env UIWARP_SAME_HOST=copy "$UIWARP_NO_PTRACE")
expect_eq "refused, copies only: the grant, the stream on TCP" \
  "$(printf '; path same-host (granted)\n%.0s' 1 2)" "$out"

# Data through it, verified by the programs themselves.
p=$(free_port)
run_pair rping-granted "$UIWARP_NO_PTRACE" rping -s -a 127.0.0.1 -p "$p" -C 200 -S 16384 -V -- \
  "$UIWARP_NO_PTRACE" rping -c -a 127.0.0.1 -p "$p" -C 200 -S 16384 -V
p=$(free_port)
run_pair write-granted "$UIWARP_NO_PTRACE" ib_write_bw -R -p "$p" -s 65536 -n 2000 -- \
  "$UIWARP_NO_PTRACE" ib_write_bw -R -p "$p" -s 65536 -n 2000 127.0.0.1
check "ib_write_bw through the grant reports a result line" grep -qE '^ *65536 +2000 ' "$T/write-granted.client"
uiwarpd_stop
finish
