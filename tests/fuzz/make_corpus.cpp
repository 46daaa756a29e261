// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Writes the seed corpora of the fuzz targets: valid FPDU streams for fuzz_rx
// (built with FpduTx against the STags of fuzz_rx_fixture.hpp), valid MPA
// Request/Reply frames for fuzz_mpa_startup, one encoded uiwarpd client
// protocol message of each type for fuzz_daemon_proto, and rdma_cm command
// sequences for fuzz_ucma (make_corpus_ucma.cpp). The build runs it, so the seeds
// always match the fixture; tests/fuzz/corpus/ holds a copy of them (for
// running a fuzzer by hand; regenerate with `make_corpus tests/fuzz/corpus`),
// plus regression inputs (regress-*) and a libFuzzer-minimised set of inputs
// found by fuzzing (named by their SHA-1), which gives the 30-s ctest runs a
// head start.
//
//   make_corpus OUTDIR   writes OUTDIR/rx/*, OUTDIR/mpa/*, OUTDIR/daemon_proto/*, OUTDIR/ucma/*
#include "daemon_proto_samples.hpp"
#include "fuzz_mpa_startup.hpp"
#include "fuzz_rx_fixture.hpp"
#include "iwarp/framing.hpp"
#include "iwarp/wire.hpp"
#include "uiwarp/daemon_proto.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

using namespace iwarp;
namespace fs = std::filesystem;

void ucma_seeds(const fs::path& dir); // make_corpus_ucma.cpp

namespace {

std::vector<std::byte> bytes_of(std::size_t n, std::uint8_t salt) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = std::byte(static_cast<unsigned>((i * 7 + salt) & 0xff));
  return v;
}

std::vector<std::byte> text(std::string_view s) {
  std::vector<std::byte> v(s.size());
  for (std::size_t i = 0; i < s.size(); ++i)
    v[i] = std::byte(static_cast<unsigned char>(s[i]));
  return v;
}

// The peer's side of Full Operation: DDP segments framed into FPDUs.
class StreamBuilder {
public:
  StreamBuilder(bool crc, bool markers, std::uint8_t version, std::size_t mulpdu = 1448)
      : tx_(crc, markers), version_(version), mulpdu_(mulpdu) {}

  void segment(const DdpHeader& h, ConstBytes rdmap, ConstBytes payload) {
    std::vector<std::byte> hdr(h.size() + rdmap.size());
    h.encode(hdr.data());
    std::copy(rdmap.begin(), rdmap.end(), hdr.begin() + static_cast<std::ptrdiff_t>(h.size()));
    ConstBytes pieces[1] = {payload};
    auto f = tx_.frame_bytes(hdr, std::span<const ConstBytes>(pieces, payload.empty() ? 0 : 1));
    out_.insert(out_.end(), f.begin(), f.end());
  }

  DdpHeader untagged(Opcode op, std::uint32_t qn, std::uint32_t msn) const {
    DdpHeader h;
    h.tagged = false;
    h.ddp_version = h.rdmap_version = version_;
    h.opcode = static_cast<std::uint8_t>(op);
    h.qn = qn;
    h.msn = msn;
    return h;
  }
  DdpHeader tagged(Opcode op, std::uint32_t stag, std::uint64_t to) const {
    DdpHeader h;
    h.tagged = true;
    h.ddp_version = h.rdmap_version = version_;
    h.opcode = static_cast<std::uint8_t>(op);
    h.stag = stag;
    h.to = to;
    return h;
  }

  // A Send (or Send with SE/Invalidate) split into MULPDU-sized segments.
  void send(std::uint32_t msn, ConstBytes msg, Opcode op = Opcode::Send, std::uint32_t inval = 0) {
    DdpHeader h = untagged(op, kQnSend, msn);
    h.inval_stag = inval;
    const std::size_t room = mulpdu_ - kUntaggedHdrLen;
    std::size_t off = 0;
    do {
      std::size_t n = std::min(room, msg.size() - off);
      h.mo = static_cast<std::uint32_t>(off);
      h.last = off + n == msg.size();
      segment(h, {}, msg.subspan(off, n));
      off += n;
    } while (off < msg.size());
  }
  // An RDMA Write or Read Response split into segments.
  void tagged_msg(Opcode op, std::uint32_t stag, std::uint64_t to, ConstBytes data) {
    const std::size_t room = mulpdu_ - kTaggedHdrLen;
    std::size_t off = 0;
    do {
      std::size_t n = std::min(room, data.size() - off);
      DdpHeader h = tagged(op, stag, to + off);
      h.last = off + n == data.size();
      segment(h, {}, data.subspan(off, n));
      off += n;
    } while (off < data.size());
  }
  void write(std::uint32_t stag, std::uint64_t to, ConstBytes data) {
    tagged_msg(Opcode::RdmaWrite, stag, to, data);
  }
  void read_response(std::uint32_t stag, std::uint64_t to, ConstBytes data) {
    tagged_msg(Opcode::RdmaReadResponse, stag, to, data);
  }
  void read_request(std::uint32_t msn, const ReadRequestHeader& rr) {
    std::array<std::byte, kReadRequestHdrLen> b{};
    rr.encode(b.data());
    segment(untagged(Opcode::RdmaReadRequest, kQnReadRequest, msn), b, {});
  }
  void terminate(std::uint32_t msn, const TerminateHeader& t) {
    std::vector<std::byte> b(t.encoded_size());
    t.encode(b.data());
    segment(untagged(Opcode::Terminate, kQnTerminate, msn), b, {});
  }
  void immediate(std::uint32_t msn, std::uint64_t v, bool se = false) {
    std::array<std::byte, kImmediateDataLen> b{};
    store_be64(b.data(), v);
    segment(untagged(se ? Opcode::ImmediateDataSe : Opcode::ImmediateData, kQnSend, msn), b, {});
  }
  void atomic_request(std::uint32_t msn, const AtomicRequestHeader& a) {
    std::array<std::byte, kAtomicRequestHdrLen> b{};
    a.encode(b.data());
    segment(untagged(Opcode::AtomicRequest, kQnReadRequest, msn), b, {});
  }
  void atomic_response(std::uint32_t msn, const AtomicResponseHeader& a) {
    std::array<std::byte, kAtomicResponseHdrLen> b{};
    a.encode(b.data());
    segment(untagged(Opcode::AtomicResponse, kQnAtomicResponse, msn), b, {});
  }
  void raw(ConstBytes b) { out_.insert(out_.end(), b.begin(), b.end()); }
  std::vector<std::byte>& bytes() { return out_; }

private:
  FpduTx tx_;
  std::uint8_t version_;
  std::size_t mulpdu_;
  std::vector<std::byte> out_;
};

class Writer {
public:
  explicit Writer(fs::path dir) : dir_(std::move(dir)) { fs::create_directories(dir_); }
  void put(const std::string& name, std::initializer_list<std::uint8_t> hdr,
           const std::vector<std::byte>& body) {
    std::ofstream f(dir_ / name, std::ios::binary | std::ios::trunc);
    for (std::uint8_t b : hdr)
      f.put(static_cast<char>(b));
    f.write(reinterpret_cast<const char*>(body.data()), static_cast<std::streamsize>(body.size()));
    if (!f) throw std::runtime_error("cannot write " + (dir_ / name).string());
    ++count_;
  }
  int count() const { return count_; }

private:
  fs::path dir_;
  int count_ = 0;
};

// ---- fuzz_rx seeds -------------------------------------------------------------

void rx_seeds(const fs::path& dir) {
  namespace rx = iwarp_fuzz::rx;
  const rx::Fixture fx;
  Writer w(dir);
  const std::uint8_t kMul1448 = 3 << rx::kCfg2MulpduShift;
  const std::uint8_t kMul1024 = 2 << rx::kCfg2MulpduShift;

  // Sends into the posted receive buffers (MSN 1..5 -> wr 100..104).
  auto sends = [&](bool crc, bool markers, std::uint8_t version, std::size_t mulpdu) {
    StreamBuilder s(crc, markers, version, mulpdu);
    s.send(1, bytes_of(40, 1));
    s.send(2, bytes_of(1000, 2), Opcode::SendSe);
    s.send(3, bytes_of(1500, 3)); // two SGEs
    s.send(4, bytes_of(2048, 4));
    s.send(5, {}); // zero-length
    return s.bytes();
  };
  w.put("send_crc", {rx::kCfgCrc, 1, kMul1448, 0x10}, sends(true, false, kVersionIetf, 1448));
  w.put("send_nocrc", {0, 2, kMul1448, 0x21}, sends(false, false, kVersionIetf, 1448));
  w.put("send_markers_crc",
        {rx::kCfgCrc | rx::kCfgMarkersRx, 3, kMul1024 | rx::kCfg2MarkersTx, 0x02},
        sends(true, true, kVersionIetf, 1024));
  w.put("send_markers_nocrc", {rx::kCfgMarkersRx, 4, kMul1024, 0x33},
        sends(false, true, kVersionIetf, 1024));
  w.put("send_in_place", {rx::kCfgCrc | rx::kCfgReadInPlace, 5, kMul1448, 0x40},
        sends(true, false, kVersionIetf, 300));
  w.put("send_srq", {rx::kCfgCrc, 6, kMul1448 | rx::kCfg2Srq, 0x51},
        sends(true, false, kVersionIetf, 1448));
  w.put("send_rdmac", {rx::kCfgCrc | rx::kCfgMarkersRx | rx::kCfgRdmac, 7, kMul1448, 0x60},
        sends(true, true, kVersionRdmac, 1448));

  { // RDMA Writes, then a Send.
    StreamBuilder s(true, false, kVersionIetf, 1024);
    s.write(fx.stag[rx::kWriteTarget], fx.to(rx::kWriteTarget, 100), bytes_of(3000, 5));
    s.write(fx.stag[rx::kZeroBased], 0, bytes_of(1000, 6));
    s.write(0xdeadbe00, 0x123, {}); // zero-length: nothing checked
    s.send(1, bytes_of(64, 7));
    w.put("write_crc", {rx::kCfgCrc, 8, kMul1024, 0x70}, s.bytes());
    StreamBuilder m(false, true, kVersionIetf, 1024);
    m.write(fx.stag[rx::kWriteTarget], fx.to(rx::kWriteTarget, 1), bytes_of(4095, 8));
    m.send(1, bytes_of(10, 9));
    w.put("write_markers_in_place", {rx::kCfgMarkersRx | rx::kCfgReadInPlace, 9, kMul1024, 0x81},
          m.bytes());
  }
  { // Inbound RDMA Read Requests: the QP answers with Read Responses (checked on tx).
    StreamBuilder s(true, false, kVersionIetf);
    s.read_request(1, {0x777, 0x1234, 3000, fx.stag[rx::kReadSource], fx.to(rx::kReadSource, 50)});
    s.read_request(2, {0x778, 0, 0, 0, 0}); // zero-length
    s.read_request(3, {0x779, 0x99, 16, fx.stag[rx::kWriteTarget], fx.to(rx::kWriteTarget)});
    s.send(1, bytes_of(30, 10));
    w.put("read_request", {rx::kCfgCrc, 10, kMul1448 | rx::kCfg2MarkersTx, 0x92}, s.bytes());
    w.put("read_request_small_ird",
          {rx::kCfgCrc, 11, (0 << rx::kCfg2MulpduShift) | rx::kCfg2SmallIrd, 0xa3}, s.bytes());
  }
  { // The peer's Terminate after a Send.
    StreamBuilder s(true, false, kVersionIetf);
    s.send(1, bytes_of(20, 11));
    TerminateHeader t;
    t.code = term::ddp_tagged_invalid_stag;
    t.m = t.d = true;
    t.ddp_segment_length = 100;
    t.ddp_header_len = kTaggedHdrLen;
    s.tagged(Opcode::RdmaWrite, 0x1234, 0x10).encode(t.ddp_header.data());
    s.terminate(1, t);
    w.put("terminate", {rx::kCfgCrc | rx::kCfgLocalSends, 12, kMul1448, 0xb0}, s.bytes());
    StreamBuilder s2(true, false, kVersionIetf);
    TerminateHeader t2;
    t2.code = term::mpa_crc_error;
    s2.terminate(1, t2);
    w.put("terminate_plain", {rx::kCfgCrc, 13, kMul1448, 0xc1}, s2.bytes());
  }
  { // Responder expecting the zero-length Send RTR (RFC 6581), then traffic.
    StreamBuilder s(true, false, kVersionIetf);
    s.send(1, {}); // the RTR, swallowed
    s.send(2, bytes_of(50, 12));
    s.read_request(1, {0x700, 0x800, 100, fx.stag[rx::kReadSource], fx.to(rx::kReadSource)});
    w.put("responder_rtr",
          {rx::kCfgCrc | rx::kCfgResponder | rx::kCfgP2p | rx::kCfgLocalSends, 14, kMul1448, 0xd2},
          s.bytes());
    StreamBuilder t(true, false, kVersionIetf);
    t.write(0, 0, {}); // Write RTR (zero-length, not checked)
    t.send(1, bytes_of(50, 13));
    w.put("responder_write_rtr",
          {rx::kCfgCrc | rx::kCfgResponder | rx::kCfgP2p, 15, kMul1448, 0xe3}, t.bytes());
  }
  // Initiator with our own Reads outstanding: their responses.
  auto responses = [&](StreamBuilder& s, bool rfc7306) {
    s.read_response(fx.stag[rx::kReadSink], fx.to(rx::kReadSink), bytes_of(1024, 14));      // wr 3
    s.read_response(0, 0, {});                                                              // wr 4
    if (rfc7306) s.atomic_response(1, {1, 0x0102030405060708ull});                          // wr 5
    s.read_response(fx.stag[rx::kReadSink], fx.to(rx::kReadSink, 1024), bytes_of(512, 15)); // wr 6
  };
  {
    StreamBuilder s(true, false, kVersionIetf, 600);
    responses(s, false);
    s.send(1, bytes_of(33, 16));
    w.put("initiator_reads", {rx::kCfgCrc | rx::kCfgLocalSends, 16, kMul1448, 0xf0}, s.bytes());
    StreamBuilder r(true, false, kVersionIetf, 600);
    r.read_response(0, 0, {}); // the Read RTR's response
    responses(r, false);
    w.put("initiator_read_rtr",
          {rx::kCfgCrc | rx::kCfgLocalSends | rx::kCfgP2p, 17, kMul1448 | 2, 0x01}, r.bytes());
    StreamBuilder m(true, true, kVersionIetf, 600);
    responses(m, false);
    w.put("initiator_reads_markers",
          {rx::kCfgCrc | rx::kCfgMarkersRx | rx::kCfgLocalSends, 18, kMul1024 | rx::kCfg2MarkersTx,
           0x12},
          m.bytes());
  }
  { // RFC 7306: Atomic Response, Immediate Data, Atomic Requests.
    StreamBuilder s(true, false, kVersionIetf);
    responses(s, true);
    s.immediate(1, 0xfeedfacecafebeefull, true);
    AtomicRequestHeader fa;
    fa.aopcode = static_cast<std::uint8_t>(AtomicOp::FetchAdd);
    fa.req_id = 9;
    fa.remote_stag = fx.stag[rx::kAtomicTarget];
    fa.remote_to = fx.to(rx::kAtomicTarget);
    fa.add_swap = 7;
    fa.add_swap_mask = 0;
    s.atomic_request(1, fa);
    AtomicRequestHeader cs = fa;
    cs.aopcode = static_cast<std::uint8_t>(AtomicOp::CompareSwap);
    cs.req_id = 10;
    cs.remote_to = fx.to(rx::kAtomicTarget, 8);
    cs.compare = 0;
    cs.add_swap = 0x55;
    s.atomic_request(2, cs);
    s.send(2, bytes_of(100, 17));
    w.put("rfc7306", {rx::kCfgCrc | rx::kCfgRfc7306 | rx::kCfgLocalSends, 19, kMul1448, 0x23},
          s.bytes());
  }
  { // Send with Invalidate, then a Write through the invalidated STag (error).
    StreamBuilder s(true, false, kVersionIetf);
    s.write(fx.stag[rx::kInvalidatable], fx.to(rx::kInvalidatable), bytes_of(100, 18));
    s.send(1, bytes_of(8, 19), Opcode::SendInvalidate, fx.stag[rx::kInvalidatable]);
    s.write(fx.stag[rx::kInvalidatable], fx.to(rx::kInvalidatable), bytes_of(100, 20));
    w.put("invalidate", {rx::kCfgCrc, 20, kMul1448, 0x30}, s.bytes());
  }
  { // Protection errors: another PD's or stream's STag, a deregistered STag, bounds.
    StreamBuilder a(true, false, kVersionIetf);
    a.write(fx.stag[rx::kOtherPd], fx.to(rx::kOtherPd), bytes_of(10, 21));
    w.put("err_other_pd", {rx::kCfgCrc, 21, kMul1448, 0x41}, a.bytes());
    StreamBuilder q(true, false, kVersionIetf);
    q.write(fx.stag[rx::kOtherQp], fx.to(rx::kOtherQp), bytes_of(10, 30));
    w.put("err_other_qp", {rx::kCfgCrc, 28, kMul1448, 0xb0}, q.bytes());
    StreamBuilder b(true, false, kVersionIetf);
    b.read_request(1, {0x1, 0x2, 10, fx.stag[rx::kRemoved], fx.to(rx::kRemoved)});
    w.put("err_removed", {rx::kCfgCrc, 22, kMul1448, 0x52}, b.bytes());
    StreamBuilder c(true, false, kVersionIetf);
    c.write(fx.stag[rx::kWriteTarget], fx.to(rx::kWriteTarget, 4000), bytes_of(200, 22));
    w.put("err_bounds", {rx::kCfgCrc, 23, kMul1448, 0x63}, c.bytes());
    StreamBuilder d(true, false, kVersionIetf);
    d.send(1, bytes_of(100, 23)); // wr 100 holds 64
    w.put("err_too_long", {rx::kCfgCrc, 24, kMul1448, 0x70}, d.bytes());
    StreamBuilder e(true, false, kVersionIetf);
    e.send(1, bytes_of(10, 24));
    e.raw(bytes_of(40, 25)); // garbage after a good FPDU
    w.put("err_garbage", {rx::kCfgCrc, 25, kMul1448, 0x81}, e.bytes());
    StreamBuilder f(true, false, kVersionIetf);
    f.send(1, bytes_of(10, 26));
    f.send(2, bytes_of(10, 27));
    f.bytes()[f.bytes().size() - 1] ^= std::byte{1}; // CRC error in the second FPDU
    w.put("err_crc", {rx::kCfgCrc, 26, kMul1448, 0x92}, f.bytes());
    StreamBuilder g(true, false, kVersionIetf);
    for (std::uint32_t msn = 1; msn <= 4; ++msn)
      g.send(msn, bytes_of(8, 28));
    g.send(5, {});              // wr 104 holds nothing
    g.send(6, bytes_of(8, 29)); // wr 105: SGE without local write access
    w.put("err_local_lkey", {rx::kCfgCrc, 27, kMul1448, 0xa3}, g.bytes());
  }
  std::printf("rx: %d seeds\n", w.count());
}

// ---- fuzz_mpa_startup seeds -------------------------------------------------------

void mpa_seeds(const fs::path& dir) {
  namespace m = iwarp_fuzz::mpa;
  Writer w(dir);
  // Policies. Octet 2: IRD/ORD 16/16 (index 5); octet 3: max 128/128 (index 7);
  // octet 4: our PD 11 octets (index 3).
  const std::uint8_t rev2 = m::kPol0Rev2 | m::kPol0Enhanced | m::kPol0Crc;
  const std::uint8_t rtr_all = m::kPol1RtrSend | m::kPol1RtrWrite | m::kPol1RtrRead;
  const std::uint8_t unenh = m::kPol1AcceptUnenhanced;

  auto frame = [](MpaKind kind, std::uint8_t rev, bool crc, bool markers,
                  std::optional<MpaEnhanced> enh, std::vector<std::byte> pd, bool reject = false) {
    MpaFrame f;
    f.kind = kind;
    f.rev = rev;
    f.crc = crc;
    f.markers = markers;
    f.enhanced = enh;
    f.private_data = std::move(pd);
    f.reject = reject;
    return f.encode();
  };
  auto with_fpdu = [](std::vector<std::byte> v) {
    // Octets of the first FPDU, which the startup machine must leave alone.
    StreamBuilder s(true, false, kVersionIetf);
    s.send(1, bytes_of(16, 3));
    v.insert(v.end(), s.bytes().begin(), s.bytes().end());
    return v;
  };
  MpaEnhanced p2p{true, true, true, true, 4, 4};
  MpaEnhanced plain{false, false, false, false, 16, 16};

  // Responder: Requests.
  w.put("resp_rev2_p2p",
        {m::kPol0Responder | rev2 | m::kPol0P2p, rtr_all | unenh, 0x55, 0x77, 0x03, 1},
        with_fpdu(frame(MpaKind::Request, 2, true, false, p2p, text("hello"))));
  w.put("resp_rev2_plain", {m::kPol0Responder | rev2, unenh, 0x55, 0x77, 0x13, 2},
        frame(MpaKind::Request, 2, true, false, plain, text("uiwarp")));
  w.put("resp_rev2_markers",
        {m::kPol0Responder | rev2 | m::kPol0Markers, unenh, 0x21, 0x77, 0x23, 3},
        frame(MpaKind::Request, 2, false, true, plain, {}));
  w.put("resp_rev1", {m::kPol0Responder | m::kPol0Crc, unenh, 0x55, 0x77, 0x03, 4},
        with_fpdu(frame(MpaKind::Request, 1, true, false, std::nullopt, text("rev one pd"))));
  w.put("resp_rev1_nocrc", {m::kPol0Responder, 0, 0x55, 0x77, 0x00, 5},
        frame(MpaKind::Request, 1, false, false, std::nullopt, {}));
  w.put("resp_rev0_permissive",
        {m::kPol0Responder | m::kPol0Crc | m::kPol0Permissive, 0, 0x55, 0x77, 0x03, 6},
        frame(MpaKind::Request, 0, true, true, std::nullopt, text("rdmac")));
  w.put("resp_rev0_strict", {m::kPol0Responder | m::kPol0Crc, 0, 0x55, 0x77, 0x03, 7},
        frame(MpaKind::Request, 0, true, true, std::nullopt, text("rdmac")));
  w.put("resp_reject", {m::kPol0Responder | rev2, m::kPol1Reject | unenh, 0x55, 0x77, 0x13, 8},
        frame(MpaKind::Request, 2, true, false, plain, text("please")));
  w.put("resp_pd512", {m::kPol0Responder | m::kPol0Crc, 0, 0x55, 0x77, 0x0c, 9},
        frame(MpaKind::Request, 1, true, false, std::nullopt, bytes_of(512, 1)));
  w.put("resp_small_buffer", {m::kPol0Responder | rev2, m::kPol1SmallPd, 0x55, 0x77, 0x03, 10},
        frame(MpaKind::Request, 2, true, false, plain, bytes_of(40, 2)));
  w.put("resp_junk", {m::kPol0Responder | rev2, 0, 0x55, 0x77, 0x03, 11},
        text("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));

  // Initiator: Replies to our Request.
  w.put("init_rev2_p2p", {rev2 | m::kPol0P2p, rtr_all | unenh, 0x55, 0x77, 0x03, 12},
        with_fpdu(frame(MpaKind::Reply, 2, true, false, MpaEnhanced{true, false, true, false, 8, 8},
                        text("welcome"))));
  w.put("init_rev2_plain", {rev2, unenh, 0x55, 0x77, 0x03, 13},
        frame(MpaKind::Reply, 2, true, true, plain, text("ok")));
  w.put("init_rev2_unenhanced_reply", {rev2, unenh, 0x55, 0x77, 0x03, 14},
        frame(MpaKind::Reply, 1, true, false, std::nullopt, {}));
  w.put("init_rev1", {m::kPol0Crc | m::kPol0Markers, 0, 0x55, 0x77, 0x03, 15},
        frame(MpaKind::Reply, 1, false, true, std::nullopt, text("r1")));
  w.put("init_reject", {rev2, unenh, 0x55, 0x77, 0x03, 16},
        frame(MpaKind::Reply, 2, true, false, MpaEnhanced{false, false, false, false, 0, 32},
              text("no thanks"), true));
  w.put("init_rev0_permissive", {m::kPol0Crc | m::kPol0Permissive, 0, 0x55, 0x77, 0x03, 17},
        frame(MpaKind::Reply, 0, true, true, std::nullopt, {}));
  w.put("init_ird_too_small", {rev2, unenh, 0x55, 0x33, 0x03, 18}, // max IRD 4
        frame(MpaKind::Reply, 2, true, false, MpaEnhanced{false, false, false, false, 16, 64}, {}));
  w.put("init_no_rtr", {rev2 | m::kPol0P2p, m::kPol1RtrRead | unenh, 0x55, 0x77, 0x03, 19},
        frame(MpaKind::Reply, 2, true, false, MpaEnhanced{true, true, false, false, 8, 8}, {}));
  w.put("init_read_rtr", {rev2 | m::kPol0P2p, m::kPol1RtrRead | unenh, 0x05, 0x77, 0x03, 20},
        frame(MpaKind::Reply, 2, true, false, MpaEnhanced{true, false, false, true, 1, 0}, {}));
  w.put("init_request_instead", {rev2, unenh, 0x55, 0x77, 0x03, 21},
        frame(MpaKind::Request, 2, true, false, plain, {}));

  // uiwarp's same-host bit (kPol1LargeFpdu turns it on with the other private bits): a Request
  // carries only the bit, an accepting Reply the offer after the ULP's private data.
  const std::uint8_t sh = m::kPol1LargeFpdu;
  auto sh_frame = [](MpaKind kind, std::uint8_t rev, std::optional<MpaEnhanced> enh,
                     std::vector<std::byte> pd, std::vector<std::byte> trailer = {},
                     bool reject = false, bool mark = true) {
    MpaFrame f;
    f.kind = kind;
    f.rev = rev;
    f.markers = rev == 0;
    f.same_host = true;
    f.uiwarp_reply = mark; // a uiwarp responder's answer (kMpaFlagUiwarpReply), not an echo
    f.enhanced = enh;
    f.private_data = std::move(pd);
    f.private_data.insert(f.private_data.end(), trailer.begin(), trailer.end());
    f.reject = reject;
    return f.encode();
  };
  auto offer = [](std::size_t len = kSameHostOfferLen, std::size_t bad_at = kSameHostOfferLen) {
    std::vector<std::byte> b(kSameHostOfferLen);
    m::fuzz_offer(7).encode(b.data());
    if (bad_at < b.size()) b[bad_at] ^= std::byte{0x20};
    b.resize(len);
    return b;
  };
  // Responder. Octet 4 0x4?: accept() without an offer (kAcceptNoOffer).
  w.put("resp_same_host", {m::kPol0Responder | rev2, sh | unenh, 0x55, 0x77, 0x03, 22},
        with_fpdu(sh_frame(MpaKind::Request, 2, plain, text("near"))));
  w.put("resp_same_host_rev1", {m::kPol0Responder | m::kPol0Crc, sh, 0x55, 0x77, 0x00, 23},
        sh_frame(MpaKind::Request, 1, std::nullopt, {}));
  w.put("resp_same_host_no_room", {m::kPol0Responder | rev2, sh | unenh, 0x55, 0x77, 0x07, 24},
        sh_frame(MpaKind::Request, 2, plain, text("full reply")));
  w.put("resp_same_host_off", {m::kPol0Responder | rev2, unenh, 0x55, 0x77, 0x03, 25},
        sh_frame(MpaKind::Request, 2, plain, text("near")));
  w.put("resp_same_host_no_offer", {m::kPol0Responder | rev2, sh | unenh, 0x55, 0x77, 0x43, 26},
        sh_frame(MpaKind::Request, 2, plain, text("near")));
  w.put("resp_same_host_reject",
        {m::kPol0Responder | rev2, sh | m::kPol1Reject | unenh, 0x55, 0x77, 0x03, 27},
        sh_frame(MpaKind::Request, 2, plain, text("near")));
  w.put("resp_same_host_rdmac",
        {m::kPol0Responder | m::kPol0Crc | m::kPol0Permissive, sh, 0x55, 0x77, 0x03, 28},
        sh_frame(MpaKind::Request, 0, std::nullopt, text("rdmac")));
  // Initiator.
  w.put("init_same_host", {rev2, sh | unenh, 0x55, 0x77, 0x03, 29},
        with_fpdu(sh_frame(MpaKind::Reply, 2, plain, text("ok"), offer())));
  w.put("init_same_host_p2p", {rev2 | m::kPol0P2p, sh | rtr_all | unenh, 0x55, 0x77, 0x03, 30},
        sh_frame(MpaKind::Reply, 2, MpaEnhanced{true, false, true, false, 8, 8}, {}, offer()));
  w.put("init_same_host_rev1", {m::kPol0Crc, sh, 0x55, 0x77, 0x03, 31},
        sh_frame(MpaKind::Reply, 1, std::nullopt, text("r1"), offer()));
  w.put("init_same_host_small_buffer", {rev2, sh | m::kPol1SmallPd | unenh, 0x55, 0x77, 0x03, 32},
        sh_frame(MpaKind::Reply, 2, plain, bytes_of(16, 5), offer()));
  w.put("init_same_host_short", {rev2, sh | unenh, 0x55, 0x77, 0x03, 33},
        sh_frame(MpaKind::Reply, 2, plain, text("ok"), offer(40)));
  w.put("init_same_host_bad_magic", {rev2, sh | unenh, 0x55, 0x77, 0x03, 34},
        sh_frame(MpaKind::Reply, 2, plain, text("ok"), offer(kSameHostOfferLen, 2)));
  w.put("init_same_host_bad_version", {rev2, sh | unenh, 0x55, 0x77, 0x03, 35},
        sh_frame(MpaKind::Reply, 2, plain, {}, offer(kSameHostOfferLen, 4)));
  w.put("init_same_host_unasked", {rev2, unenh, 0x55, 0x77, 0x03, 36},
        sh_frame(MpaKind::Reply, 2, plain, text("ok"), offer()));
  w.put("init_same_host_reject", {rev2, sh | unenh, 0x55, 0x77, 0x03, 37},
        sh_frame(MpaKind::Reply, 2, plain, text("no"), offer(), true));
  w.put("init_same_host_rdmac", {m::kPol0Crc | m::kPol0Permissive, sh, 0x55, 0x77, 0x03, 38},
        sh_frame(MpaKind::Reply, 0, std::nullopt, {}, offer()));
  // siw's Reply: the Request's own bits returned, no mark, the ULP's data where an offer would be.
  w.put("init_same_host_echo", {rev2, sh | unenh, 0x55, 0x77, 0x03, 39},
        sh_frame(MpaKind::Reply, 2, plain, text("siw"), offer(), false, false));
  std::printf("mpa: %d seeds\n", w.count());
}

// ---- fuzz_daemon_proto seeds -------------------------------------------------------

void daemon_proto_seeds(const fs::path& dir) {
  namespace p = uiwarp::proto;
  Writer w(dir);
  const auto seeds = uiwarp::test::daemon_proto_samples();
  if (seeds.size() != std::variant_size_v<p::Message>)
    throw std::runtime_error("daemon_proto: not one seed for each message type");
  for (std::size_t i = 0; i < seeds.size(); ++i) {
    if (seeds[i].second.index() != i)
      throw std::runtime_error(std::string("daemon_proto: seed ") + seeds[i].first +
                               " out of order");
    const p::Bytes b = p::encode(seeds[i].second);
    std::vector<std::byte> body(b.size());
    std::transform(b.begin(), b.end(), body.begin(), [](std::uint8_t x) { return std::byte(x); });
    w.put(seeds[i].first, {}, body);
  }
  std::printf("daemon_proto: %d seeds\n", w.count());
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
    return 2;
  }
  try {
    rx_seeds(fs::path(argv[1]) / "rx");
    mpa_seeds(fs::path(argv[1]) / "mpa");
    daemon_proto_seeds(fs::path(argv[1]) / "daemon_proto");
    ucma_seeds(fs::path(argv[1]) / "ucma");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_corpus: %s\n", e.what());
    return 1;
  }
  return 0;
}
