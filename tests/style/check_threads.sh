#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# Every thread the product starts inside a program goes through uiwarp::start_thread
# (kernel-shim/contracts/include/uiwarp/thread.hpp), which blocks the asynchronous signals the
# program may route to a thread of its own: a thread started any other way inherits its
# creator's mask and can take a signal meant for the program's signalfd, and die of it.
# Exit 77 (skipped) outside a git checkout.
set -u
SRC=${1:?usage: check_threads.sh SOURCE_DIR}
cd "$SRC" || exit 1
git rev-parse --git-dir >/dev/null 2>&1 || { echo "SKIP: not a git checkout"; exit 77; }
pattern='std::j?thread[[:space:]]*[({]|std::j?thread[[:space:]]+[A-Za-z_][A-Za-z0-9_]*[[:space:]]*[({]|pthread_create|std::async'
hits=$(git grep -nE "$pattern" -- providers kernel-shim cm libiwarp \
  ':!kernel-shim/contracts/include/uiwarp/thread.hpp')
if [[ -n $hits ]]; then
  echo "$hits" | sed 's/^/FAIL - a thread not started with uiwarp::start_thread: /'
  exit 1
fi
echo "ok - every thread of the product is started with uiwarp::start_thread"
