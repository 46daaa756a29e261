# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""iWARP wire formats for the hostile-peer tool, written from the RFCs, not from libiwarp.

CRC32c (RFC 3720 / RFC 5044 §4.4, table-driven), MPA Request/Reply frames (RFC 5044 §7.1.1,
RFC 6581 §6 and §9), FPDU framing with PAD, CRC and markers (RFC 5044 §4), DDP headers
(RFC 5041 §4), RDMAP headers and the Terminate message (RFC 5040 §4). Every multi-octet field
is big-endian, except the CRC, which goes least-significant octet first (RFC 5044 App. A).
Python 3 standard library only.
"""

import struct

# ---- CRC32c -----------------------------------------------------------------------------

_CRC32C_POLY = 0x82F63B78  # Castagnoli, reflected


def _crc32c_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ _CRC32C_POLY if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data, crc=0):
    """CRC-32C of `data`, continuing from the value `crc` (0 to start)."""
    c = crc ^ 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


# ---- MPA Request / Reply (RFC 5044 §7.1.1, RFC 6581 §6, §9) ---------------------------------

KEY_REQ = b"MPA ID Req Frame"
KEY_REP = b"MPA ID Rep Frame"
FLAG_M, FLAG_C, FLAG_R, FLAG_S = 0x80, 0x40, 0x20, 0x10
MAX_PD = 512
NO_NEG = 0x3FFF  # IRD/ORD "no automatic negotiation"


class Enhanced:
    """The 4 octets of RFC 6581 enhanced data at the front of the private data (S=1)."""

    def __init__(self, p2p=False, rtr_send=False, rtr_write=False, rtr_read=False, ird=4, ord_=4):
        self.p2p, self.rtr_send, self.rtr_write, self.rtr_read = p2p, rtr_send, rtr_write, rtr_read
        self.ird, self.ord = ird, ord_

    def encode(self):
        w0 = (0x8000 if self.p2p else 0) | (0x4000 if self.rtr_send else 0) | (self.ird & 0x3FFF)
        w1 = (0x8000 if self.rtr_write else 0) | (0x4000 if self.rtr_read else 0) | (self.ord & 0x3FFF)
        return struct.pack(">HH", w0, w1)

    @staticmethod
    def decode(b):
        w0, w1 = struct.unpack(">HH", b[:4])
        return Enhanced(bool(w0 & 0x8000), bool(w0 & 0x4000), bool(w1 & 0x8000), bool(w1 & 0x4000),
                        w0 & 0x3FFF, w1 & 0x3FFF)

    def __repr__(self):
        rtr = "".join(n for n, on in (("S", self.rtr_send), ("W", self.rtr_write), ("R", self.rtr_read)) if on)
        return f"A={int(self.p2p)} rtr={rtr or '-'} IRD={self.ird} ORD={self.ord}"


class MpaFrame:
    """An MPA Request or Reply. `pd_length` overrides the computed PD_Length (hostile frames)."""

    def __init__(self, reply=False, m=False, c=True, r=False, rev=2, enhanced=None, pd=b"",
                 res=0, key=None, pd_length=None, s=None):
        self.reply, self.m, self.c, self.r, self.rev = reply, m, c, r, rev
        self.enhanced, self.pd, self.res = enhanced, pd, res
        self.key = key if key is not None else (KEY_REP if reply else KEY_REQ)
        self.pd_length = pd_length
        self.s = s  # None: S follows `enhanced`

    def encode(self):
        body = (self.enhanced.encode() if self.enhanced else b"") + self.pd
        s = self.s if self.s is not None else self.enhanced is not None
        flags = ((FLAG_M if self.m else 0) | (FLAG_C if self.c else 0) | (FLAG_R if self.r else 0) |
                 (FLAG_S if s else 0) | (self.res & 0x0F))
        pdl = self.pd_length if self.pd_length is not None else len(body)
        return self.key + struct.pack(">BBH", flags, self.rev, pdl) + body

    @staticmethod
    def decode_header(b):
        """(key, flags, rev, pd_length) of the 20-octet header."""
        flags, rev, pdl = struct.unpack(">BBH", b[16:20])
        return b[:16], flags, rev, pdl

    @staticmethod
    def decode(b):
        key, flags, rev, pdl = MpaFrame.decode_header(b)
        pd = b[20:20 + pdl]
        enh = None
        if flags & FLAG_S and len(pd) >= 4:
            enh, pd = Enhanced.decode(pd), pd[4:]
        return MpaFrame(reply=key == KEY_REP, m=bool(flags & FLAG_M), c=bool(flags & FLAG_C),
                        r=bool(flags & FLAG_R), rev=rev, enhanced=enh, pd=pd, res=flags & 0x0F,
                        key=key, pd_length=pdl, s=bool(flags & FLAG_S))

    def __repr__(self):
        kind = {KEY_REQ: "Request", KEY_REP: "Reply"}.get(self.key, f"key={self.key!r}")
        return (f"MPA {kind} rev={self.rev} M={int(self.m)} C={int(self.c)} R={int(self.r)} "
                f"S={int(bool(self.s))} PD_Length={self.pd_length}"
                + (f" [{self.enhanced}]" if self.enhanced else ""))


# ---- FPDU framing (RFC 5044 §4) ------------------------------------------------------------

MARKER_SPACING = 512
MAX_ULPDU = 64768


def pad_len(ulpdu_len):
    return (4 - ((2 + ulpdu_len) & 3)) & 3


class FpduTx:
    """The sending half of an MPA connection in Full Operation. `pos` counts the octets sent
    since the first FPDU (markers included), for marker placement (RFC 5044 §4.3)."""

    def __init__(self, crc=True, markers=False):
        self.crc, self.markers, self.pos = crc, markers, 0

    def frame(self, ulpdu, length=None, pad=None, crc_value=None, corrupt_crc=False,
              marker_hook=None):
        """One FPDU carrying `ulpdu`. Hostile options: a ULPDU_Length other than len(ulpdu),
        explicit PAD octets, a given CRC field, a corrupted CRC, and `marker_hook(ptr) ->
        (reserved, ptr)` to falsify markers."""
        ulen = len(ulpdu) if length is None else length
        pad = bytes(pad_len(len(ulpdu))) if pad is None else pad
        if len(pad) != pad_len(len(ulpdu)):
            raise ValueError(f"{len(pad)} PAD octets for a {len(ulpdu)}-octet ULPDU")
        out = bytearray()
        covered = bytearray()  # what the CRC covers: markers included (RFC 5044 §4.4)
        start = self.pos

        def marker(ptr):
            res = 0
            if marker_hook:
                res, ptr = marker_hook(ptr)
            m = struct.pack(">HH", res, ptr)
            out.extend(m)
            covered.extend(m)
            self.pos += 4

        def emit(data):
            for b in data:
                if self.markers and self.pos % MARKER_SPACING == 0:
                    marker((self.pos - start) & 0xFFFF)
                out.append(b)
                covered.append(b)
                self.pos += 1

        if self.markers and self.pos % MARKER_SPACING == 0:
            marker(0)  # between FPDUs: belongs to this one, FPDUPTR 0 (RFC 5044 §4.3)
            start = self.pos
        emit(struct.pack(">H", ulen & 0xFFFF) + bytes(ulpdu) + bytes(pad))
        if self.markers and self.pos % MARKER_SPACING == 0:
            marker((self.pos - start) & 0xFFFF)  # right after PAD: CRC-covered (§4.4)
        if crc_value is None:
            crc_value = crc32c(bytes(covered)) if self.crc else 0
            if corrupt_crc:
                crc_value ^= 0x5A5A5A5A
        out.extend(struct.pack("<I", crc_value))
        self.pos += 4
        return bytes(out)


class Fpdu:
    def __init__(self, ulpdu, crc_ok, raw, marker_errors):
        self.ulpdu, self.crc_ok, self.raw, self.marker_errors = ulpdu, crc_ok, raw, marker_errors
        self.msg = decode_ulpdu(ulpdu)

    def __repr__(self):
        return f"FPDU[{describe(self.msg)}{'' if self.crc_ok else ' BAD-CRC'}]"


class FpduRx:
    """The receiving half: finds FPDUs by ULPDU_Length, checks CRC and markers."""

    def __init__(self, crc=True, markers=False):
        self.crc, self.markers, self.pos = crc, markers, 0
        self.buf = bytearray()

    def _take(self, i, n, raw, logical, marker_errors, fpdu_start):
        """Copies n logical octets from buf[i:], skipping markers; returns the new i or None."""
        while n:
            if self.markers and (self.pos + (i - self._i0)) % MARKER_SPACING == 0:
                if i + 4 > len(self.buf):
                    return None
                m = bytes(self.buf[i:i + 4])
                ptr = struct.unpack(">H", m[2:])[0] & 0xFFFC
                at = self.pos + (i - self._i0)
                if fpdu_start is not None and ptr != ((at - fpdu_start) & 0xFFFF):
                    marker_errors.append((at, ptr))
                raw.extend(m)
                i += 4
                continue
            if i >= len(self.buf):
                return None
            raw.append(self.buf[i])
            logical.append(self.buf[i])
            i += 1
            n -= 1
        return i

    def feed(self, data):
        """Adds received octets; returns the FPDUs now complete."""
        self.buf.extend(data)
        out = []
        while True:
            self._i0 = 0
            raw, logical, merr = bytearray(), bytearray(), []
            i = 0
            # A marker at the very start belongs to this FPDU (FPDUPTR 0).
            if self.markers and self.pos % MARKER_SPACING == 0:
                if len(self.buf) < 4:
                    break
                if struct.unpack(">H", self.buf[2:4])[0] & 0xFFFC:
                    merr.append((self.pos, struct.unpack(">H", self.buf[2:4])[0]))
                raw.extend(self.buf[:4])
                i = 4
            start = self.pos + i
            i = self._take(i, 2, raw, logical, merr, start)
            if i is None:
                break
            ulen = struct.unpack(">H", logical[:2])[0]
            i = self._take(i, ulen + pad_len(ulen), raw, logical, merr, start)
            if i is None:
                break
            # A marker due right before the CRC field is CRC-covered.
            if self.markers and (self.pos + i) % MARKER_SPACING == 0:
                if i + 4 > len(self.buf):
                    break
                raw.extend(self.buf[i:i + 4])
                i += 4
            if i + 4 > len(self.buf):
                break
            crc_field = struct.unpack("<I", self.buf[i:i + 4])[0]
            ok = (not self.crc) or crc32c(bytes(raw)) == crc_field
            raw.extend(self.buf[i:i + 4])
            i += 4
            out.append(Fpdu(bytes(logical[2:2 + ulen]), ok, bytes(raw), merr))
            del self.buf[:i]
            self.pos += i
        return out


# ---- DDP / RDMAP (RFC 5041 §4, RFC 5040 §4) --------------------------------------------------

OP_WRITE, OP_READ_REQ, OP_READ_RESP, OP_SEND, OP_SEND_INV, OP_SEND_SE, OP_SEND_SE_INV = range(7)
OP_TERMINATE, OP_IMMEDIATE, OP_IMMEDIATE_SE, OP_ATOMIC_REQ, OP_ATOMIC_RESP = 7, 8, 9, 10, 11
QN_SEND, QN_READ, QN_TERM = 0, 1, 2
OP_NAMES = {0: "RDMA Write", 1: "Read Request", 2: "Read Response", 3: "Send", 4: "SendInv",
            5: "SendSE", 6: "SendSEInv", 7: "Terminate", 8: "Immediate", 9: "ImmediateSE",
            10: "Atomic Request", 11: "Atomic Response"}


def ctrl(tagged, last, op, dv=1, rv=1, rsvd=0, rsv=0):
    """DDP control octet (T L Rsvd(4) DV(2)) and RDMAP control octet (RV(2) Rsv(2) OpCode(4))."""
    b0 = (0x80 if tagged else 0) | (0x40 if last else 0) | ((rsvd & 0xF) << 2) | (dv & 3)
    b1 = ((rv & 3) << 6) | ((rsv & 3) << 4) | (op & 0xF)
    return bytes([b0, b1])


def tagged(op, stag, to, last=True, **kw):
    return ctrl(True, last, op, **kw) + struct.pack(">IQ", stag, to)


def untagged(op, qn, msn, mo=0, inv=0, last=True, **kw):
    return ctrl(False, last, op, **kw) + struct.pack(">IIII", inv, qn, msn, mo)


def read_request_hdr(sink_stag, sink_to, size, src_stag, src_to):
    return struct.pack(">IQIIQ", sink_stag, sink_to, size, src_stag, src_to)


def terminate_hdr(layer, etype, code, m=False, d=False, r=False, seglen=0, ddp=b"", rdma=b""):
    out = bytes([(layer << 4) | etype, code, (0x80 if m else 0) | (0x40 if d else 0) |
                 (0x20 if r else 0), 0])
    if m or d:
        out += struct.pack(">H", seglen)
    if d:
        out += ddp
    if r:
        out += rdma
    return out


def decode_ulpdu(u):
    """A dict describing the DDP/RDMAP message in ULPDU `u` (as far as it goes)."""
    msg = {"len": len(u)}
    if len(u) < 2:
        msg["short"] = True
        return msg
    b0, b1 = u[0], u[1]
    msg.update(t=bool(b0 & 0x80), l=bool(b0 & 0x40), rsvd=(b0 >> 2) & 0xF, dv=b0 & 3,
               rv=b1 >> 6, rsv=(b1 >> 4) & 3, op=b1 & 0xF)
    if msg["t"]:
        if len(u) < 14:
            msg["short"] = True
            return msg
        msg["stag"], msg["to"] = struct.unpack(">IQ", u[2:14])
        msg["hdr"], msg["payload"] = u[:14], u[14:]
        return msg
    if len(u) < 18:
        msg["short"] = True
        return msg
    msg["inv"], msg["qn"], msg["msn"], msg["mo"] = struct.unpack(">IIII", u[2:18])
    msg["hdr"], rest = u[:18], u[18:]
    if msg["op"] == OP_READ_REQ and len(rest) >= 28:
        (msg["sink_stag"], msg["sink_to"], msg["size"], msg["src_stag"],
         msg["src_to"]) = struct.unpack(">IQIIQ", rest[:28])
        msg["rdma_hdr"], rest = rest[:28], rest[28:]
    if msg["op"] == OP_TERMINATE:
        msg["term"] = decode_terminate(rest)
        rest = b""
    msg["payload"] = rest
    return msg


def decode_terminate(b):
    """The Terminate header: code, HdrCt bits and the parts they announce (RFC 5040 §4.8).
    `extra` holds octets after what HdrCt announces (a sender may send the fixed layout with
    zeros, requirements C-06)."""
    t = {"raw": b}
    if len(b) < 4:
        t["malformed"] = f"{len(b)} octets"
        return t
    t.update(layer=b[0] >> 4, etype=b[0] & 0xF, code=b[1], m=bool(b[2] & 0x80),
             d=bool(b[2] & 0x40), r=bool(b[2] & 0x20), reserved=((b[2] & 0x1F) << 8) | b[3])
    off = 4
    if t["m"] or t["d"]:
        if len(b) < off + 2:
            t["malformed"] = "no DDP Segment Length"
            return t
        t["seglen"] = struct.unpack(">H", b[off:off + 2])[0]
        off += 2
    if t["d"]:
        n = 14 if len(b) > off and b[off] & 0x80 else 18
        if len(b) < off + n:
            t["malformed"] = "DDP header cut short"
            return t
        t["ddp"] = b[off:off + n]
        off += n
    if t["r"]:
        if len(b) < off + 28:
            t["malformed"] = "RDMA header cut short"
            return t
        t["rdma"] = b[off:off + 28]
        off += 28
    t["extra"] = b[off:]
    return t


def describe(msg):
    if msg.get("short") and "op" not in msg:
        return f"{msg['len']}-octet ULPDU"
    name = OP_NAMES.get(msg["op"], f"opcode {msg['op']:#x}")
    if msg.get("short"):
        return f"{name} ({msg['len']}-octet ULPDU, short)"
    if msg["t"]:
        s = f"{name} STag={msg['stag']:#x} TO={msg['to']:#x} L={int(msg['l'])} len={len(msg['payload'])}"
    else:
        s = (f"{name} QN={msg['qn']} MSN={msg['msn']} MO={msg['mo']} L={int(msg['l'])}"
             f" len={len(msg['payload'])}")
    if "size" in msg:
        s += f" sink={msg['sink_stag']:#x}/{msg['sink_to']:#x} size={msg['size']} src={msg['src_stag']:#x}/{msg['src_to']:#x}"
    if "term" in msg:
        s += " " + describe_terminate(msg["term"])
    return s


def describe_terminate(t):
    if "layer" not in t:
        return f"<malformed: {t.get('malformed')}>"
    s = f"L{t['layer']}/E{t['etype']}/{t['code']:#04x} HdrCt={int(t['m'])}{int(t['d'])}{int(t['r'])}"
    if "seglen" in t:
        s += f" seglen={t['seglen']}"
    if "ddp" in t:
        s += f" ddp={t['ddp'].hex()}"
    if "rdma" in t:
        s += f" rdma={t['rdma'].hex()}"
    if t.get("extra"):
        s += f" +{len(t['extra'])} octets"
    if "malformed" in t:
        s += f" <malformed: {t['malformed']}>"
    return s


# ---- self-test: RFC 5044 §4.4 Figs. 5 and 6 (requirements Appendix A) -------------------------

def selftest():
    vec1 = bytes.fromhex("00000000" "002a" "4143" "00000000" "00000000" "00000001" "00000000"
                         + "00" * 24 + "52239983")
    body1 = untagged(OP_SEND, 0, 1)
    assert body1 == bytes.fromhex("4143" "00000000" "00000000" "00000001" "00000000")
    tx = FpduTx(crc=True, markers=True)
    got1 = tx.frame(body1 + bytes(24))
    assert crc32c(vec1[:-4]) == 0x83992352, hex(crc32c(vec1[:-4]))
    assert got1 == vec1, got1.hex()
    vec2 = bytes.fromhex("002a4143000000000000000000000002" "00000000" "00000014" + "00" * 24
                         + "84925898")
    tx.pos = 0x1EC
    got2 = tx.frame(untagged(OP_SEND, 0, 2) + bytes(24))
    assert crc32c(vec2[:-4]) == 0x98589284
    assert got2 == vec2, got2.hex()
    # The receiver takes both back, markers removed, CRCs good.
    rx = FpduRx(crc=True, markers=True)
    f = rx.feed(vec1)
    assert len(f) == 1 and f[0].crc_ok and f[0].ulpdu == body1 + bytes(24) and not f[0].marker_errors
    rx.pos = 0x1EC
    f = rx.feed(vec2)
    assert len(f) == 1 and f[0].crc_ok and not f[0].marker_errors, f
    # Enhanced data and frames round-trip.
    e = Enhanced(True, False, True, False, 0x3FFE, 5)
    assert Enhanced.decode(e.encode()).__dict__ == e.__dict__
    fr = MpaFrame(enhanced=e, pd=b"hi").encode()
    assert fr[:16] == KEY_REQ and fr[16] == FLAG_C | FLAG_S and fr[17] == 2 and fr[18:20] == b"\x00\x06"
    t = decode_terminate(terminate_hdr(1, 2, 5, True, True, False, 40, untagged(OP_SEND, 0, 1)))
    assert (t["layer"], t["etype"], t["code"], t["seglen"]) == (1, 2, 5, 40) and len(t["ddp"]) == 18
    return True


if __name__ == "__main__":
    print("ok" if selftest() else "FAIL")
