#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# test_link.sh UIWARP: `uiwarp link add/show/del` round trip in a fresh state dir, and the CLI's
# conventions (rdma(8)'s): -j/-p, a bare object shows, exit status 0/1/2, --version.
source "$(dirname "$0")/../../scripts/lib/common.sh"
test_init
U=$1
export UIWARP_STATE_DIR=$T/state
NS=$UIWARP_STATE_DIR/netns-$(netns_inode)

expect_eq "show with no link: the default" \
  "link uiwarp0/1 state ACTIVE physical_state LINK_UP netdev lo (default)" "$("$U" link show)"
check "add uiwarp1 netdev lo" "$U" link add uiwarp1 netdev lo
expect_eq "links.conf" "uiwarp1 lo" "$(cat "$NS/links.conf")"
expect_eq "show lists it (and no default)" \
  "link uiwarp1/1 state ACTIVE physical_state LINK_UP netdev lo" "$("$U" link show)"
expect_eq "show NAME" "link uiwarp1/1 state ACTIVE physical_state LINK_UP netdev lo" \
  "$("$U" link show uiwarp1)"
check "the sysfs tree was refreshed" test -f "$NS/sysfs/class/infiniband/uiwarp1/node_type"
check "the default is gone from it" test ! -e "$NS/sysfs/class/infiniband/uiwarp0"

err=$("$U" link add uiwarp1 netdev lo 2>&1)
check "add of an existing name fails" test $? -ne 0
expect_match "with a message" "already exists" "$err"
check "a second device on the same netdev fails" bash -c "! '$U' link add uiwarp2 netdev lo 2>/dev/null"
check "a name without the uiwarp prefix fails" bash -c "! '$U' link add siw0 netdev lo 2>/dev/null"
check "a missing netdev fails" bash -c "! '$U' link add uiwarp3 netdev nonexistent0 2>/dev/null"
check "netdev is required" bash -c "! '$U' link add uiwarp3 2>/dev/null"
check "'type uiwarp' is accepted" bash -c "'$U' link add uiwarp4 type uiwarp netdev lo 2>&1 | grep -q 'already has link'"
check "show of an unknown name fails" bash -c "! '$U' link show uiwarp9 2>/dev/null"
expect_eq "a bare 'uiwarp link' shows, as rdma link does" "$("$U" link show)" "$("$U" link)"
expect_eq "-j link: rdma -j's objects" "uiwarp1 1 ACTIVE LINK_UP lo False" \
  "$("$U" -j link | python3 -c 'import json, sys
(l,) = json.load(sys.stdin)
print(l["ifname"], l["port"], l["state"], l["physical_state"], l["netdev"], l["default"])')"
check "-j -p link: indented JSON" bash -c "'$U' -j -p link | python3 -c 'import json, sys; json.load(sys.stdin)' && '$U' -j -p link | grep -q '^    {'"
"$U" link frobnicate >/dev/null 2>&1
expect_eq "a wrong command line exits 2" 2 "$?"
"$U" link show uiwarp9 >/dev/null 2>&1
expect_eq "a command that fails exits 1" 1 "$?"
expect_match "--version" "^uiwarp [0-9]+\.[0-9]+\.[0-9]+$" "$("$U" --version)"
expect_eq "links.conf unchanged by the failures" "uiwarp1 lo" "$(cat "$NS/links.conf")"

check "del uiwarp1" "$U" link del uiwarp1
check "del of an unknown name fails" bash -c "! '$U' link del uiwarp1 2>/dev/null"
expect_eq "links.conf empty" "" "$(cat "$NS/links.conf")"
expect_match "show: the default again" "netdev lo \(default\)$" "$("$U" link show)"

# A device's MPA policy (uiwarp link add ... KEY VALUE): links.conf, show, and the sysfs
# attribute uiwarp_mpa that the shim passes to uiwarpd.
check "add with an MPA policy" "$U" link add uiwarp1 netdev lo mpa-revision 1 crc required
expect_eq "links.conf keeps the policy" "uiwarp1 lo mpa-revision=1 crc=required" "$(cat "$NS/links.conf")"
expect_eq "the sysfs tree carries it" "mpa-revision=1 crc=required" \
  "$(cat "$NS/sysfs/class/infiniband/uiwarp1/uiwarp_mpa")"
check "del uiwarp1 again" "$U" link del uiwarp1
check "the default device is back" test -f "$NS/sysfs/class/infiniband/uiwarp0/node_type"
check "a device without a policy has no uiwarp_mpa" test ! -e "$NS/sysfs/class/infiniband/uiwarp0/uiwarp_mpa"
check "the tree has the default device again" test -f "$NS/sysfs/class/infiniband/uiwarp0/node_type"
check "'delete' is an alias" bash -c "'$U' link add uiwarp5 netdev lo && '$U' link delete uiwarp5"
check "state dir is private" test "$(stat -c %a "$NS")" = 700
finish
