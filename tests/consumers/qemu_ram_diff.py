#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""Tells apart the pages in which a migrated guest's RAM differs from its source's.

    qemu_ram_diff.py SRC.ram DST.ram SRC.trace

SRC.ram and DST.ram: QMP pmemsave images of the same guest physical range; SRC.trace: the
source QEMU's log of the trace events migration_bitmap_sync_end, qemu_rdma_write_one_post and
qemu_rdma_write_one_zero (QEMU's "log" trace backend, -D FILE). Each differing page is either

  sent last: covered by an RDMA Write (or a zero-chunk message) that the source posted after
    its last dirty-bitmap sync, when its vCPUs were stopped (the stop-and-copy round): the
    destination must hold exactly what was sent, so the transport lost or misplaced it;
  not sent last: the source did not send it after its last sync although its RAM differs,
    so QEMU's dirty tracking missed a store to it. QEMU before 9.0 does that under TCG: the
    fast path of cpu_physical_memory_sync_dirty_bitmap() cleared dirty bits without resetting
    the vCPUs' TLB entries, so stores through them set no dirty bit again (fixed by QEMU commit
    03bfc2188f, "physmem: Fix migration dirty bitmap coherency with TCG memory access").

Prints one line: the count of differing pages and octets, how many of each kind, and the
first ranges; exit 0 when no page sent last differs, 1 when one does, 2 on bad input.
"""
import re
import sys

PAGE = 4096
POST = re.compile(r"qemu_rdma_write_one_post .*chunk: (\d+), addr: (0x[0-9a-f]+) .*bytes (\d+)")
ZERO = re.compile(r"qemu_rdma_write_one_zero .*for (\d+) bytes, index: (\d+), offset: (\d+)")


def ranges(pages):
    """Page addresses, sorted, as [start, end) runs."""
    out = []
    for p in pages:
        if out and out[-1][1] == p:
            out[-1][1] = p + PAGE
        else:
            out.append([p, p + PAGE])
    return out


def last_round(trace):
    """The [start, end) host ranges written after the last sync, the sync count and the guest
    RAM's base: the first Write of a chunk 0 (QEMU sends its largest RAM block first, the 'pc'
    machine's RAM, which starts at guest address 0)."""
    syncs, base, sent = 0, None, []
    for line in trace:
        if line.startswith("migration_bitmap_sync_end"):
            syncs += 1
            sent = []
            continue
        m = POST.search(line)
        if m:
            addr, n = int(m[2], 16), int(m[3])
            if base is None and m[1] == "0":
                base = addr
            sent.append(("host", addr, addr + n))
            continue
        m = ZERO.search(line)
        if m and m[2] == "0": # block 0's offsets are guest addresses
            sent.append(("guest", int(m[3]), int(m[3]) + int(m[1])))
    return sent, syncs, base


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[1], "rb") as f:
        src = f.read()
    with open(sys.argv[2], "rb") as f:
        dst = f.read()
    with open(sys.argv[3], errors="replace") as f:
        sent, syncs, base = last_round(f)
    if len(src) != len(dst) or base is None or syncs == 0:
        print("cannot tell: images of %d and %d octets, %d syncs and %s in the trace"
              % (len(src), len(dst), syncs, "no Write of a chunk 0" if base is None else "Writes"))
        return 2
    sent = [(a - base, b - base) if kind == "host" else (a, b) for kind, a, b in sent]
    diff = [p for p in range(0, len(src), PAGE) if src[p:p + PAGE] != dst[p:p + PAGE]]
    octets = sum(1 for p in diff for a, b in zip(src[p:p + PAGE], dst[p:p + PAGE]) if a != b)
    last = [p for p in diff if any(a <= p < b for a, b in sent)]
    missed = [p for p in diff if p not in set(last)]
    show = lambda ps: " ".join("0x%x-0x%x" % (a, b) for a, b in ranges(ps)[:4]) or "none"
    print("%d pages differ (%d octets): %d sent in the stop-and-copy round (%s), "
          "%d not sent after the last of %d dirty syncs (%s)"
          % (len(diff), octets, len(last), show(last), len(missed), syncs, show(missed)))
    return 1 if last else 0


if __name__ == "__main__":
    sys.exit(main())
