#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# test_pyverbs_suite.sh BUILD_DIR: rdma-core's own pyverbs suite against uiwarp0
# (scripts/pyverbs-suite) when its source is at hand: RDMA_CORE_SRC, or the copy that
# scripts/pyverbs-suite fetched before. Otherwise skipped: the test run does not download.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
version=$(dpkg-query -W -f '${Version}' python3-pyverbs 2>/dev/null || true)
[[ -n $version ]] || { echo "skipped: python3-pyverbs is not installed"; exit 77; }
src=${RDMA_CORE_SRC:-${XDG_CACHE_HOME:-$HOME/.cache}/uiwarp/rdma-core-v${version%%-*}}
if [[ ! -f $src/tests/run_tests.py ]]; then
  echo "skipped: no rdma-core source at $src (run scripts/pyverbs-suite once, or set RDMA_CORE_SRC)"
  exit 77
fi
exec "$here/scripts/pyverbs-suite" -b "$1" -s "$src"
