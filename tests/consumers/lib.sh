# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# Helpers for tests/consumers: the connection tests' helpers (run_pair, two_hosts, ...) plus a
# skip for programs that are not installed.
source "$(dirname "${BASH_SOURCE[0]}")/../cm/lib.sh"
CONSUMERS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# need PACKAGE PROGRAM...: skips the test (77) unless every PROGRAM is installed.
need() {
  local pkg=$1 p
  shift
  for p in "$@"; do
    if ! command -v "$p" >/dev/null && [[ ! -e $p ]]; then
      echo "skipped: $p is not installed (Debian package $pkg; scripts/deps installs it)"
      exit 77
    fi
  done
}
# Programs that leave files in their working directory (libfabric's crash backtraces) leave
# them in the test's temporary directory.
cd "$T"
# MODE (first argument of every consumers test): loopback, or netns for two hosts (two_hosts).
MODE=${1:-loopback}
# where NAME: "" on loopback, " across namespaces" otherwise, for the results.
where() { [[ $MODE == netns ]] && echo " across namespaces" || true; }
