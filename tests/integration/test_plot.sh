#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# test_plot.sh: scripts/plot draws valid SVG charts from small bandwidth and latency CSVs as
# scripts/bench --plot writes them (a missing figure as "nan"), and refuses a folder without
# them, or a CSV whose lines and header differ. Exit 77 (skipped) without gnuplot.
source "$(dirname "$0")/../../scripts/lib/common.sh"
test_init
PLOT=$(cd "$(dirname "$0")/../.." && pwd)/scripts/plot
command -v gnuplot >/dev/null || { echo "SKIP: gnuplot not installed (gnuplot-nox)"; exit 77; }
printf 'size,uiwarp,iperf3\n64,60.5,20.1\n4096,1500.0,834.2\n65536,1955.5,2513.9\n1048576,nan,2600.0\n' >"$T/bandwidth.csv"
printf 'test,uiwarp,TCP ping-pong (sockperf)\nib_write_lat,14.57,6.70\nib_send_lat,8.38,6.70\nib_read_lat,14.81,13.40\n' >"$T/latency.csv"
echo "2026-11-26, abc1234, 2 CPUs" >"$T/title"
check "scripts/plot draws both" "$PLOT" "$T"
for chart in bandwidth latency; do
  out=$(python3 - "$T/$chart.svg" <<'PY' 2>&1
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
assert root.tag == "{http://www.w3.org/2000/svg}svg", root.tag
text = "".join(root.itertext())
for word in ("uiwarp", "2026-11-26, abc1234"):
    assert word in text, word
paths = root.iter("{http://www.w3.org/2000/svg}path")
assert sum(1 for _ in paths) > 5
print("ok")
PY
)
  expect_eq "$chart.svg is SVG with its series named and drawn" ok "$out"
done
mkdir "$T/comma"
printf 'size,siw,uiwarp, no CRC\n64,0.6,0.4\n' >"$T/comma/bandwidth.csv"
check "a CSV whose lines do not match its header is refused, with the line" bash -c \
  "! '$PLOT' '$T/comma' 2>'$T/comma.err' && grep -q 'line 2: 3 fields, the header has 4' '$T/comma.err'"
mkdir "$T/empty"
check "a folder without CSVs is refused" bash -c "! '$PLOT' '$T/empty' 2>/dev/null"
finish
