#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# Every C and C++ source the repository tracks is formatted as .clang-format says (clang-format
# --dry-run -Werror). Exit 77 (skipped) without clang-format or outside a git checkout.
set -u
SRC=${1:?usage: check_format.sh SOURCE_DIR}
cd "$SRC" || exit 1
command -v clang-format >/dev/null || { echo "SKIP: clang-format not found"; exit 77; }
git rev-parse --git-dir >/dev/null 2>&1 || { echo "SKIP: not a git checkout"; exit 77; }
mapfile -t files < <(git ls-files '*.c' '*.h' '*.cc' '*.cpp' '*.hpp')
if clang-format --dry-run -Werror "${files[@]}" 2>"${TMPDIR:-/tmp}/uiwarp-format.$$"; then
  echo "ok - ${#files[@]} files formatted as .clang-format says"
  rm -f "${TMPDIR:-/tmp}/uiwarp-format.$$"
  exit 0
fi
grep -E '^[^ ].*: (error|warning):' "${TMPDIR:-/tmp}/uiwarp-format.$$" | cut -d: -f1 | sort | uniq -c |
  sed 's/^/FAIL - not formatted (lines): /'
echo "fix with: clang-format -i \$(git ls-files '*.c' '*.h' '*.cc' '*.cpp' '*.hpp')"
rm -f "${TMPDIR:-/tmp}/uiwarp-format.$$"
exit 1
