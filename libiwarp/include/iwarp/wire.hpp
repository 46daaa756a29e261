// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// iWARP wire formats: MPA (RFC 5044, RFC 6581), DDP (RFC 5041), RDMAP (RFC 5040,
// RFC 7306). Pure value types with explicit encode/decode; every multi-octet field
// is big-endian on the wire. Decoding a fixed-size header never fails (every bit
// pattern is some header); whether the values are acceptable is decided by the
// protocol engines, which answer with the Terminate codes defined here.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace iwarp {

using ConstBytes = std::span<const std::byte>;
using MutBytes = std::span<std::byte>;

// ---- big-endian field access -------------------------------------------------

constexpr std::uint16_t load_be16(const std::byte* p) {
  return static_cast<std::uint16_t>((std::to_integer<unsigned>(p[0]) << 8) |
                                    std::to_integer<unsigned>(p[1]));
}
constexpr std::uint32_t load_be32(const std::byte* p) {
  return (std::uint32_t{load_be16(p)} << 16) | load_be16(p + 2);
}
constexpr std::uint64_t load_be64(const std::byte* p) {
  return (std::uint64_t{load_be32(p)} << 32) | load_be32(p + 4);
}
constexpr void store_be16(std::byte* p, std::uint16_t v) {
  p[0] = std::byte(v >> 8);
  p[1] = std::byte(v & 0xff);
}
constexpr void store_be32(std::byte* p, std::uint32_t v) {
  store_be16(p, static_cast<std::uint16_t>(v >> 16));
  store_be16(p + 2, static_cast<std::uint16_t>(v));
}
constexpr void store_be64(std::byte* p, std::uint64_t v) {
  store_be32(p, static_cast<std::uint32_t>(v >> 32));
  store_be32(p + 4, static_cast<std::uint32_t>(v));
}

// ---- constants ---------------------------------------------------------------

inline constexpr std::size_t kMarkerSpacing = 512; // RFC 5044 §4.2
inline constexpr std::size_t kMarkerLen = 4;       // RESERVED(16) | FPDUPTR(16)
inline constexpr std::size_t kMpaLenField = 2;     // ULPDU_Length
inline constexpr std::size_t kCrcLen = 4;          // RFC 5044 §4.1
inline constexpr std::size_t kMaxUlpdu = 64768;    // RFC 5044 §3
// With siw's large-FPDU flag negotiated (kMpaFlagLargeFpdu) the peer sizes FPDUs to its TCP
// GSO segment, not the MSS: only the 16-bit ULPDU_Length field bounds them.
inline constexpr std::size_t kMaxUlpduLargeFpdu = 65535;
inline constexpr std::size_t kMinMulpdu = 128;      // RFC 5044 §4.5
inline constexpr std::size_t kMaxPrivateData = 512; // RFC 5044 §7.1.1
inline constexpr std::size_t kMpaFrameHeaderLen = 20;
inline constexpr std::size_t kEnhancedDataLen = 4;    // RFC 6581 §9
inline constexpr std::size_t kTaggedHdrLen = 14;      // RFC 5041 §4.2
inline constexpr std::size_t kUntaggedHdrLen = 18;    // RFC 5041 §4.3
inline constexpr std::size_t kReadRequestHdrLen = 28; // RFC 5040 §4.4
inline constexpr std::size_t kTerminateCtrlLen = 4;   // RFC 5040 §4.8
inline constexpr std::size_t kTerminateMaxLen = 4 + 2 + kUntaggedHdrLen + kReadRequestHdrLen;
inline constexpr std::size_t kAtomicRequestHdrLen = 52;  // RFC 7306 §4.3
inline constexpr std::size_t kAtomicResponseHdrLen = 12; // RFC 7306 §4.4 Fig. 6
inline constexpr std::size_t kImmediateDataLen = 8;      // RFC 7306 §4.2
inline constexpr std::uint16_t kIrdOrdMask = 0x3fff;     // RFC 6581 §9
inline constexpr std::uint16_t kIrdOrdNoNegotiation = 0x3fff;

// Octets of FPDU overhead around a ULPDU of `ulpdu_len`: length field, pad, CRC.
constexpr std::size_t fpdu_pad(std::size_t ulpdu_len) {
  return (4 - ((kMpaLenField + ulpdu_len) & 3)) & 3;
}
constexpr std::size_t fpdu_len_without_markers(std::size_t ulpdu_len) {
  return kMpaLenField + ulpdu_len + fpdu_pad(ulpdu_len) + kCrcLen;
}

// RFC 5044 §4.5 (MPA-040, MPA-042).
constexpr std::size_t mulpdu_for_emss(std::size_t emss, bool markers) {
  std::size_t overhead = 6 + emss % 4;
  if (markers) overhead += 4 * ((emss + kMarkerSpacing - 1) / kMarkerSpacing);
  std::size_t m = emss > overhead ? emss - overhead : 0;
  if (m < kMinMulpdu) m = kMinMulpdu;
  if (m > kMaxUlpdu) m = kMaxUlpdu;
  return m;
}

// ---- Terminate error codes (RFC 5040 §4.8 Fig. 9, RFC 5041 §7.2, RFC 5044 §8, RFC 6581 §8)

enum class TermLayer : std::uint8_t { Rdmap = 0, Ddp = 1, Llp = 2 };

struct TermCode {
  TermLayer layer{};
  std::uint8_t etype{};
  std::uint8_t code{};
  friend constexpr bool operator==(const TermCode&, const TermCode&) = default;
};

namespace term {
// RDMAP (layer 0)
inline constexpr std::uint8_t kRdmapLocalCatastrophic = 0, kRdmapRemoteProtection = 1,
                              kRdmapRemoteOperation = 2;
inline constexpr TermCode rdmap_local_catastrophic{TermLayer::Rdmap, 0, 0x00};
inline constexpr TermCode rdmap_invalid_stag{TermLayer::Rdmap, 1, 0x00};
inline constexpr TermCode rdmap_base_bounds{TermLayer::Rdmap, 1, 0x01};
inline constexpr TermCode rdmap_access_rights{TermLayer::Rdmap, 1, 0x02};
inline constexpr TermCode rdmap_stag_not_assoc{TermLayer::Rdmap, 1, 0x03};
inline constexpr TermCode rdmap_to_wrap{TermLayer::Rdmap, 1, 0x04};
inline constexpr TermCode rdmap_stag_cannot_invalidate{TermLayer::Rdmap, 1, 0x09};
inline constexpr TermCode rdmap_prot_unspecified{TermLayer::Rdmap, 1, 0xff};
inline constexpr TermCode rdmap_invalid_version{TermLayer::Rdmap, 2, 0x05};
inline constexpr TermCode rdmap_unexpected_opcode{TermLayer::Rdmap, 2, 0x06};
inline constexpr TermCode rdmap_catastrophic_stream{TermLayer::Rdmap, 2, 0x07};
inline constexpr TermCode rdmap_catastrophic_global{TermLayer::Rdmap, 2, 0x08};
inline constexpr TermCode rdmap_op_unspecified{TermLayer::Rdmap, 2, 0xff};
// DDP (layer 1)
inline constexpr TermCode ddp_local_catastrophic{TermLayer::Ddp, 0, 0x00};
inline constexpr TermCode ddp_tagged_invalid_stag{TermLayer::Ddp, 1, 0x00};
inline constexpr TermCode ddp_tagged_base_bounds{TermLayer::Ddp, 1, 0x01};
inline constexpr TermCode ddp_tagged_stag_not_assoc{TermLayer::Ddp, 1, 0x02};
inline constexpr TermCode ddp_tagged_to_wrap{TermLayer::Ddp, 1, 0x03};
inline constexpr TermCode ddp_tagged_invalid_version{TermLayer::Ddp, 1, 0x04};
inline constexpr TermCode ddp_untagged_invalid_qn{TermLayer::Ddp, 2, 0x01};
inline constexpr TermCode ddp_untagged_no_buffer{TermLayer::Ddp, 2, 0x02};
inline constexpr TermCode ddp_untagged_msn_range{TermLayer::Ddp, 2, 0x03};
inline constexpr TermCode ddp_untagged_invalid_mo{TermLayer::Ddp, 2, 0x04};
inline constexpr TermCode ddp_untagged_too_long{TermLayer::Ddp, 2, 0x05};
inline constexpr TermCode ddp_untagged_invalid_version{TermLayer::Ddp, 2, 0x06};
// LLP = MPA (layer 2, EType 0)
inline constexpr TermCode mpa_tcp_closed{TermLayer::Llp, 0, 0x01};
inline constexpr TermCode mpa_crc_error{TermLayer::Llp, 0, 0x02};
inline constexpr TermCode mpa_marker_mismatch{TermLayer::Llp, 0, 0x03};
inline constexpr TermCode mpa_invalid_frame{TermLayer::Llp, 0, 0x04};
inline constexpr TermCode mpa_local_catastrophic{TermLayer::Llp, 0, 0x05};
inline constexpr TermCode mpa_insufficient_ird{TermLayer::Llp, 0, 0x06};
inline constexpr TermCode mpa_no_matching_rtr{TermLayer::Llp, 0, 0x07};
} // namespace term

// Human-readable name of a Terminate code, e.g. "DDP tagged: invalid STag".
std::string_view term_code_name(TermCode c);

// ---- MPA Request / Reply (RFC 5044 §7.1.1, RFC 6581 §6, §9) ------------------

enum class MpaKind : std::uint8_t { Request, Reply };

inline constexpr std::string_view kMpaRequestKey = "MPA ID Req Frame";
inline constexpr std::string_view kMpaReplyKey = "MPA ID Rep Frame";

// Flag bits of octet 16.
inline constexpr std::uint8_t kMpaFlagM = 0x80;
inline constexpr std::uint8_t kMpaFlagC = 0x40;
inline constexpr std::uint8_t kMpaFlagR = 0x20;
inline constexpr std::uint8_t kMpaFlagS = 0x10; // Linux: MPA_ENHANCED_RDMA_CONN
// Linux siw's private "I accept FPDUs larger than the MTU" bit (MPA_RR_FLAG_GSO_EXP,
// 0x0800 of the 16-bit flags|rev word). A Res bit to RFC 5044, so others ignore it.
inline constexpr std::uint8_t kMpaFlagLargeFpdu = 0x08;
// uiwarp's private "I speak RFC 7306 (Immediate Data, Atomics)" bit: a Res bit as well, which
// RFC 5044 §7.1.1 has receivers ignore. A responder echoes it only when it set it in reply to
// a Request that had it, so a peer that is not uiwarp never sees an RFC 7306 opcode.
inline constexpr std::uint8_t kMpaFlagRfc7306 = 0x04;
// uiwarp's private "same host" bit: another Res bit (RFC 5044 §7.1.1), negotiated as the RFC
// 7306 one. The Request carries only the bit; a responder echoes it only to a Request that had
// it, and then (never in a reject) appends a SameHostOffer to the Reply's private data.
inline constexpr std::uint8_t kMpaFlagSameHost = 0x02;
// uiwarp's "this Reply answers uiwarp's bits" mark, the last Res bit. Linux siw writes its
// Reply over the Request's own header, so a siw responder returns every Res bit it was sent:
// 0x04 and 0x02 in a Reply prove nothing by themselves. A uiwarp responder sets 0x01 in a Reply
// to a Request that carried 0x04 or 0x02, and an initiator counts those bits only beside it.
// An initiator never sets it, so no echo can carry it.
inline constexpr std::uint8_t kMpaFlagUiwarpReply = 0x01;

// RFC 6581 §9: the 4 enhanced octets at the front of the private data when S=1.
struct MpaEnhanced {
  bool p2p = false;       // A
  bool rtr_send = false;  // B: zero-length Send
  bool rtr_write = false; // C: zero-length RDMA Write
  bool rtr_read = false;  // D: zero-length RDMA Read
  std::uint16_t ird = 0;  // 14 bits
  std::uint16_t ord = 0;  // 14 bits

  void encode(std::byte* out) const;
  static MpaEnhanced decode(const std::byte* in);
  friend bool operator==(const MpaEnhanced&, const MpaEnhanced&) = default;
};

// uiwarp's same-host offer: the last kSameHostOfferLen octets of the private data of a Reply
// with kMpaFlagSameHost, after the ULP's (and after the RFC 6581 §9 enhanced octets, which stay
// first). It names the responder's process, so that a uiwarp initiator on the same host can
// move RDMA data with process_vm_writev/readv. libiwarp only carries the values: the caller
// reads them from /proc. Layout, big-endian: magic "UWSH" (4) | version (1) | reserved (3, 0)
// | boot id (16) | pid namespace id (8) | uid (4) | pid (4) | table fd (4) | slot (4) |
// nonce (16). Decoding never fails; the startup machine checks magic and version.
inline constexpr std::size_t kSameHostOfferLen = 64;
static_assert(48 + 16 == kSameHostOfferLen); // the nonce ends the offer
inline constexpr std::array<std::byte, 4> kSameHostMagic = {std::byte{'U'}, std::byte{'W'},
                                                            std::byte{'S'}, std::byte{'H'}};
inline constexpr std::uint8_t kSameHostVersion = 1;

struct SameHostOffer {
  std::array<std::byte, 4> magic = kSameHostMagic;
  std::uint8_t version = kSameHostVersion;
  std::array<std::byte, 16> boot_id{}; // /proc/sys/kernel/random/boot_id, as 16 octets
  std::uint64_t pid_ns = 0;            // inode of /proc/self/ns/pid
  std::uint32_t uid = 0;
  std::uint32_t pid = 0;
  std::uint32_t table_fd = 0; // a descriptor number in the responder's process
  std::uint32_t slot = 0;     // an index in the responder's shared table
  std::array<std::byte, 16> nonce{};

  bool valid() const { return magic == kSameHostMagic && version == kSameHostVersion; }
  // Inline: uiwarpd's protocol carries offers, and the shim that speaks it is built without the
  // sanitizers the rest may have, so it must not link the compiled core for them.
  void encode(std::byte* out) const { // writes kSameHostOfferLen octets, reserved ones zero
    std::memcpy(out, magic.data(), magic.size());
    out[4] = std::byte(version);
    out[5] = out[6] = out[7] = std::byte{0};
    std::memcpy(out + 8, boot_id.data(), boot_id.size());
    store_be64(out + 24, pid_ns);
    store_be32(out + 32, uid);
    store_be32(out + 36, pid);
    store_be32(out + 40, table_fd);
    store_be32(out + 44, slot);
    std::memcpy(out + 48, nonce.data(), nonce.size());
  }
  static SameHostOffer decode(const std::byte* in) { // reserved octets ignored
    SameHostOffer o;
    std::memcpy(o.magic.data(), in, o.magic.size());
    o.version = std::to_integer<std::uint8_t>(in[4]);
    std::memcpy(o.boot_id.data(), in + 8, o.boot_id.size());
    o.pid_ns = load_be64(in + 24);
    o.uid = load_be32(in + 32);
    o.pid = load_be32(in + 36);
    o.table_fd = load_be32(in + 40);
    o.slot = load_be32(in + 44);
    std::memcpy(o.nonce.data(), in + 48, o.nonce.size());
    return o;
  }
  friend bool operator==(const SameHostOffer&, const SameHostOffer&) = default;
};

// The fixed 20-octet part of a Request/Reply.
struct MpaFrameHeader {
  MpaKind kind = MpaKind::Request;
  std::uint8_t flags = 0; // M, C, R, S and the Res bits as received
  std::uint8_t rev = 1;
  std::uint16_t pd_length = 0;

  bool markers() const { return flags & kMpaFlagM; }
  bool crc() const { return flags & kMpaFlagC; }
  bool reject() const { return flags & kMpaFlagR; }
  bool enhanced() const { return flags & kMpaFlagS; }

  void encode(std::byte* out) const; // writes kMpaFrameHeaderLen octets
  // Returns nullopt when the key is neither Request nor Reply (RFC 5044 §7.1.1).
  static std::optional<MpaFrameHeader> decode(const std::byte* in);
};

// A whole Request/Reply, private data split into the enhanced part, the ULP's and uiwarp's
// same-host offer. encode() writes the parts in that order; the receiving split, which needs
// to know what the Request asked for, is MpaStartup's.
struct MpaFrame {
  MpaKind kind = MpaKind::Request;
  bool markers = false;
  bool crc = true;
  bool reject = false;
  bool large_fpdu = false;   // siw's private flag, see kMpaFlagLargeFpdu
  bool rfc7306 = false;      // uiwarp's private flag, see kMpaFlagRfc7306
  bool uiwarp_reply = false; // a Reply: kMpaFlagUiwarpReply, its uiwarp bits are answers
  bool same_host = false;    // uiwarp's private flag, see kMpaFlagSameHost
  std::uint8_t rev = 2;
  std::optional<MpaEnhanced> enhanced; // S=1 iff present
  std::vector<std::byte> private_data; // ULP private data (after enhanced data)
  // The trailer after the ULP's private data: only in a Reply with same_host.
  std::optional<SameHostOffer> same_host_offer;

  std::size_t pd_length() const {
    return (enhanced ? kEnhancedDataLen : 0) + private_data.size() +
           (same_host_offer ? kSameHostOfferLen : 0);
  }
  std::vector<std::byte> encode() const;
};

// ---- DDP / RDMAP headers (RFC 5041 §4, RFC 5040 §4.1) --------------------------

enum class Opcode : std::uint8_t {
  RdmaWrite = 0x0,
  RdmaReadRequest = 0x1,
  RdmaReadResponse = 0x2,
  Send = 0x3,
  SendInvalidate = 0x4,
  SendSe = 0x5,
  SendSeInvalidate = 0x6,
  Terminate = 0x7,
  ImmediateData = 0x8,   // RFC 7306
  ImmediateDataSe = 0x9, // RFC 7306
  AtomicRequest = 0xa,   // RFC 7306
  AtomicResponse = 0xb,  // RFC 7306
};
std::string_view opcode_name(std::uint8_t op);

// Untagged queue numbers RDMAP uses (RFC 5040 §4.1 Fig. 4, RFC 7306 §4.1).
inline constexpr std::uint32_t kQnSend = 0;
inline constexpr std::uint32_t kQnReadRequest = 1;
inline constexpr std::uint32_t kQnTerminate = 2;
inline constexpr std::uint32_t kQnAtomicResponse = 3;

// DDP version (DV) and RDMAP version (RV): 1 = IETF, 0 = RDMAC (IOP §3).
inline constexpr std::uint8_t kVersionIetf = 1;
inline constexpr std::uint8_t kVersionRdmac = 0;

struct OpcodeInfo {
  bool valid;            // defined by RFC 5040 or RFC 7306
  bool rfc7306;          // an extension opcode
  bool tagged;           // T bit it must carry
  std::uint32_t qn;      // queue for untagged messages
  std::size_t rdmap_hdr; // RDMAP header after the DDP header
  bool payload;          // ULP payload allowed
  bool invalidate;       // carries an Invalidate STag
  bool solicited;        // SE type
};
// Static table, RFC 5040 §4.1 Fig. 4 and RFC 7306 §4.1.
const OpcodeInfo& opcode_info(std::uint8_t op);

// DDP control + RDMAP control + the tagged or untagged DDP fields.
struct DdpHeader {
  bool tagged = false;
  bool last = true;
  std::uint8_t ddp_version = kVersionIetf;   // DV, 2 bits
  std::uint8_t rdmap_version = kVersionIetf; // RV, 2 bits
  std::uint8_t opcode = 0;                   // 4 bits
  // tagged (RFC 5041 §4.2)
  std::uint32_t stag = 0;
  std::uint64_t to = 0;
  // untagged (RFC 5041 §4.3)
  std::uint32_t inval_stag = 0; // RsvdULP[8:39]
  std::uint32_t qn = 0;
  std::uint32_t msn = 0;
  std::uint32_t mo = 0;

  std::size_t size() const { return tagged ? kTaggedHdrLen : kUntaggedHdrLen; }
  Opcode op() const { return static_cast<Opcode>(opcode); }
  void encode(std::byte* out) const; // writes size() octets
  // `in` must hold at least 2 octets to learn T; then size() octets.
  static bool is_tagged(const std::byte* in) { return std::to_integer<unsigned>(in[0]) & 0x80; }
  static DdpHeader decode(const std::byte* in);
  friend bool operator==(const DdpHeader&, const DdpHeader&) = default;
};

// RFC 5040 §4.4.
struct ReadRequestHeader {
  std::uint32_t sink_stag = 0;
  std::uint64_t sink_to = 0;
  std::uint32_t size = 0; // RDMARDSZ
  std::uint32_t src_stag = 0;
  std::uint64_t src_to = 0;

  void encode(std::byte* out) const;
  static ReadRequestHeader decode(const std::byte* in);
  friend bool operator==(const ReadRequestHeader&, const ReadRequestHeader&) = default;
};

// RFC 5040 §4.8. The optional parts follow the HdrCt bits: the DDP Segment
// Length when M or D is set, the terminated DDP header (14 or 18 octets) when D,
// the terminated RDMA header (28 octets) when R. Decoding tolerates a sender that
// pads the fixed layout with zeros (requirements C-06).
struct TerminateHeader {
  TermCode code{};
  bool m = false; // DDP Segment Length valid
  bool d = false; // Terminated DDP header included
  bool r = false; // Terminated RDMA header included
  std::uint16_t ddp_segment_length = 0;
  std::uint8_t ddp_header_len = 0; // 0, kTaggedHdrLen or kUntaggedHdrLen
  std::array<std::byte, kUntaggedHdrLen> ddp_header{};
  std::array<std::byte, kReadRequestHdrLen> rdma_header{};

  std::size_t encoded_size() const;
  void encode(std::byte* out) const; // writes encoded_size() octets
  // nullopt when `in` is shorter than the HdrCt bits promise (HX-093).
  static std::optional<TerminateHeader> decode(ConstBytes in);
};

// RFC 7306 §4.3 / §4.4.
enum class AtomicOp : std::uint8_t { FetchAdd = 0x0, CompareSwap = 0x2 };
struct AtomicRequestHeader {
  std::uint8_t aopcode = 0;
  std::uint32_t req_id = 0;
  std::uint32_t remote_stag = 0;
  std::uint64_t remote_to = 0;
  std::uint64_t add_swap = 0;
  std::uint64_t add_swap_mask = ~0ull;
  std::uint64_t compare = 0;
  std::uint64_t compare_mask = ~0ull;

  void encode(std::byte* out) const;
  static AtomicRequestHeader decode(const std::byte* in);
};
struct AtomicResponseHeader {
  std::uint32_t orig_req_id = 0;
  std::uint64_t orig_value = 0;
  void encode(std::byte* out) const;
  static AtomicResponseHeader decode(const std::byte* in);
};

} // namespace iwarp
