#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# 50 rping runs in a row leak nothing: every run verifies its pings, and uiwarpd's open fds and
# threads stay where they were, and no connection of the runs' ports is left established
# (only those: the machine may have other traffic).
source "$(dirname "$0")/lib.sh"
"$RUN" true  # starts uiwarpd
pid=$(pgrep -f "uiwarpd --socket $UIWARP_STATE_DIR" | head -n 1)
fds0=$(ls /proc/"$pid"/fd | wc -l)
thr0=$(ls /proc/"$pid"/task | wc -l)
good=0
ports=()
for i in $(seq 1 50); do
  p=$(free_port)
  ports+=("$p")
  timeout 30 "$RUN" rping -s -a 127.0.0.1 -p "$p" -C 5 >/dev/null 2>&1 &
  wait_listen "$p"
  n=$(timeout 30 "$RUN" rping -c -a 127.0.0.1 -p "$p" -C 5 -v 2>/dev/null | grep -c '^ping data')
  wait
  [[ $n == 5 ]] && good=$((good + 1))
done
expect_eq "50 rping runs in a row, every ping verified" 50 "$good"
expect_eq "uiwarpd's open fds unchanged" "$fds0" "$(ls /proc/"$pid"/fd | wc -l)"
expect_eq "uiwarpd's threads unchanged" "$thr0" "$(ls /proc/"$pid"/task | wc -l)"
filter=""
for p in "${ports[@]}"; do filter+="${filter:+ or }sport = :$p or dport = :$p"; done
expect_eq "no TCP connection of the runs' ports left open" 0 \
  "$(ss -Htan state established "( $filter )" | wc -l)"
finish
