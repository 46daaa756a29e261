# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# shellcheck shell=bash
# The shell library of tests/ and scripts/: source it, then call what you need. Sourcing only
# defines functions (and the PASS/FAIL counters); nothing runs until called, so scripts with
# `set -euo pipefail` and test scripts alike can use it. Folders add their own helpers on top:
# tests/cm/lib.sh (program pairs, two test hosts), tests/consumers/lib.sh,
# tests/interop/siw/lib.sh (the siw guest), scripts/lib/bench.sh (medians and ratios).

# ---- test results ----------------------------------------------------------------------------

PASS=${PASS:-0}
FAIL=${FAIL:-0}
ok() { PASS=$((PASS + 1)); echo "ok - $*"; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL - $*"; }
# check DESCRIPTION CMD...: passes if CMD succeeds
check() {
  local what=$1
  shift
  if "$@"; then ok "$what"; else bad "$what"; fi
}
# expect_eq DESCRIPTION EXPECTED ACTUAL
expect_eq() {
  if [[ "$2" == "$3" ]]; then ok "$1"; else bad "$1: expected '$2', got '$3'"; fi
}
# expect_match DESCRIPTION REGEX ACTUAL
expect_match() {
  if [[ "$3" =~ $2 ]]; then ok "$1"; else bad "$1: '$3' does not match /$2/"; fi
}
# finish: the summary line; exits 0 if nothing failed, else 1.
finish() {
  echo "$PASS passed, $FAIL failed"
  ((FAIL == 0))
  exit
}

# ---- scratch directory and uiwarpd ------------------------------------------------------------

# test_init [NAME]: what every test script starts with: `set -u` and a scratch directory $T
# (/tmp/NAME.XXXXXX, default uiwarp-it) that goes on exit, with every uiwarpd started under it.
test_init() {
  set -u
  scratch_dir "${1:-uiwarp-it}"
}
# scratch_dir NAME: T=/tmp/NAME.XXXXXX, removed on exit (EXIT trap) together with the uiwarpd
# instances whose socket lies in it (uiwarp-run starts one per state dir).
scratch_dir() {
  T=$(mktemp -d "/tmp/$1.XXXXXX")
  trap scratch_cleanup EXIT
}
scratch_cleanup() {
  [[ -n ${T:-} && -d $T ]] || return 0
  uiwarpd_stop "$T"
  chmod -R u+w "$T" 2>/dev/null
  rm -rf "$T"
}
# state_dir [DIR]: a private UIWARP_STATE_DIR (default $T/state) for what follows, so the programs
# started through uiwarp-run get a uiwarpd of their own, never one of another build or test.
state_dir() {
  export UIWARP_STATE_DIR=${1:-$T/state}
  # shellcheck disable=SC2174 # -m for the last level only: the state dir itself is private
  mkdir -m 700 -p "$UIWARP_STATE_DIR"
}
# uiwarpd_stop [DIR]: stops the uiwarpd instances whose socket lies under DIR (default
# $UIWARP_STATE_DIR) and waits (up to 2 s) until they are gone.
uiwarpd_stop() {
  local dir=${1:-${UIWARP_STATE_DIR:?uiwarpd_stop: no directory and no UIWARP_STATE_DIR}} i
  pkill -f "uiwarpd --socket ${dir%/}/" 2>/dev/null || true
  for ((i = 0; i < 40; i++)); do
    pgrep -f "uiwarpd --socket ${dir%/}/" >/dev/null || return 0
    sleep 0.05
  done
}

# ---- ports and namespaces ---------------------------------------------------------------------

# free_port: a TCP port on loopback that nothing uses right now.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
# wait_listen [-n NETNS] [-t SECONDS] PORT: waits until something listens on TCP PORT (in network
# namespace NETNS), at most SECONDS (default 30); 1 if nothing did. A loaded machine must not
# start a client before its server's rdma_listen (uiwarpd's TCP listener) is in place.
wait_listen() {
  local ns=() secs=30 i
  while (($# > 1)); do
    case $1 in
      -n) ns=(ip netns exec "$2"); shift 2 ;;
      -t) secs=$2; shift 2 ;;
      *) break ;;
    esac
  done
  for ((i = 0; i < secs * 10; i++)); do
    [[ -n $("${ns[@]}" ss -Hltn "sport = :$1" 2>/dev/null) ]] && return 0
    sleep 0.1
  done
  return 1
}
# wait_listed CLI PORT [STATUS_ARGS...]: waits (about 3 s at most) until `CLI status STATUS_ARGS`
# lists a listener on 127.0.0.1:PORT, as after uiwarpd's restart; LISTED_MS says how long that
# took. 1 if it never did.
wait_listed() {
  local cli=$1 port=$2 t0 i
  shift 2
  t0=$(date +%s%N)
  for ((i = 0; i < 150; i++)); do
    if "$cli" status "$@" 2>/dev/null | grep -qE "^  127\.0\.0\.1:$port pid"; then
      LISTED_MS=$((($(date +%s%N) - t0) / 1000000))
      return 0
    fi
    sleep 0.02
  done
  LISTED_MS=$((($(date +%s%N) - t0) / 1000000))
  return 1
}
# eventually SECONDS CMD...: runs CMD every 20 ms until it succeeds, at most SECONDS; 1 if it
# never did. For a state that follows an action a moment later (a link change reaching uiwarpd).
eventually() {
  local secs=$1 i
  shift
  for ((i = 0; i < secs * 50; i++)); do
    "$@" && return 0
    sleep 0.02
  done
  return 1
}
# conns_listed CLI N: `CLI conn show` lists N connections, each with its path named (which it
# is once the connection is in use).
conns_listed() {
  local out
  out=$("$1" conn show 2>/dev/null)
  [[ $(head -n 1 <<<"$out") == "connections: $2" ]] && (($(grep -c '; path ' <<<"$out") == $2))
}
# wait_conns CLI N [SECONDS]: waits (default 30 s at most) until conns_listed CLI N; 1 if never.
wait_conns() { eventually "${3:-30}" conns_listed "$1" "$2"; }
# dpid [NETNS_INODE]: the pid of the uiwarpd serving UIWARP_STATE_DIR (its daemon for the
# network namespace of that inode, if given), or nothing.
dpid() { pgrep -f "uiwarpd --socket ${UIWARP_STATE_DIR%/}/${1:+netns-$1/}" | head -n 1; }
# skip WHY...: ends the script as skipped (exit 77, ctest's SKIP_RETURN_CODE) and says why,
# after SKIP_AS (the script's name) if set.
skip() {
  echo "${SKIP_AS:+$SKIP_AS: }skipped: $*"
  exit 77
}
# netns_inode: the inode of this network namespace (uiwarp's state is per namespace).
netns_inode() { stat -L -c %i /proc/self/ns/net; }

# rping_lost_exit_race FILE: rping's output FILE shows Debian 12's rping (rdma-core 44) losing
# its own exit race: after the last CM event its main thread destroys the event channel while
# its CM thread asks for the next event, which fails with EBADF, and rping exits 255 although
# the test passed. It happens over the kernel's rdma_cm too; fixed upstream by rdma-core PR
# #1622 ("rping: Fix spurious failure return codes", an eventfd ends the CM thread).
# rping's stdout reaches the file in 4 KiB blocks and its stderr at once, so the error line may
# stand before the last block's tail (a piece of a "ping data" line): the check is that the error
# line is there and no other line reports an error (a server's closing "wait for RDMA_READ_ADV
# state 10" is how every rping server ends).
rping_lost_exit_race() {
  local race='rdma_get_cm_event: Bad file descriptor'
  grep -q 'DISCONNECT EVENT' "$1" && grep -qx "$race" "$1" &&
    ! grep -v -e '^\(server \)\?ping data' -e "^$race\$" -e '^wait for RDMA_READ_ADV state 10$' "$1" |
      grep -qE 'error|[Ff]ail|ERRNO|state [0-9]|Bad file'
}
# rping_exit RC FILE: RC, or 0 when RC is rping's 255 from that race (rping_lost_exit_race).
rping_exit() {
  if (($1 == 255)) && rping_lost_exit_race "$2"; then echo 0; else echo "$1"; fi
}
