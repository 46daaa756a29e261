// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#include "iwarp/dump.hpp"

#include <cstdio>

namespace iwarp {

namespace {
std::string hex32(std::uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", v);
  return b;
}
} // namespace

std::string describe_ulpdu(ConstBytes u) {
  if (u.size() < kTaggedHdrLen) return "runt ULPDU of " + std::to_string(u.size()) + " octets";
  DdpHeader h = DdpHeader::decode(u.data());
  if (u.size() < h.size()) return "runt untagged ULPDU of " + std::to_string(u.size()) + " octets";
  std::string s(opcode_name(h.opcode));
  s += " L=" + std::to_string(h.last) + " DV=" + std::to_string(h.ddp_version) +
       " RV=" + std::to_string(h.rdmap_version);
  if (h.tagged) {
    s += " STag=" + hex32(h.stag) + " TO=" + std::to_string(h.to);
  } else {
    s += " QN=" + std::to_string(h.qn) + " MSN=" + std::to_string(h.msn) +
         " MO=" + std::to_string(h.mo);
    if (opcode_info(h.opcode).invalidate) s += " InvSTag=" + hex32(h.inval_stag);
  }
  ConstBytes rest = u.subspan(h.size());
  const OpcodeInfo& info = opcode_info(h.opcode);
  if (h.op() == Opcode::RdmaReadRequest && rest.size() >= kReadRequestHdrLen) {
    ReadRequestHeader r = ReadRequestHeader::decode(rest.data());
    s += " [sink STag=" + hex32(r.sink_stag) + " TO=" + std::to_string(r.sink_to) +
         " size=" + std::to_string(r.size) + " src STag=" + hex32(r.src_stag) +
         " TO=" + std::to_string(r.src_to) + "]";
    rest = rest.subspan(kReadRequestHdrLen);
  } else if (h.op() == Opcode::Terminate) {
    if (auto t = TerminateHeader::decode(rest)) {
      s += " [" + std::string(term_code_name(t->code)) + (t->m ? " M" : "") + (t->d ? " D" : "") +
           (t->r ? " R" : "") + "]";
    } else {
      s += " [malformed Terminate header]";
    }
    return s;
  } else if (!info.payload && info.rdmap_hdr && rest.size() >= info.rdmap_hdr) {
    rest = rest.subspan(info.rdmap_hdr);
  }
  s += ", " + std::to_string(rest.size()) + " payload octets";
  return s;
}

std::string describe_mpa_frame(ConstBytes f) {
  if (f.size() < kMpaFrameHeaderLen) return "truncated MPA frame";
  auto h = MpaFrameHeader::decode(f.data());
  if (!h) return "not an MPA frame (bad key)";
  std::string s = h->kind == MpaKind::Request ? "MPA Request" : "MPA Reply";
  s += " rev=" + std::to_string(h->rev) + " M=" + std::to_string(h->markers()) +
       " C=" + std::to_string(h->crc()) + " R=" + std::to_string(h->reject()) +
       " S=" + std::to_string(h->enhanced()) + " PD_Length=" + std::to_string(h->pd_length);
  if (h->enhanced() && f.size() >= kMpaFrameHeaderLen + kEnhancedDataLen) {
    MpaEnhanced e = MpaEnhanced::decode(f.data() + kMpaFrameHeaderLen);
    s += " [A=" + std::to_string(e.p2p) + " B=" + std::to_string(e.rtr_send) +
         " C=" + std::to_string(e.rtr_write) + " D=" + std::to_string(e.rtr_read) +
         " IRD=" + std::to_string(e.ird) + " ORD=" + std::to_string(e.ord) + "]";
  }
  return s;
}

} // namespace iwarp
