#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# run_with_provider.sh UIWARP-RUN PROVIDER CMD...: runs CMD under uiwarp-run with a fresh state
# dir (default device uiwarp0 on lo), and stops the uiwarpd it started. Exits 77 (ctest: skipped) if PROVIDER is not built.
set -u
RUN=$1
PROVIDER=$2
shift 2
[[ -e $PROVIDER ]] || { echo "SKIP: provider $PROVIDER not built"; exit 77; }
source "$(dirname "$0")/../../scripts/lib/common.sh"
scratch_dir uiwarp-it
UIWARP_STATE_DIR=$T "$RUN" "$@"
