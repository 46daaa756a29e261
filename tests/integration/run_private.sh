#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# run_private.sh CMD...: runs CMD (typically uiwarp-run PROGRAM) with a fresh UIWARP_STATE_DIR of
# its own, so that it starts its own uiwarpd (never one of another build or test), and stops that
# daemon afterwards.
set -u
source "$(dirname "$0")/../../scripts/lib/common.sh"
scratch_dir uiwarp-it
UIWARP_STATE_DIR=$T "$@"
