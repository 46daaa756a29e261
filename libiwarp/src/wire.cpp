// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#include "iwarp/wire.hpp"

#include <algorithm>
#include <cstring>

namespace iwarp {

namespace {

unsigned u8(std::byte b) { return std::to_integer<unsigned>(b); }

struct TermName {
  TermCode code;
  std::string_view name;
};

// RFC 5040 §4.8 Fig. 9, RFC 5041 §7.2, RFC 5044 §8, RFC 6581 §8.
constexpr TermName kTermNames[] = {
    {term::rdmap_invalid_stag, "RDMAP remote protection: invalid STag"},
    {term::rdmap_base_bounds, "RDMAP remote protection: base or bounds violation"},
    {term::rdmap_access_rights, "RDMAP remote protection: access rights violation"},
    {term::rdmap_stag_not_assoc, "RDMAP remote protection: STag not associated with RDMAP stream"},
    {term::rdmap_to_wrap, "RDMAP remote protection: TO wrap"},
    {term::rdmap_stag_cannot_invalidate, "RDMAP remote protection: STag cannot be invalidated"},
    {term::rdmap_prot_unspecified, "RDMAP remote protection: unspecified error"},
    {term::rdmap_invalid_version, "RDMAP remote operation: invalid RDMAP version"},
    {term::rdmap_unexpected_opcode, "RDMAP remote operation: unexpected opcode"},
    {term::rdmap_catastrophic_stream, "RDMAP remote operation: catastrophic, localized to stream"},
    {term::rdmap_catastrophic_global, "RDMAP remote operation: catastrophic, global"},
    {{TermLayer::Rdmap, 2, 0x09}, "RDMAP remote operation: STag cannot be invalidated"},
    {term::rdmap_op_unspecified, "RDMAP remote operation: unspecified error"},
    {term::ddp_tagged_invalid_stag, "DDP tagged buffer: invalid STag"},
    {term::ddp_tagged_base_bounds, "DDP tagged buffer: base or bounds violation"},
    {term::ddp_tagged_stag_not_assoc, "DDP tagged buffer: STag not associated with DDP stream"},
    {term::ddp_tagged_to_wrap, "DDP tagged buffer: TO wrap"},
    {term::ddp_tagged_invalid_version, "DDP tagged buffer: invalid DDP version"},
    {term::ddp_untagged_invalid_qn, "DDP untagged buffer: invalid QN"},
    {term::ddp_untagged_no_buffer, "DDP untagged buffer: invalid MSN, no buffer available"},
    {term::ddp_untagged_msn_range, "DDP untagged buffer: invalid MSN, MSN range not valid"},
    {term::ddp_untagged_invalid_mo, "DDP untagged buffer: invalid MO"},
    {term::ddp_untagged_too_long, "DDP untagged buffer: message too long for receive buffer"},
    {term::ddp_untagged_invalid_version, "DDP untagged buffer: invalid DDP version"},
    {term::mpa_tcp_closed, "MPA: TCP connection closed, terminated or lost"},
    {term::mpa_crc_error, "MPA: CRC error"},
    {term::mpa_marker_mismatch, "MPA: marker and ULPDU_Length mismatch"},
    {term::mpa_invalid_frame, "MPA: invalid Request or Reply frame"},
    {term::mpa_local_catastrophic, "MPA: local catastrophic error"},
    {term::mpa_insufficient_ird, "MPA: insufficient IRD resources"},
    {term::mpa_no_matching_rtr, "MPA: no matching RTR option"},
};

constexpr std::string_view kOpcodeNames[16] = {
    "RDMA Write",
    "RDMA Read Request",
    "RDMA Read Response",
    "Send",
    "Send with Invalidate",
    "Send with SE",
    "Send with SE and Invalidate",
    "Terminate",
    "Immediate Data",
    "Immediate Data with SE",
    "Atomic Request",
    "Atomic Response",
    "reserved (0xC)",
    "reserved (0xD)",
    "reserved (0xE)",
    "reserved (0xF)",
};

// RFC 5040 §4.1 Fig. 4, RFC 7306 §4.1 (as siw's iwarp_pktinfo[]): what each opcode carries; a
// field left out is false or 0.
constexpr OpcodeInfo kOpcodes[16] = {
    /* 0x0 RDMA Write */ {.valid = true, .tagged = true, .payload = true},
    /* 0x1 RDMA Read Request */
    {.valid = true, .qn = kQnReadRequest, .rdmap_hdr = kReadRequestHdrLen},
    /* 0x2 RDMA Read Response */ {.valid = true, .tagged = true, .payload = true},
    /* 0x3 Send */ {.valid = true, .qn = kQnSend, .payload = true},
    /* 0x4 Send with Invalidate */
    {.valid = true, .qn = kQnSend, .payload = true, .invalidate = true},
    /* 0x5 Send with SE */ {.valid = true, .qn = kQnSend, .payload = true, .solicited = true},
    /* 0x6 Send with SE and Invalidate */
    {.valid = true, .qn = kQnSend, .payload = true, .invalidate = true, .solicited = true},
    /* 0x7 Terminate */
    {.valid = true, .qn = kQnTerminate, .rdmap_hdr = kTerminateCtrlLen, .payload = true},
    /* 0x8 Immediate Data */
    {.valid = true, .rfc7306 = true, .qn = kQnSend, .rdmap_hdr = kImmediateDataLen},
    /* 0x9 Immediate Data with SE */
    {.valid = true,
     .rfc7306 = true,
     .qn = kQnSend,
     .rdmap_hdr = kImmediateDataLen,
     .solicited = true},
    /* 0xA Atomic Request */
    {.valid = true, .rfc7306 = true, .qn = kQnReadRequest, .rdmap_hdr = kAtomicRequestHdrLen},
    /* 0xB Atomic Response */
    {.valid = true, .rfc7306 = true, .qn = kQnAtomicResponse, .rdmap_hdr = kAtomicResponseHdrLen},
    /* 0xC */ {},
    /* 0xD */ {},
    /* 0xE */ {},
    /* 0xF */ {},
};
// The table above, checked against its old positional form for the rows that are easy to get
// wrong: the tagged opcodes, the invalidating Sends, the SE ones.
static_assert(kOpcodes[0x0].tagged && kOpcodes[0x2].tagged && !kOpcodes[0x1].tagged);
static_assert(kOpcodes[0x4].invalidate && kOpcodes[0x6].invalidate && !kOpcodes[0x5].invalidate);
static_assert(kOpcodes[0x5].solicited && kOpcodes[0x6].solicited && kOpcodes[0x9].solicited);
static_assert(!kOpcodes[0xC].valid && kOpcodes[0xB].rfc7306 && !kOpcodes[0x7].rfc7306);

} // namespace

std::string_view term_code_name(TermCode c) {
  for (const auto& t : kTermNames)
    if (t.code == c) return t.name;
  if (c.etype == 0) {
    switch (c.layer) {
    case TermLayer::Rdmap: return "RDMAP: local catastrophic error";
    case TermLayer::Ddp: return "DDP: local catastrophic error";
    case TermLayer::Llp: break;
    }
  }
  return "unknown Terminate code";
}

std::string_view opcode_name(std::uint8_t op) { return kOpcodeNames[op & 0xf]; }

const OpcodeInfo& opcode_info(std::uint8_t op) { return kOpcodes[op & 0xf]; }

// ---- MPA ----------------------------------------------------------------------

void MpaEnhanced::encode(std::byte* out) const {
  // RFC 6581 §9 Fig. 7/8: A|B|IRD, C|D|ORD.
  std::uint16_t w0 = (ird & kIrdOrdMask) | (p2p ? 0x8000 : 0) | (p2p && rtr_send ? 0x4000 : 0);
  std::uint16_t w1 =
      (ord & kIrdOrdMask) | (p2p && rtr_write ? 0x8000 : 0) | (p2p && rtr_read ? 0x4000 : 0);
  store_be16(out, w0);
  store_be16(out + 2, w1);
}

MpaEnhanced MpaEnhanced::decode(const std::byte* in) {
  std::uint16_t w0 = load_be16(in), w1 = load_be16(in + 2);
  MpaEnhanced e;
  e.p2p = w0 & 0x8000;
  // EMPA-037: with A=0 the B/C/D bits are ignored on receive.
  e.rtr_send = e.p2p && (w0 & 0x4000);
  e.rtr_write = e.p2p && (w1 & 0x8000);
  e.rtr_read = e.p2p && (w1 & 0x4000);
  e.ird = w0 & kIrdOrdMask;
  e.ord = w1 & kIrdOrdMask;
  return e;
}

void MpaFrameHeader::encode(std::byte* out) const {
  std::string_view key = kind == MpaKind::Request ? kMpaRequestKey : kMpaReplyKey;
  std::memcpy(out, key.data(), key.size());
  out[16] = std::byte(flags);
  out[17] = std::byte(rev);
  store_be16(out + 18, pd_length);
}

std::optional<MpaFrameHeader> MpaFrameHeader::decode(const std::byte* in) {
  MpaFrameHeader h;
  if (std::memcmp(in, kMpaRequestKey.data(), kMpaRequestKey.size()) == 0)
    h.kind = MpaKind::Request;
  else if (std::memcmp(in, kMpaReplyKey.data(), kMpaReplyKey.size()) == 0)
    h.kind = MpaKind::Reply;
  else
    return std::nullopt;
  h.flags = static_cast<std::uint8_t>(u8(in[16]));
  h.rev = static_cast<std::uint8_t>(u8(in[17]));
  h.pd_length = load_be16(in + 18);
  return h;
}

std::vector<std::byte> MpaFrame::encode() const {
  MpaFrameHeader h;
  h.kind = kind;
  h.flags = static_cast<std::uint8_t>(
      (markers ? kMpaFlagM : 0) | (crc ? kMpaFlagC : 0) |
      (reject && kind == MpaKind::Reply ? kMpaFlagR : 0) | (enhanced ? kMpaFlagS : 0) |
      (large_fpdu ? kMpaFlagLargeFpdu : 0) | (rfc7306 ? kMpaFlagRfc7306 : 0) |
      (same_host ? kMpaFlagSameHost : 0) |
      (uiwarp_reply && kind == MpaKind::Reply ? kMpaFlagUiwarpReply : 0));
  h.rev = rev;
  h.pd_length = static_cast<std::uint16_t>(pd_length());
  std::vector<std::byte> out(kMpaFrameHeaderLen + pd_length());
  h.encode(out.data());
  std::byte* p = out.data() + kMpaFrameHeaderLen;
  if (enhanced) {
    enhanced->encode(p);
    p += kEnhancedDataLen;
  }
  p = std::copy(private_data.begin(), private_data.end(), p);
  if (same_host_offer) same_host_offer->encode(p);
  return out;
}

// ---- DDP / RDMAP ----------------------------------------------------------------

void DdpHeader::encode(std::byte* out) const {
  // RFC 5041 §4.1: T | L | Rsvd(4)=0 | DV(2); RFC 5040 §4.1: RV(2) | Rsv(2)=0 | OpCode(4).
  out[0] = std::byte((tagged ? 0x80 : 0) | (last ? 0x40 : 0) | (ddp_version & 3));
  out[1] = std::byte(((rdmap_version & 3) << 6) | (opcode & 0xf));
  if (tagged) {
    store_be32(out + 2, stag);
    store_be64(out + 6, to);
  } else {
    store_be32(out + 2, inval_stag);
    store_be32(out + 6, qn);
    store_be32(out + 10, msn);
    store_be32(out + 14, mo);
  }
}

DdpHeader DdpHeader::decode(const std::byte* in) {
  DdpHeader h;
  unsigned b0 = u8(in[0]), b1 = u8(in[1]);
  h.tagged = b0 & 0x80;
  h.last = b0 & 0x40;
  h.ddp_version = b0 & 3;
  h.rdmap_version = (b1 >> 6) & 3;
  h.opcode = b1 & 0xf;
  if (h.tagged) {
    h.stag = load_be32(in + 2);
    h.to = load_be64(in + 6);
  } else {
    h.inval_stag = load_be32(in + 2);
    h.qn = load_be32(in + 6);
    h.msn = load_be32(in + 10);
    h.mo = load_be32(in + 14);
  }
  return h;
}

void ReadRequestHeader::encode(std::byte* out) const {
  store_be32(out, sink_stag);
  store_be64(out + 4, sink_to);
  store_be32(out + 12, size);
  store_be32(out + 16, src_stag);
  store_be64(out + 20, src_to);
}

ReadRequestHeader ReadRequestHeader::decode(const std::byte* in) {
  return {load_be32(in), load_be64(in + 4), load_be32(in + 12), load_be32(in + 16),
          load_be64(in + 20)};
}

std::size_t TerminateHeader::encoded_size() const {
  return kTerminateCtrlLen + (m || d ? 2 : 0) + (d ? ddp_header_len : 0) +
         (r ? kReadRequestHdrLen : 0);
}

void TerminateHeader::encode(std::byte* out) const {
  // Layer(4) EType(4) | Error Code(8) | M D R + 13 reserved bits.
  out[0] = std::byte((static_cast<unsigned>(code.layer) << 4) | (code.etype & 0xf));
  out[1] = std::byte(code.code);
  out[2] = std::byte((m ? 0x80 : 0) | (d ? 0x40 : 0) | (r ? 0x20 : 0));
  out[3] = std::byte{0};
  std::byte* p = out + kTerminateCtrlLen;
  if (m || d) {
    store_be16(p, m ? ddp_segment_length : 0);
    p += 2;
  }
  if (d) {
    std::memcpy(p, ddp_header.data(), ddp_header_len);
    p += ddp_header_len;
  }
  if (r) std::memcpy(p, rdma_header.data(), kReadRequestHdrLen);
}

std::optional<TerminateHeader> TerminateHeader::decode(ConstBytes in) {
  if (in.size() < kTerminateCtrlLen) return std::nullopt;
  TerminateHeader t;
  unsigned b0 = u8(in[0]);
  t.code = {static_cast<TermLayer>(b0 >> 4), static_cast<std::uint8_t>(b0 & 0xf),
            static_cast<std::uint8_t>(u8(in[1]))};
  unsigned b2 = u8(in[2]);
  t.m = b2 & 0x80;
  t.d = b2 & 0x40;
  t.r = b2 & 0x20;
  // C-06 (RFC 5040 §4.8 "if any" vs §7.1 rule 1 "set to zero"): a sender may use
  // the fixed 52-octet layout -- length at 4, an 18-octet DDP header slot at 6,
  // the RDMA header at 24 -- with zeros where HdrCt says nothing is valid. The
  // only variable layout that reaches 52 octets (M|D, untagged DDP header, R)
  // has the same offsets, so a Terminate of 52 octets or more is read with the
  // fixed offsets whatever its HdrCt bits (also when D=0 and R=1).
  const bool fixed = in.size() >= kTerminateMaxLen;
  std::size_t off = kTerminateCtrlLen;
  if (t.m || t.d || fixed) {
    if (in.size() < off + 2) return std::nullopt;
    if (t.m || t.d) t.ddp_segment_length = load_be16(in.data() + off);
    off += 2;
  }
  if (t.d) {
    if (in.size() < off + 2) return std::nullopt;
    t.ddp_header_len = static_cast<std::uint8_t>(
        DdpHeader::is_tagged(in.data() + off) ? kTaggedHdrLen : kUntaggedHdrLen);
    if (in.size() < off + t.ddp_header_len) return std::nullopt;
    std::memcpy(t.ddp_header.data(), in.data() + off, t.ddp_header_len);
    off += t.ddp_header_len;
  }
  if (fixed) off = kTerminateCtrlLen + 2 + kUntaggedHdrLen;
  if (t.r) {
    if (in.size() < off + kReadRequestHdrLen) return std::nullopt;
    std::memcpy(t.rdma_header.data(), in.data() + off, kReadRequestHdrLen);
  }
  return t;
}

void AtomicRequestHeader::encode(std::byte* out) const {
  store_be32(out, aopcode & 0xf);
  store_be32(out + 4, req_id);
  store_be32(out + 8, remote_stag);
  store_be64(out + 12, remote_to);
  store_be64(out + 20, add_swap);
  store_be64(out + 28, add_swap_mask);
  store_be64(out + 36, compare);
  store_be64(out + 44, compare_mask);
}

AtomicRequestHeader AtomicRequestHeader::decode(const std::byte* in) {
  AtomicRequestHeader a;
  a.aopcode = static_cast<std::uint8_t>(load_be32(in) & 0xf);
  a.req_id = load_be32(in + 4);
  a.remote_stag = load_be32(in + 8);
  a.remote_to = load_be64(in + 12);
  a.add_swap = load_be64(in + 20);
  a.add_swap_mask = load_be64(in + 28);
  a.compare = load_be64(in + 36);
  a.compare_mask = load_be64(in + 44);
  return a;
}

void AtomicResponseHeader::encode(std::byte* out) const {
  store_be32(out, orig_req_id);
  store_be64(out + 4, orig_value);
}

AtomicResponseHeader AtomicResponseHeader::decode(const std::byte* in) {
  return {load_be32(in), load_be64(in + 4)};
}

} // namespace iwarp
