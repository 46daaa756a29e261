#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# The CI interop test with the kernel's siw (ctest: interop-siw): builds the guest (cached),
# boots it with stock siw, and runs, in both directions, rping (200 verified pings) and one
# ib_write_bw, with uiwarp at MPA rev 2 with CRC; the capture of it all must decode in
# Wireshark with no malformed frame and no CRC error. In the same boot, uiwarp installed in the
# guest from the build tree runs one ib_write_bw between two processes of nobody with Yama's
# ptrace_scope 1 and one with 2: both ends must take the same-host path through the grant.
# Exit 77 (skipped) without root, /dev/net/tun, qemu or the Debian packages.
# Env (ctest sets them): UIWARP_RUN, UIWARP_CLI, UIWARP_BUILD_DIR (the build tree, for the
# guest's uiwarp; default: the one UIWARP_RUN is in).
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
# uiwarp for the guest (the Yama cases), appended to the guest's initramfs.
B=${UIWARP_BUILD_DIR:-$(dirname "$UIWARP_RUN")/..}
[[ -f $B/CMakeCache.txt ]] || die "no build tree at $B for the guest's uiwarp (set UIWARP_BUILD_DIR)"
guest_uiwarp_cpio "$B" "$SW/uiwarp.cpio.gz"
export SIW_EXTRA_INITRD=$SW/uiwarp.cpio.gz
CONFIG="rev2 crc"
export SIW_RETRY_FAILED=1 # see perf_case: siw's own failures under TCG are retried, and named
uiwarp_policy mpa-revision=2 crc=on
siw_boot stock "$SW/ci.pcap"
for dir in siw-active uiwarp-active; do
  rping_case "$dir"
  perf_case ib_write_bw "$dir" 65536 -n 200
done
# Inside the guest, off the tap: not in the capture. -b: the server posts Writes too, so both
# ends name their path (an end names it once it copies); -D 3: long enough for yama_case's
# poll of `uiwarp conn show`, where 200 Writes under TCG may come and go between two polls.
t1=$SECONDS
for scope in 1 2; do yama_case "$scope" ib_write_bw -b -s 65536 -D 3; done
log "the Yama cases: $((SECONDS - t1)) s"
siw_halt
capture_check "$SW/ci.pcap" on
echo
column -t -s $'\t' "$SW/results"
log "interop-siw: $((SECONDS - t0)) s"
! grep -q $'\tFAIL\t' "$SW/results"
