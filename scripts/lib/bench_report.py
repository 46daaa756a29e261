#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""scripts/bench's report: the tables of report.md from results.tsv.

    bench_report.py RESULTS.TSV DURATION OUT_DIR|"" LABEL...

RESULTS.TSV holds one measurement a line (KEY, COLUMN, VALUE); LABEL... are the columns of the
uiwarp builds measured, in order, beside "tcp" and the ceilings. Prints the Markdown tables;
with OUT_DIR, also writes bandwidth.csv and latency.csv there for scripts/plot.
"""
import math, sys
from collections import defaultdict

path, dur, out_dir, labels = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
vals = defaultdict(list)
for line in open(path):
    key, col, v = line.rstrip("\n").split("\t")
    try:
        x = float(v)
    except ValueError:
        x = math.nan
    if not math.isnan(x):
        vals[(key, col)].append(x)


def med(key, col):
    v = sorted(vals.get((key, col), []))
    return v[(len(v) - 1) // 2] if v else math.nan


def num(x, fmt):
    return "n/a" if math.isnan(x) else fmt % x


def ratio(a, b):
    return "n/a" if math.isnan(a) or math.isnan(b) or a <= 0 or b <= 0 else "%.2f" % (a / b)


# The same-host path's ceilings, where measured: process_vm_writev/readv's own rate
# (uiwarp-vm-copy) for Writes and Reads, two processes through shared memory (uiwarp-shm-anchor)
# for Sends, the 64-octet message rate and the latency ping-pongs.
vm = [c for c in ("vm-copy", "shm") if any(col == c for _, col in vals)]
head = ["test", "size"] + labels + ["TCP"] + ["%s/TCP" % l for l in labels + vm]
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))


def row(test, size, key, fmt, unit, tcp_name, tcp_scale=1.0, tcp_key=None):
    u = [med(key, l) for l in labels]
    t = med(tcp_key or key, "tcp") * tcp_scale
    if all(math.isnan(x) for x in u + [t]):
        return
    cells = [test, size] + [num(x, fmt) + unit for x in u]
    cells += ["%s: %s%s" % (tcp_name, num(t, fmt), unit)] + [ratio(x, t) for x in u]
    cells += [ratio(med(key, c), t) for c in vm]
    print("| " + " | ".join(cells) + " |")


row("ib_write_bw -R, message rate", "64 B", "rate/ib_write_bw/64", "%.3f", " Mmsg/s",
    "iperf3 -l 64")
for prog, sizes in (("ib_write_bw", ("4096", "65536", "1048576")),
                    ("ib_read_bw", ("4096", "65536", "1048576")), ("ib_send_bw", ("4096", "65536"))):
    for size in sizes:
        row(prog + " -R", size + " B", "bw/%s/%s" % (prog, size), "%.1f", " MB/s",
            "iperf3 -l " + size)
# fio's rdma engine (tests/bench/fio_rdma.sh), against the iperf3 run of the perftest row of its
# verb (fio's Reads go one at a time: it asks for ORD 1).
for verb, prog in (("write", "ib_write_bw"), ("read", "ib_read_bw"), ("send", "ib_send_bw")):
    for size in ("4096", "65536"):
        row("fio rdma --verb=" + verb, size + " B", "bw/fio_%s/%s" % (verb, size), "%.1f", " MB/s",
            "iperf3 -l " + size, tcp_key="bw/%s/%s" % (prog, size))
for prog in ("ib_write_lat", "ib_send_lat", "ib_read_lat"):
    rt = prog == "ib_read_lat"  # a whole round trip: TCP's one-way figure doubled
    for kind, what, tcpname in (("typ", "typical", "p50"), ("avg", "average", "avg")):
        row("%s -R, %s" % (prog, what), "64 B", "%s/%s/64" % (kind, prog), "%.2f", " us",
            "sockperf ping-pong %s%s" % (tcpname, ", x2 (round trip)" if rt else ""),
            2.0 if rt else 1.0)
# Writes into memory both processes map (a sealed memfd, a SysV segment; perftest's
# --use_hugepages puts its buffers in a SysV segment), against the same TCP figures.
for test, key in (("uiwarp-shared-lat, memfd buffers", "shared_lat_memfd"),
                  ("uiwarp-shared-lat, SysV buffers", "shared_lat_sysv"),
                  ("ib_write_lat -R --use_hugepages", "ib_write_lat_huge")):
    for kind, what, tcpname in (("typ", "typical", "p50"), ("avg", "average", "avg")):
        row("%s, %s" % (test, what), "64 B", "%s/%s/64" % (kind, key), "%.2f", " us",
            "sockperf ping-pong " + tcpname, tcp_key="%s/ib_write_lat/64" % kind)
row("ib_write_bw -R --use_hugepages", "65536 B", "bw/ib_write_bw_huge/65536", "%.1f", " MB/s",
    "iperf3 -l 65536", tcp_key="bw/ib_write_bw/65536")
# CPU seconds per GB, client + server (each from its own median).
for prog, size in (("ib_write_bw", "64"), ("ib_write_bw", "4096"), ("ib_write_bw", "65536"),
                   ("ib_read_bw", "4096"), ("ib_read_bw", "65536"), ("ib_send_bw", "4096"),
                   ("ib_send_bw", "65536")):
    key = "%s/%s" % (prog, size)
    for side in ("client", "server"):
        row("%s -R, CPU s/GB, %s" % (prog, side), size + " B", "cpu_%s/%s" % (side, key),
            "%.2f", "", "iperf3 " + side)
for prog, size in (("ib_write_bw", "64"), ("ib_write_bw", "4096"), ("ib_write_bw", "65536"),
                   ("ib_read_bw", "4096"), ("ib_read_bw", "65536"), ("ib_send_bw", "4096"),
                   ("ib_send_bw", "65536")):
    for side in ("client", "server"):
        row("%s -R, system calls per message, %s" % (prog, side), size + " B",
            "sys_%s/%s/%s" % (side, prog, size), "%.2f", "", "iperf3 " + side)

if out_dir:  # the charts' data: scripts/plot draws them
    sizes = sorted({int(k.split("/")[2]) for k, _ in vals if k.startswith("bw/ib_write_bw/")})
    with open(out_dir + "/bandwidth.csv", "w") as f:
        f.write(",".join(["size"] + ["uiwarp" if l == "uiwarp" else "uiwarp " + l for l in labels]
                         + ["iperf3"]) + "\n")
        for s in sizes:
            cells = [med("bw/ib_write_bw/%d" % s, c) for c in labels + ["tcp"]]
            f.write(",".join([str(s)] + ["nan" if math.isnan(x) else "%.1f" % x for x in cells]) + "\n")
    with open(out_dir + "/latency.csv", "w") as f:
        f.write(",".join(["test"] + ["uiwarp" if l == "uiwarp" else "uiwarp " + l for l in labels]
                         + ["TCP ping-pong (sockperf)"]) + "\n")
        for prog in ("ib_write_lat", "ib_send_lat", "ib_read_lat"):
            scale = 2.0 if prog == "ib_read_lat" else 1.0
            cells = [med("typ/%s/64" % prog, c) for c in labels] + [med("typ/%s/64" % prog, "tcp") * scale]
            f.write(",".join([prog] + ["nan" if math.isnan(x) else "%.2f" % x for x in cells]) + "\n")

ins = (
    ("post_send", "send: ibv_post_send (WR, FPDU + CRC, sendmsg, completion)"),
    ("push_tx", "send: of that, push_tx (gather, sendmsg)"),
    ("pull_rx", "receive: pull_rx (recvmsg, placement, CRC check)"),
    ("crc", "CRC32c, both sides (inside the above)"),
    ("poll_cq", "ibv_poll_cq, both CQs (moves with timing)"),
    ("total", "everything, all threads (moves with timing)"))
if any(key.startswith("ins_") for key, _ in vals):
    print()
    print("Instructions per RDMA Write (callgrind, user space only: the kernel's TCP work is not")
    print("counted), one Write in flight, one thread (tests/bench/write_cost.cpp):")
    print()
    h = ["path", "size"] + labels + (["%s/%s" % (labels[1], labels[0])] if len(labels) == 2 else [])
    print("| " + " | ".join(h) + " |")
    print("|" + "---|" * len(h))
    for size in ("4096", "65536"):
        for k, d in ins:
            u = [med("ins_%s/%s" % (k, size), l) for l in labels]
            if all(math.isnan(x) for x in u):
                continue
            cells = [d, size + " B"] + [num(x, "%.0f") for x in u]
            if len(labels) == 2:  # no ratio of figures that move with timing
                cells.append("-" if "timing" in d else ratio(u[1], u[0]))
            print("| " + " | ".join(cells) + " |")
