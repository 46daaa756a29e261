#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# The tests build with Catch2 2 (Debian 12) and Catch2 3 (Debian 13, sid), so they use only
# what both offer (tests/catch_compat.hpp): TEST_CASE, SECTION, REQUIRE/CHECK and their
# _FALSE/_NOTHROW/_THROWS forms, STATIC_REQUIRE, INFO, CAPTURE, WARN, FAIL, SUCCEED and
# GENERATE with its generators. Matchers are not in that set: Catch2 3 reads Contains on a
# string as ContainsElement and refuses to compile, which CI (Catch2 2) never sees. Exit 77
# (skipped) outside a git checkout.
set -u
SRC=${1:?usage: check_catch2.sh SOURCE_DIR}
cd "$SRC" || exit 1
git rev-parse --git-dir >/dev/null 2>&1 || { echo "SKIP: not a git checkout"; exit 77; }
pattern='Catch::Matchers|_THAT[[:space:]]*\(|catch2/catch\.hpp|catch2/catch_all\.hpp|catch2/matchers|CATCH_CONFIG_MAIN|Catch::Approx|[^A-Za-z_]Approx[[:space:]]*\(|TEMPLATE_TEST_CASE|TEMPLATE_LIST_TEST_CASE'
hits=$(git grep -nE "$pattern" -- 'tests/*.cpp' 'tests/*.hpp' ':!tests/catch_compat.hpp')
if [[ -n $hits ]]; then
  echo "$hits" | sed 's/^/FAIL - outside what Catch2 2 and 3 both offer (tests\/catch_compat.hpp): /'
  exit 1
fi
echo "ok - the tests use only what Catch2 2 and 3 both offer"
