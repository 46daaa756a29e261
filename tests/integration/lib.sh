# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# Helpers for the integration test scripts: check/expect, a summary line, temp dir cleanup.
set -u
PASS=0
FAIL=0
T=$(mktemp -d /tmp/uiwarp-it.XXXXXX)
# uiwarpd instances that uiwarp-run started for state dirs under $T go with it.
trap 'pkill -f "uiwarpd --socket $T/" 2>/dev/null; chmod -R u+w "$T" 2>/dev/null; rm -rf "$T"' EXIT

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
finish() {
  echo "$PASS passed, $FAIL failed"
  ((FAIL == 0))
  exit
}
netns_inode() { stat -L -c %i /proc/self/ns/net; }
