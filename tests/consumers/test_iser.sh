#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# test_iser.sh loopback|netns: iSCSI over iSER entirely in user space. Debian's stock tgtd
# (package tgt) serves an iSER target with one file-backed LUN; libiscsi's tools (libiscsi-bin)
# and QEMU's iscsi block driver (qemu-utils, qemu-block-extra: transport=iser) are the
# initiators. tgtd and every initiator run under uiwarp-run. On loopback both sides share one
# network namespace (a private one when root: see "Ports" below); netns puts the target in one
# namespace and the initiators in the other (two_hosts).
#
# Checks: iscsi-inq (IET VIRTUAL-DISK, a direct-access device) and iscsi-readcapacity16 (the
# LUN's last LBA and block length); data both ways: qemu-io writes two patterns (SCSI WRITEs,
# which the target fetches with RDMA Reads), the LUN's file holds them, a second qemu-io reads
# them back (SCSI READs, which the target places with RDMA Writes) together with a pattern the
# test put into the file itself, and `qemu-img convert` reads the whole LUN, identical to the
# file; iscsi-perf for 3 s with 4 KiB and 128 KiB reads (its IOPS and MB/s in the ok line);
# and tgtd is still alive at the end.
#
# What Debian 12's programs need, each a bug or limit of the program itself, not of uiwarp:
#  - tgt 1.0.85's iSER login checks the address ACL and the initiator-name ACL separately
#    (usr/iscsi/iser_text.c), where its TCP login (iscsid.c) wants either to pass: an iSER
#    target needs both `tgtadm --lld iser --op bind --mode target --tid 1 -I ALL` and
#    `--op bind ... --initiator-name IQN`, and every initiator here logs in with that IQN (-i,
#    initiator-name=). Fixed upstream by tgt b73c64d (v1.0.95).
#  - tgt 1.0.85's `--iser port=N` tests errno after strtol without clearing it first; errno is
#    left non-zero from start-up, so every port is refused ("iser_param_parser(3595) invalid
#    port supplied") and the iSER listener is always on 3260, on every address. tgtd's
#    iSCSI/TCP portal moves to 3262 (`--iscsi portal=ADDR:3262`) so that 3260 is the iSER
#    listener's (uiwarpd's TCP listener, as for any RDMA CM listener under uiwarp).
#  - libiscsi 1.19's iSER transport carries at most 256 KiB per SCSI command (its pre-registered
#    DATA_BUFFER_SIZE; the message says "Libiscsi-iSER supports messages smaller than 512k").
#    tgt's Block Limits VPD gives no maximum transfer length, so QEMU sends a 1 MiB write as one
#    command; libiscsi refuses it after it has used up a CmdSN, and the target then holds every
#    later command (QEMU's SYNCHRONIZE CACHE at close, its NOP-Outs) waiting for the missing
#    CmdSN: QEMU reports "iSCSI: NOP timeout. Reconnecting...", and the reconnect fails, since
#    libiscsi 1.19 reconnects over TCP whatever the transport. Fixed upstream in libiscsi 1.20.0
#    (68ce336, "iser: dynamic memory region allocator"; 3ccbceb, "fix wrong transport type for
#    iser reconnect"). tgt has a limit of its own too: one RDMA buffer per command, 512 KiB
#    (`--iser buf_sz_kb`; a larger command fails with E2BIG, "rdma-rd size:... too big"), also
#    absent from its Block Limits VPD. The QEMU initiators therefore go through QEMU's blkdebug
#    driver with max-transfer=262144, which splits each request into commands of at most
#    256 KiB.
#  - Connections: tgt 1.0.85's iSER code frees a connection only on RDMA_CM_EVENT_TIMEWAIT_EXIT
#    (iser_cm_timewait_exit drops the reference taken before rdma_accept), an InfiniBand CM
#    event that the kernel's iWARP CM never reports (cma_iw_handler turns IW_CM_EVENT_CLOSE
#    into DISCONNECTED only), nor does uiwarp. Every ended session therefore stays, with its
#    I_T nexus (the test notes how many), and `tgtadm --op delete --mode target --force` then
#    crashes tgtd (SIGSEGV: conn_close calls the iSER transport's ep_close, which is NULL).
#    The test stops tgtd with SIGKILL.
#
# Ports: tgtd's control socket is private (TGT_IPC_SOCKET in the test's directory, -C 1), so
# another tgtd on the machine is not disturbed. The iSER port cannot move (above), so as root
# the loopback case runs in a network namespace of its own (lo only); without root it uses the
# host's namespace and skips when 3260 is taken.
source "$(dirname "$0")/lib.sh"
PATH=$PATH:/usr/sbin:/sbin
need tgt tgtd tgtadm
need libiscsi-bin iscsi-inq iscsi-readcapacity16 iscsi-perf
need qemu-utils qemu-io qemu-img
iscsi_module=(/usr/lib/*/qemu/block-iscsi.so)
need qemu-block-extra "${iscsi_module[0]}"

IQN=iqn.2003-01.org.uiwarp.test:iser$$
INI=iqn.2003-01.org.uiwarp.test:initiator
ISER_PORT=3260 # tgt 1.0.85's, fixed (above)
LUN_MB=64
export TGT_IPC_SOCKET=$T/tgtd.ipc
CPORT=1

OWN_NS=
TGTD_JOB=
# stop_target: SIGKILL. tgtd 1.0.85 ignores SIGTERM, and its orderly way out (tgtadm --op delete
# --mode target --force, then --mode system) crashes it here: see "Connections" above.
stop_target() {
  local pid
  pid=$(cat "$T/tgtd.pid" 2>/dev/null) && kill -9 "$pid" 2>/dev/null
  [[ -z $TGTD_JOB ]] || wait "$TGTD_JOB" 2>/dev/null
  rm -f "$T/tgtd.pid"
  TGTD_JOB=
}
cleanup() {
  stop_target
  if [[ -n ${HOST_A:-} ]]; then
    two_hosts_cleanup
    return
  fi
  if [[ -n $OWN_NS ]]; then
    uiwarpd_stop "$T"
    ip netns pids "$OWN_NS" 2>/dev/null | xargs -r kill -9
    ip netns del "$OWN_NS" 2>/dev/null
  fi
  scratch_cleanup
}

if [[ $MODE == netns ]]; then
  two_hosts 10.231.28
  SRV=$IP_B TNS=(ip netns exec "$HOST_B") INS=(ip netns exec "$HOST_A") TNAME=$HOST_B
  PORTAL_PORT=3262
elif [[ $(id -u) == 0 ]] && command -v ip >/dev/null; then
  OWN_NS=uwi$$
  ip netns add "$OWN_NS" && ip -n "$OWN_NS" link set lo up
  SRV=127.0.0.1 TNS=(ip netns exec "$OWN_NS") INS=("${TNS[@]}") TNAME=$OWN_NS
  PORTAL_PORT=3262
else
  if [[ -n $(ss -Hltn "sport = :$ISER_PORT" 2>/dev/null) ]]; then
    echo "skipped: TCP port $ISER_PORT is taken, and tgt 1.0.85's iSER port cannot move (run as root for a namespace of its own)"
    exit 77
  fi
  SRV=127.0.0.1 TNS=() INS=() TNAME=
  PORTAL_PORT=$(free_port)
fi
trap cleanup EXIT
label=$(where)
URL=iser://$SRV:$ISER_PORT/$IQN/1

# The LUN: a sparse file of LUN_MB MiB, with a pattern of the test's own at 8 MiB (0xc3, 512 KiB)
# that only the target side ever wrote.
LUN=$T/lun.img
truncate -s "${LUN_MB}M" "$LUN"
# pattern BYTE_OCTAL COUNT: COUNT octets of that value on stdout.
pattern() { head -c "$2" /dev/zero | tr '\0' "\\$1"; }
pattern 303 524288 | dd of="$LUN" bs=64k oflag=seek_bytes seek=8388608 conv=notrunc status=none

# tgtd in the foreground, its iSCSI/TCP portal on PORTAL_PORT, its iSER listener on 3260.
# pool_sz_mb=128: the smallest RDMA buffer pool it takes (its default registers 1 GiB).
# (tgtd -p writes its pid file only as a daemon: a shell writes its own pid, then becomes tgtd.)
# shellcheck disable=SC2016 # $$ and $@ are the inner shell's
timeout -s KILL 300 "${TNS[@]}" "$RUN" sh -c 'echo $$ >"$0"; exec "$@"' "$T/tgtd.pid" \
  tgtd -f -C "$CPORT" --iscsi "portal=$SRV:$PORTAL_PORT" --iser pool_sz_mb=128 \
  >"$T/tgtd.log" 2>&1 &
TGTD_JOB=$!
wait_listen ${TNAME:+-n "$TNAME"} -t 60 "$PORTAL_PORT" &&
  wait_listen ${TNAME:+-n "$TNAME"} -t 30 "$ISER_PORT"
listening=$?
tgtadm_() { timeout 30 "${TNS[@]}" tgtadm -C "$CPORT" --lld iser "$@" >>"$T/tgtadm.log" 2>&1; }
if ((listening == 0)) &&
  tgtadm_ --op new --mode target --tid 1 -T "$IQN" &&
  tgtadm_ --op new --mode logicalunit --tid 1 --lun 1 -b "$LUN" &&
  tgtadm_ --op bind --mode target --tid 1 -I ALL &&
  tgtadm_ --op bind --mode target --tid 1 --initiator-name "$INI"; then
  ok "tgtd under uiwarp-run: iSER target with a ${LUN_MB} MiB file-backed LUN$label"
else
  bad "tgtd under uiwarp-run: iSER target$label (listening: $listening)"
  tail -n 20 "$T/tgtd.log" "$T/tgtadm.log" 2>/dev/null
  finish
fi

# ---- libiscsi's tools ------------------------------------------------------------------------
out=$(timeout 60 "${INS[@]}" "$RUN" iscsi-inq -i "$INI" "$URL" 2>&1)
rc=$?
if ((rc == 0)) && grep -q '^Peripheral Device Type:DIRECT_ACCESS' <<<"$out" &&
  grep -q '^Vendor:IET' <<<"$out" && grep -q '^Product:VIRTUAL-DISK' <<<"$out"; then
  ok "iscsi-inq $URL$label: $(sed -n 's/^Vendor://p' <<<"$out" | xargs) $(sed -n 's/^Product://p' <<<"$out" | xargs), DIRECT_ACCESS"
else
  bad "iscsi-inq $URL$label (exit $rc)"
  tail -n 10 <<<"$out"
fi

last_lba=$((LUN_MB * 1048576 / 512 - 1))
out=$(timeout 60 "${INS[@]}" "$RUN" iscsi-readcapacity16 -i "$INI" "$URL" 2>&1)
rc=$?
if ((rc == 0)) && grep -qx "RETURNED LOGICAL BLOCK ADDRESS:$last_lba" <<<"$out" &&
  grep -qx 'LOGICAL BLOCK LENGTH IN BYTES:512' <<<"$out"; then
  ok "iscsi-readcapacity16$label: last LBA $last_lba, 512-byte blocks ($LUN_MB MiB)"
else
  bad "iscsi-readcapacity16$label (exit $rc; wanted last LBA $last_lba, 512-byte blocks)"
  tail -n 10 <<<"$out"
fi

# ---- QEMU: data both ways ----------------------------------------------------------------------
# blkdebug's max-transfer keeps each SCSI command within libiscsi 1.19's 256 KiB (above).
IMG="driver=blkdebug,max-transfer=262144,image.driver=iscsi,image.transport=iser"
IMG+=",image.portal=$SRV:$ISER_PORT,image.target=$IQN,image.lun=1,image.initiator-name=$INI"
# qemu_io NAME CMD...: qemu-io on the LUN with -c CMD for each; output in $T/NAME. 0 if it
# exited 0 and reported no failed command.
qemu_io() {
  local name=$1 c args=()
  shift
  for c in "$@"; do args+=(-c "$c"); done
  timeout 90 "${INS[@]}" "$RUN" qemu-io --image-opts "$IMG" "${args[@]}" >"$T/$name" 2>&1 &&
    ! grep -qiE 'failed|error|timeout' "$T/$name"
}
# 1 MiB of 0xa5 at 0, 768 KiB of 0x5a at 40 MiB.
if qemu_io write 'write -P 0xa5 0 1M' 'write -P 0x5a 40M 768k' &&
  grep -q '^wrote 1048576/1048576 bytes at offset 0$' "$T/write" &&
  grep -q '^wrote 786432/786432 bytes at offset 41943040$' "$T/write"; then
  ok "qemu-io (iscsi, transport=iser) writes 1 MiB of 0xa5 at 0 and 768 KiB of 0x5a at 40 MiB (RDMA Reads by the target)$label"
else
  bad "qemu-io writes over iSER$label"
  tail -n 10 "$T/write"
fi
if cmp -s -n 1048576 <(pattern 245 1048576) "$LUN" &&
  cmp -s -i 0:41943040 -n 786432 <(pattern 132 786432) "$LUN" &&
  cmp -s -i 0:1048576 -n 65536 /dev/zero "$LUN"; then
  ok "the LUN's file holds both patterns, and the octets after the first are still zero$label"
else
  bad "the LUN's file does not hold what qemu-io wrote$label"
  od -A d -t x1 -N 64 "$LUN" | head -n 4
fi
# A new session reads back both, the target's own 0xc3 at 8 MiB, and zeros after the first.
if qemu_io read 'read -P 0xa5 0 1M' 'read -P 0x5a 40M 768k' 'read -P 0xc3 8M 512k' \
  'read -P 0 1M 64k' &&
  (($(grep -cE '^read [0-9]+/[0-9]+ bytes at offset' "$T/read") == 4)); then
  ok "qemu-io reads back 0xa5, 0x5a, the target's 0xc3 at 8 MiB and zeros at 1 MiB (RDMA Writes by the target)$label"
else
  bad "qemu-io reads over iSER$label"
  tail -n 10 "$T/read"
fi
# The whole LUN through qemu-img convert (64 MiB of SCSI READs), identical to the file.
if timeout 120 "${INS[@]}" "$RUN" qemu-img convert --image-opts "$IMG" -O raw "$T/copy.raw" \
  >"$T/convert" 2>&1 && cmp -s "$T/copy.raw" "$LUN"; then
  ok "qemu-img convert copies the whole LUN ($LUN_MB MiB), identical to its file$label"
else
  bad "qemu-img convert of the LUN$label"
  tail -n 10 "$T/convert"
fi
rm -f "$T/copy.raw"

# ---- iscsi-perf ----------------------------------------------------------------------------------
# iscsi-perf -b BLOCKS -t 3: sequential READs, 32 in flight; its last line
# "iops average N (M MB/s)".
for blocks in 8 256; do
  name=perf-$((blocks / 2))k
  timeout 60 "${INS[@]}" "$RUN" iscsi-perf -i "$INI" -t 3 -b "$blocks" "$URL" >"$T/$name" 2>&1
  rc=$?
  avg=$(tr '\r' '\n' <"$T/$name" | sed -nE 's/^iops average ([0-9]+) \(([0-9]+) MB\/s\).*/\1 IOPS, \2 MB\/s/p' | tail -n 1)
  if ((rc == 0)) && [[ -n $avg && $avg != "0 IOPS"* ]] && grep -q '^finished\.' "$T/$name"; then
    ok "iscsi-perf -t 3, $((blocks / 2)) KiB READs, 32 in flight$label: $avg"
  else
    bad "iscsi-perf -t 3 -b $blocks$label (exit $rc)"
    tr '\r' '\n' <"$T/$name" | tail -n 6
  fi
done

# tgtd took every connection, and every I/O, without dying (a uiwarp thread that does not block
# tgtd's SIGUSR2 would take that signal and its default action: death).
pid=$(cat "$T/tgtd.pid" 2>/dev/null)
if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
  ok "tgtd is still running after all the sessions$label"
  # tgt keeps each ended iSER session (no TIMEWAIT_EXIT on iWARP, above).
  nexus=$(timeout 30 "${TNS[@]}" tgtadm -C "$CPORT" --lld iser --op show --mode target 2>/dev/null |
    grep -c 'I_T nexus: [0-9]')
  echo "note - tgtd still lists $nexus I_T nexuses, one per ended session (tgt's iSER waits for RDMA_CM_EVENT_TIMEWAIT_EXIT, which iWARP never reports)$label"
else
  bad "tgtd died$label"
  tail -n 20 "$T/tgtd.log"
fi
finish
