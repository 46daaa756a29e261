#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""Walks the FPDUs one side of an MPA connection sent, from tshark's reassembled byte stream.

    tshark -r CAP -q -z follow,tcp,raw,STREAM | fpdu_walk.py SENDER-IP [--reset]

A second opinion, independent of uiwarp's code and of Wireshark's MPA dissector, for the capture
check (cases.sh): Wireshark 4.0's heuristic MPA dissector loses FPDU sync after an FPDU that spans
many TCP segments (siw's large-FPDU flag), and then reports bad CRCs for the payload octets it
takes for FPDU headers. This walk starts at the MPA Request/Reply (RFC 5044 §7.1) and follows
each ULPDU_Length (§4.1): length, ULPDU, pad to 4 octets, CRC32c when either side set C
(§7.1.2), which it checks (crcmod, a C implementation from Debian). It checks the DDP and RDMAP
version fields of each segment (RFC 5041 §4.1, RFC 5040 §4.2: 1, the IETF versions; siw
speaks no other). Markers are not supported (siw refuses them).

Prints one line: "fpdus N bad-crc B bad-version V trailing T crc on|off", exit 0 when every FPDU
is good and the stream ends on an FPDU boundary (a connection that ended after its MPA frames
has none), 1 otherwise, 2 when it cannot walk the stream. --reset: the connection ended in a
TCP reset, which discards what the sender had not yet sent (RFC 793 §3.5, "abort"), so its
octets may stop inside an FPDU: the line then ends "after a reset" and trailing octets are no
failure. Every FPDU that did go out is still checked.
"""
import sys

import crcmod.predefined

KEYS = (b"MPA ID Req Frame", b"MPA ID Rep Frame")
FLAG_M, FLAG_C = 0x80, 0x40


def parse_follow(lines):
    """tshark's "follow,tcp,raw" output: the two nodes' addresses and each node's octets."""
    nodes, data = [], [bytearray(), bytearray()]
    for line in lines:
        if line.startswith("Node "):
            nodes.append(line.split(":", 1)[1].strip().rsplit(":", 1)[0])
            continue
        s = line.rstrip("\n")
        if not s or s.startswith(("=", "Follow", "Filter")):
            continue
        node = 1 if s.startswith("\t") else 0
        try:
            data[node] += bytes.fromhex(s.strip())
        except ValueError:
            continue
    return nodes, data


def mpa_frame(b):
    """(flags, rev, length of the whole frame) of the MPA Request/Reply at the start of b."""
    if len(b) < 20 or bytes(b[:16]) not in KEYS:
        return None
    pd_len = int.from_bytes(b[18:20], "big")
    return b[16], b[17], 20 + pd_len


def main():
    args = sys.argv[1:]
    reset = "--reset" in args
    if reset:
        args.remove("--reset")
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    nodes, data = parse_follow(sys.stdin)
    if args[0] not in nodes:
        print("cannot walk: %s is not an end of this stream (%s)" % (args[0], nodes))
        return 2
    me = nodes.index(args[0])
    mine, peer = data[me], data[1 - me]
    f, g = mpa_frame(mine), mpa_frame(peer)
    if not f or not g:
        print("cannot walk: no MPA Request/Reply at the start of both directions")
        return 2
    if (f[0] | g[0]) & FLAG_M:
        print("cannot walk: markers negotiated")
        return 2
    crc_on = bool((f[0] | g[0]) & FLAG_C)
    crc = crcmod.predefined.mkPredefinedCrcFun("crc-32c")
    pos, fpdus, bad_crc, bad_ver = f[2], 0, 0, 0
    n = len(mine)
    while pos + 2 <= n:
        ulpdu = int.from_bytes(mine[pos:pos + 2], "big")
        # §4.1: PAD makes the FPDU (ULPDU_Length field included) a multiple of 4 octets.
        end = pos + 2 + ulpdu + (-(2 + ulpdu) % 4) + (4 if crc_on else 0)
        if end > n:
            break
        if crc_on:
            # The CRC's octets go out least significant first: RFC 5044 §4.1 takes iSCSI's
            # CRC32c and its bit order (RFC 3385), as siw and Wireshark do.
            want = int.from_bytes(mine[end - 4:end], "little")
            if crc(bytes(mine[pos:end - 4])) != want:
                bad_crc += 1
        if ulpdu >= 2 and ((mine[pos + 2] & 0x03) != 1 or (mine[pos + 3] >> 6) != 1):
            bad_ver += 1
        fpdus += 1
        pos = end
    trailing = n - pos
    print("fpdus %d bad-crc %d bad-version %d trailing %d crc %s%s"
          % (fpdus, bad_crc, bad_ver, trailing, "on" if crc_on else "off",
             " after a reset" if reset else ""))
    return 0 if not bad_crc and not bad_ver and (reset or not trailing) else 1


if __name__ == "__main__":
    sys.exit(main())
