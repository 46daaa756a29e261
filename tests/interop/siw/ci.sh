#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# The CI interop test with the kernel's siw (ctest: interop-siw): builds the guest (cached),
# boots it with stock siw, and runs, in both directions, rping (200 verified pings) and one
# ib_write_bw, with uiwarp at MPA rev 2 with CRC; the capture of it all must decode in
# Wireshark with no malformed frame and no CRC error. Exit 77 (skipped) without root,
# /dev/net/tun, qemu or the Debian packages.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
source "$HERE/cases.sh"
siw_require
t0=$SECONDS
rc=0
bash "$HERE/build-guest.sh" || rc=$?
((rc == 0)) || { ((rc == 77)) && skip "the siw guest could not be built (Debian packages unavailable)"; die "guest build failed"; }
siw_setup "$(mktemp -d /tmp/uiwarp-siw.XXXXXX)"
# The work dir (console log, program output, capture) stays when a case fails.
trap 'siw_teardown; grep -q $'"'"'\tFAIL\t'"'"' "$SW/results" 2>/dev/null && echo "logs: $SW" || rm -rf "$SW"' EXIT
CONFIG="rev2 crc"
export SIW_RETRY_FAILED=1 # see perf_case: siw's own failures under TCG are retried, and named
uiwarp_policy mpa-revision=2 crc=on
siw_boot stock "$SW/ci.pcap"
for dir in siw-active uiwarp-active; do
  rping_case "$dir"
  perf_case ib_write_bw "$dir" 65536 -n 200
done
siw_halt
capture_check "$SW/ci.pcap" on
echo
column -t -s $'\t' "$SW/results"
log "interop-siw: $((SECONDS - t0)) s"
! grep -q $'\tFAIL\t' "$SW/results"
