# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# shellcheck shell=bash
# Helpers shared by scripts/bench and scripts/bench-siw (sourced).

# median: the median of the numbers on stdin, one a line; "nan" lines are left out, and with
# none left it prints nan. (grep finding nothing must not end a `set -o pipefail` caller.)
median() { { grep -vx nan || true; } | sort -g | awk '{v[NR]=$1} END {if (NR) print v[int((NR+1)/2)]; else print "nan"}'; }
# ratio A B: A/B to two places, or n/a unless both are positive numbers.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a+0 > 0 && b+0 > 0) printf "%.2f", a/b; else print "n/a"}'; }
