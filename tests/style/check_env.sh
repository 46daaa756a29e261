#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# The environment is read in one place, once (kernel-shim/contracts/include/uiwarp/env.hpp): no
# other product code calls getenv or secure_getenv, and docs/user-guide.md's table lists every
# variable of that one table. Exit 77 (skipped) outside a git checkout.
set -u
SRC=${1:?usage: check_env.sh SOURCE_DIR}
cd "$SRC" || exit 1
git rev-parse --git-dir >/dev/null 2>&1 || { echo "SKIP: not a git checkout"; exit 77; }
fail=0
hits=$(git grep -nwE 'getenv|secure_getenv' -- 'providers/*.cpp' 'providers/*.hpp' \
  'kernel-shim/*.cpp' 'kernel-shim/*.hpp' 'cm/*.cpp' 'cm/*.hpp' 'libiwarp/*.cpp' 'libiwarp/*.hpp' \
  ':!kernel-shim/contracts/src/env.cpp' | grep -v '^[^:]*:[0-9]*:[[:space:]]*//')
if [[ -n $hits ]]; then
  echo "$hits" | sed 's/^/FAIL - the environment read outside uiwarp::Env: /'
  fail=1
fi
names=$(sed -n 's/^ *{V::[A-Za-z]*, "\([A-Z_]*\)".*/\1/p' kernel-shim/contracts/src/env.cpp)
count=$(wc -w <<<"$names")
if ((count < 10)); then
  echo "FAIL - found only $count variables in kernel-shim/contracts/src/env.cpp's table"
  fail=1
fi
for n in $names; do
  if ! grep -qE "^\| .*\`$n\`" docs/user-guide.md; then
    echo "FAIL - $n (uiwarp::Env) is not in docs/user-guide.md's table of environment variables"
    fail=1
  fi
done
((fail)) && exit 1
echo "ok - $count variables, read only by uiwarp::Env, each in docs/user-guide.md"
