#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# Stock rping and ib_read_bw over uiwarp on loopback under each MPA policy uiwarpd offers (its
# configuration file, through UIWARPD_CONFIG): RFC 5044 rev 1 with and without CRC, rev 2 without
# peer-to-peer mode, with the Read RTR, with markers, with siw's large-FPDU flag, and with the
# initiator holding its first FPDU (first-fpdu-delay-ms, for siw's start-up race). Both ends use
# the same daemon, so each policy meets itself.
# rev 1 carries no IRD/ORD (RFC 6581 §9.1 is rev 2's): the CONNECT_REQUEST then reports
# uiwarpd's own IRD/ORD, not 0, or rping's server (rdma_accept with no parameters, so its ORD
# is the peer IRD reported) could post no RDMA Read ("post send error 22"; found against siw,
# which reports 0).
source "$(dirname "$0")/lib.sh"
for policy in "mpa-revision=1" "mpa-revision=1 crc=off" "p2p=off" "rtr=read" "markers=on" \
  "large-fpdu=off" "first-fpdu-delay-ms=100"; do
  conf="$T/uiwarpd-${policy// /_}.conf"
  : >"$conf"
  for kv in $policy; do echo "${kv%%=*} = ${kv#*=}" >>"$conf"; done
  # A daemon of its own for each policy: a state dir of its own.
  export UIWARPD_CONFIG=$conf
  state_dir "$T/state-${policy// /_}"
  label=" [$policy]"
  p=$(free_port)
  PAIR_LABEL=$label run_pair "rping-${policy// /_}" rping -s -a 127.0.0.1 -p "$p" -C 100 -S 4096 -v -- \
    rping -c -a 127.0.0.1 -p "$p" -C 100 -S 4096 -v
  expect_eq "rping client verified 100 pings$label" 100 "$(grep -c '^ping data' "$T/rping-${policy// /_}.client")"
  expect_eq "rping server verified 100 pings$label" 100 "$(grep -c '^server ping data' "$T/rping-${policy// /_}.server")"
  p=$(free_port)
  PAIR_LABEL=$label run_pair "read-${policy// /_}" ib_read_bw -R -p "$p" -n 200 -- ib_read_bw -R -p "$p" -n 200 127.0.0.1
  check "ib_read_bw reports a result line$label" grep -qE '^ *65536 +200 ' "$T/read-${policy// /_}.client"
  uiwarpd_stop
done

# Per device: `uiwarp link add ... KEY VALUE` (links.conf, the device's uiwarp_mpa attribute),
# applied by uiwarpd to that device's connections over its own policy; per connection:
# UIWARP_MPA_POLICY in the program's environment, which wins. uiwarp conn show names the result.
unset UIWARPD_CONFIG
state_dir "$T/state-links"
UIWARP=$UIWARP_CLI
"$UIWARP" link add uiwarp0 netdev lo rtr read crc optional >/dev/null
expect_match "uiwarp link show names the device's MPA policy" \
  "uiwarp0/1 .* netdev lo mpa rtr=read crc=optional" "$("$UIWARP" link show)"
out=$("$UIWARP" link add uiwarp1 netdev lo mpa-revision 3 2>&1)
expect_match "uiwarp link add refuses a bad value, naming it" "bad value '3' for mpa-revision" "$out"
out=$("$UIWARP" link add uiwarp1 netdev lo flavour mild 2>&1)
expect_match "uiwarp link add refuses an unknown key, naming it" "'flavour' is not an MPA policy key" "$out"
# both_rts FILE: uiwarp conn show, into FILE, lists both ends in RTS (an ASan build beside other
# work can take seconds to get there).
both_rts() {
  "$UIWARP" conn show >"$1" 2>&1
  [[ $(grep -c ' RTS ' "$1") == 2 ]]
}
# conn_show_during LABEL ENV... : a long rping under ENV (its server on SERVER_ADDR, default
# 127.0.0.1), its connections as conn show lists them.
conn_show_during() {
  local label=$1 p
  shift
  p=$(free_port)
  env "$@" "$RUN" rping -s -a "${SERVER_ADDR:-127.0.0.1}" -p "$p" -C 100000 -S 64 >/dev/null 2>&1 &
  local s=$!
  wait_listen "$p"
  env "$@" "$RUN" rping -c -a 127.0.0.1 -p "$p" -C 100000 -S 64 >/dev/null 2>&1 &
  local c=$!
  eventually 30 both_rts "$T/conn-$label"
  kill $c $s 2>/dev/null
  wait $c $s 2>/dev/null
  cat "$T/conn-$label"
}
out=$(conn_show_during link)
expect_eq "the device's policy: both ends without CRC" 2 "$(grep -c ' crc off ' <<<"$out")"
check "the device's policy: the initiator sent a Read RTR" grep -q 'active IETF .* p2p rtr read' <<<"$out"
# A listener on the wildcard address: uiwarpd applies the policy of the device the connection
# arrives on.
out=$(SERVER_ADDR=0.0.0.0 conn_show_during wildcard)
expect_eq "the device's policy on a wildcard listener: both ends without CRC" 2 \
  "$(grep -c ' crc off ' <<<"$out")"
out=$(conn_show_during env UIWARP_MPA_POLICY="mpa-revision=1 crc=required")
expect_eq "UIWARP_MPA_POLICY wins: rev 1 (no P2P), CRC on" 2 "$(grep -c ' crc on markers -/- p2p off ' <<<"$out")"
p=$(free_port)
out=$(UIWARP_MPA_POLICY="rtr=sideways" timeout 20 "$RUN" rping -c -a 127.0.0.1 -p "$p" -C 1 2>&1)
expect_match "a bad UIWARP_MPA_POLICY fails the connect, naming the value" \
  "MPA policy .*bad value 'sideways' for rtr" "$out"
# UIWARP_SAME_HOST=off: the shim adds same-host=off to the policy it sends, after the program's.
out=$(UIWARP_SAME_HOST=off UIWARP_MPA_POLICY="rtr=sideways" timeout 20 "$RUN" rping -c -a 127.0.0.1 \
  -p "$p" -C 1 2>&1)
expect_match "UIWARP_SAME_HOST=off: the connect's policy ends with same-host=off" \
  "MPA policy '.*rtr=sideways same-host=off': bad value 'sideways' for rtr" "$out"
out=$(conn_show_during same-host-off UIWARP_SAME_HOST=off)
expect_eq "UIWARP_SAME_HOST=off: both ends connect, without the same-host path" 2 \
  "$(grep -c ' RTS .* recv-wait ' <<<"$out")"
expect_eq "... neither end agreed on it" 0 "$(grep -c ' same-host recv-wait ' <<<"$out")"
uiwarpd_stop
finish
