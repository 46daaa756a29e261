#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# test_run.sh UIWARP-RUN SHIM PROVIDER [SANITIZER-RUNTIME]: uiwarp-run sets SYSFS_PATH, RDMAV_DRIVERS and LD_PRELOAD,
# publishes the tree, passes exit codes through, and locates its files by the documented rule.
source "$(dirname "$0")/../../scripts/lib/common.sh"
test_init
RUN=$1
SHIM=$2
PROVIDER=$3
RT=${4:-}  # ASan trees: the runtime uiwarp-run preloads first (and needs itself, being sanitized)
SUFFIX=-rdmav${PROVIDER##*-rdmav}  # -rdmav<PABI>.so: the private ABI it was built for
export UIWARP_STATE_DIR=$T/state
NS=$UIWARP_STATE_DIR/netns-$(netns_inode)
getvar() { sed -n "s/^$1=//p" <<<"$2"; }

out=$(env -u RDMAV_DRIVERS -u LD_PRELOAD "$RUN" env 2>/dev/null)
check "uiwarp-run env runs" test $? -eq 0
expect_eq "SYSFS_PATH" "$NS/sysfs" "$(getvar SYSFS_PATH "$out")"
expect_eq "RDMAV_DRIVERS: the build-tree provider, minus $SUFFIX" "${PROVIDER%"$SUFFIX"}" \
  "$(getvar RDMAV_DRIVERS "$out")"
expect_match "LD_PRELOAD ends with the shim" "(^|:)$SHIM$" "$(getvar LD_PRELOAD "$out")"
check "the tree is there" test -f "$NS/sysfs/class/infiniband/uiwarp0/node_type"
expect_eq "default device on lo" "lo" "$(cat "$NS/sysfs/class/infiniband/uiwarp0/uiwarp_netdev")"
check "sysfs is a symlink to a content-addressed tree" test -L "$NS/sysfs"
expect_eq "device/net/ names the netdev, as a NIC's device does" "/sys/class/net/lo" \
  "$(readlink "$NS/sysfs/class/infiniband/uiwarp0/device/net/lo")"
# Programs that read /sys/class/infiniband by its fixed path see the tree (shim, sysfs_view).
expect_eq "/sys/class/infiniband/uiwarp0/device/net/ under uiwarp-run" "lo" \
  "$("$RUN" ls /sys/class/infiniband/uiwarp0/device/net/ 2>/dev/null)"
expect_eq "stat of /sys/class/infiniband/uiwarp0/node_type under uiwarp-run" "4: RNIC" \
  "$("$RUN" cat /sys/class/infiniband/uiwarp0/node_type 2>/dev/null)"
if [[ ! -e /sys/class/infiniband ]]; then
  expect_eq "no kernel RDMA: /sys/class/infiniband lists uiwarp's devices" "uiwarp0" \
    "$("$RUN" ls /sys/class/infiniband 2>/dev/null)"
fi
check "other sysfs paths are untouched" "$RUN" test -d /sys/class/net/lo
before=$(readlink "$NS/sysfs")
"$RUN" true
expect_eq "same links: same tree, not rebuilt" "$before" "$(readlink "$NS/sysfs")"

out=$(RDMAV_DRIVERS=rxe LD_PRELOAD=${RT:+$RT:}$SHIM "$RUN" env 2>/dev/null)
expect_eq "RDMAV_DRIVERS is prepended to" "${PROVIDER%"$SUFFIX"}:rxe" \
  "$(getvar RDMAV_DRIVERS "$out")"
expect_eq "LD_PRELOAD holds the shim once" "1" \
  "$(getvar LD_PRELOAD "$out" | tr ':' '\n' | grep -cx "$SHIM")"
if [[ -n $RT ]]; then
  expect_eq "LD_PRELOAD: the sanitizer runtime first, then the shim" "$RT:$SHIM" \
    "$(getvar LD_PRELOAD "$out")"
fi

"$RUN" sh -c 'exit 3'
expect_eq "the command's exit status" "3" "$?"
"$RUN" /nonexistent/cmd 2>/dev/null
expect_eq "command not found: 127" "127" "$?"
"$RUN" 2>/dev/null
expect_eq "no command: 125" "125" "$?"
"$RUN" --bogus true 2>/dev/null
expect_eq "unknown option: 125" "125" "$?"
"$RUN" -- sh -c 'exit 0'
expect_eq "-- ends the options" "0" "$?"

# State dir precedence: UIWARP_STATE_DIR, then XDG_RUNTIME_DIR.
mkdir -m 700 "$T/xdg"
out=$(env -u UIWARP_STATE_DIR XDG_RUNTIME_DIR=$T/xdg "$RUN" env 2>/dev/null)
expect_eq "XDG_RUNTIME_DIR when UIWARP_STATE_DIR is unset" \
  "$T/xdg/netns-$(netns_inode)/sysfs" "$(getvar SYSFS_PATH "$out")"

# Concurrent starts all see a whole tree.
for i in 1 2 3 4 5 6 7 8; do
  "$RUN" sh -c 'test -f "$SYSFS_PATH/class/infiniband_verbs/uverbs0/dev"' &
done
fails=0
for i in 1 2 3 4 5 6 7 8; do wait -n || fails=$((fails + 1)); done
expect_eq "8 concurrent runs" "0" "$fails"

# A copy outside the build tree uses the installed files (absent here), unless overridden.
cp "$RUN" "$T/uiwarp-run"
err=$("$T/uiwarp-run" true 2>&1)
if [[ -n $err ]]; then
  expect_match "outside the build tree: the installed shim is looked for" "shim .* not found" "$err"
else
  ok "outside the build tree: the installed shim is used (uiwarp is installed here)"
fi
out=$(UIWARP_SHIM=$SHIM UIWARP_PROVIDER=/opt/x/libuiwarp$SUFFIX "$T/uiwarp-run" env 2>/dev/null)
expect_eq "UIWARP_PROVIDER overrides" "/opt/x/libuiwarp" "$(getvar RDMAV_DRIVERS "$out")"
expect_match "UIWARP_SHIM overrides" "(^|:)$SHIM$" "$(getvar LD_PRELOAD "$out")"

# UIWARPD_CONFIG names the policy file of the daemon uiwarp-run starts.
mkdir -m 700 "$T/state-conf" "$T/state-badconf"
printf 'mpa-revision = 1\nfirst-fpdu-delay-ms = 30\n' >"$T/good.conf"
echo "no-such-key = 1" >"$T/bad.conf"
UIWARP_STATE_DIR=$T/state-conf UIWARPD_CONFIG=$T/good.conf "$RUN" true
expect_eq "UIWARPD_CONFIG: runs with a good policy file" "0" "$?"
check "UIWARPD_CONFIG: the daemon was started with --config FILE" \
  pgrep -f "uiwarpd --socket $T/state-conf/.* --daemon --config $T/good.conf"
UIWARP_STATE_DIR=$T/state-badconf UIWARPD_CONFIG=$T/bad.conf "$RUN" true 2>/dev/null
expect_eq "UIWARPD_CONFIG: a bad policy file stops uiwarp-run (125)" "125" "$?"
err=$("$(dirname "$RUN")/../cm/uiwarpd" --socket "$T/x.sock" --first-fpdu-delay-ms -1 2>&1)
expect_match "first-fpdu-delay-ms: a negative delay is refused" "bad value '-1' for first-fpdu-delay-ms" "$err"
uiwarpd_stop "$T/state-conf"
finish
