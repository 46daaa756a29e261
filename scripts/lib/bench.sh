# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# shellcheck shell=bash
# Helpers shared by scripts/bench and scripts/bench-siw (sourced), beside scripts/lib/common.sh.

# median: the median of the numbers on stdin, one a line; "nan" lines are left out, and with
# none left it prints nan. (grep finding nothing must not end a `set -o pipefail` caller.)
median() { { grep -vx nan || true; } | sort -g | awk '{v[NR]=$1} END {if (NR) print v[int((NR+1)/2)]; else print "nan"}'; }
# ratio A B: A/B to two places, or n/a unless both are positive numbers.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a+0 > 0 && b+0 > 0) printf "%.2f", a/b; else print "n/a"}'; }

# cpu_run FILE CMD...: runs CMD and writes to FILE the CPU seconds (user + system) it used, all
# its threads and every descendant it waited for included: the rusage wait4() reports. For a
# verbs program under uiwarp-run (which execs it) that is the program with uiwarp's progress
# thread, not uiwarpd (a daemon nobody waits for). Returns CMD's exit status. The program is
# also in $cpu_run_py, for callers that must put cpu_run behind another command (python3 -c).
cpu_run_py='import os, sys
pid = os.fork()
if pid == 0:
    try:
        os.execvp(sys.argv[2], sys.argv[2:])
    finally:
        os._exit(127)
_, status, ru = os.wait4(pid, 0)
with open(sys.argv[1], "w") as f:
    f.write("%.3f\n" % (ru.ru_utime + ru.ru_stime))
code = os.waitstatus_to_exitcode(status)
sys.exit(code if code >= 0 else 128 - code)'
cpu_run() { python3 -c "$cpu_run_py" "$@"; }

# callgrind_costs FILE N: reads a callgrind dump (FILE, events Ir) of N messages and prints, one
# "key value" a line, instructions per message:
#   post_send  the provider's ibv_post_send, everything it calls included
#   push_tx    the provider's transmit (uiwarp::Qp::push_tx), from every caller
#   pull_rx    the provider's receive (uiwarp::Qp::pull_rx), from every caller and thread
#   crc        CRC32c (iwarp::crc32c*), both directions
#   poll_cq    the provider's ibv_poll_cq (both CQs; empty polls too, so it moves with timing)
#   total      everything in the dump, every thread (spinning and waking up included)
# then "top" lines: the functions with the largest own (exclusive) counts, "top COUNT NAME".
# A function's inclusive count is summed over the calls into its family (the function and
# its compiler clones, e.g. "[clone .part.0]") from outside the family, so a clone calling
# the original is not counted twice. Names are callgrind's (demangled); a function without a
# symbol is named by its object file.
callgrind_costs() {
  python3 - "$1" "$2" <<'EOF'
import os, re, sys
from collections import defaultdict

path, n = sys.argv[1], int(sys.argv[2])
# callgrind's name compression, one table for objects and one for functions: "(id) name"
# defines, "(id)" refers.
tables = {"ob": {}, "fn": {}}


def name(kind, v):
    m = re.match(r"\((\d+)\)(?: (.*))?$", v)
    if not m:
        return v
    if m.group(2) is not None:
        tables[kind][m.group(1)] = m.group(2)
    return tables[kind][m.group(1)]


own, edges, obj_of = defaultdict(int), defaultdict(int), {}
fn = callee = ob = None
call = False
total = 0
with open(path) as f:
    for line in f:
        if line.startswith("ob="):
            ob = name("ob", line[3:].rstrip("\n"))
        elif line.startswith("cob="):
            name("ob", line[4:].rstrip("\n"))  # only defines a name here
        elif line.startswith("fn="):
            fn = name("fn", line[3:].rstrip("\n"))
            obj_of.setdefault(fn, ob)
        elif line.startswith("cfn="):
            callee = name("fn", line[4:].rstrip("\n"))
        elif line.startswith("calls="):
            call = True
        elif line.startswith("totals:") or line.startswith("summary:"):
            total = int(line.split()[1])
        elif line[:1] in "0123456789+-*":
            p = line.split()
            c = int(p[1]) if len(p) > 1 else 0
            if call:
                edges[(fn, callee)] += c  # inclusive cost of these calls
                call = False
            else:
                own[fn] += c


def inclusive(rx):
    r = re.compile(rx)
    fam = {f for f in set(own) | {b for _, b in edges} if r.search(f)}
    return sum(c for (a, b), c in edges.items() if b in fam and a not in fam)


fams = [("post_send", r"^uiwarp::(\(anonymous namespace\)::)?post_send\("),
        ("push_tx", r"^uiwarp::Qp::push_tx\("),
        ("pull_rx", r"^uiwarp::Qp::pull_rx\("),
        ("crc", r"^iwarp::crc32c"),
        ("poll_cq", r"^uiwarp::(\(anonymous namespace\)::)?poll_cq\(")]
for key, rx in fams:
    print(key, round(inclusive(rx) / n))
print("total", round((total or sum(own.values())) / n))
for f, c in sorted(own.items(), key=lambda x: -x[1])[:8]:
    label = f
    if f.startswith("0x"):
        label = "%s in %s" % (f, os.path.basename(obj_of.get(f) or "?"))
    label = re.sub(r"std::span<std::byte const, 18446744073709551615ul>", "ConstBytes", label)
    label = label.replace(", 18446744073709551615ul>", ">")  # std::span's dynamic_extent
    print("top", round(c / n), label[:110])
EOF
}
