#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# Every man page renders without a warning (groff -man -ww -z) and has the sections its manual
# section wants (man-pages(7)): NAME, DESCRIPTION and SEE ALSO in all; SYNOPSIS in 1, 5 and 8;
# FILES in all; ENVIRONMENT and EXIT STATUS in 1 and 8; ENVIRONMENT in 7.
# Exit 77 (skipped) without groff or outside a git checkout.
set -u
SRC=${1:?usage: check_manpages.sh SOURCE_DIR}
cd "$SRC" || exit 1
command -v groff >/dev/null || { echo "SKIP: groff not found"; exit 77; }
git rev-parse --git-dir >/dev/null 2>&1 || { echo "SKIP: not a git checkout"; exit 77; }
mapfile -t pages < <(git ls-files '*.[1-8]' '*.[1-8].in')
pass=0 fail=0
for p in "${pages[@]}"; do
  sec=$(sed -n 's/^\.TH [^ ]* \([1-8]\).*/\1/p' "$p" | head -n 1)
  warn=$(groff -man -ww -z -t "$p" 2>&1)
  want=(NAME DESCRIPTION FILES "SEE ALSO")
  case $sec in
    1 | 8) want+=(SYNOPSIS ENVIRONMENT "EXIT STATUS") ;;
    5) want+=(SYNOPSIS) ;;
    7) want+=(ENVIRONMENT) ;;
  esac
  missing=()
  for s in "${want[@]}"; do grep -q "^\.SH \"\{0,1\}$s\"\{0,1\}$" "$p" || missing+=("$s"); done
  if [[ -z $sec ]]; then
    echo "FAIL - $p: no .TH with a manual section"; ((fail++))
  elif [[ -n $warn ]]; then
    echo "FAIL - $p: groff warns:"; echo "$warn" | head -n 10; ((fail++))
  elif ((${#missing[@]})); then
    echo "FAIL - $p ($sec): no ${missing[*]} section"; ((fail++))
  else
    echo "ok - $p ($sec) renders clean, with ${want[*]}"; ((pass++))
  fi
done
echo "$pass passed, $fail failed"
((fail == 0 && pass > 0))
