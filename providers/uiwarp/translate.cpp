// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Static tables between libiwarp's completion codes and the verbs ones.
#include "provider.hpp"

#include <arpa/inet.h>
#include <array>

namespace uiwarp {

namespace {

constexpr std::array<ibv_wc_status, 12> kStatus = {
    IBV_WC_SUCCESS,         // Success
    IBV_WC_LOC_LEN_ERR,     // LocalLength
    IBV_WC_LOC_QP_OP_ERR,   // LocalQpOperation
    IBV_WC_LOC_PROT_ERR,    // LocalProtection
    IBV_WC_LOC_ACCESS_ERR,  // LocalAccess
    IBV_WC_WR_FLUSH_ERR,    // Flushed
    IBV_WC_BAD_RESP_ERR,    // BadResponse
    IBV_WC_REM_INV_REQ_ERR, // RemoteInvalidRequest
    IBV_WC_REM_ACCESS_ERR,  // RemoteAccess
    IBV_WC_REM_OP_ERR,      // RemoteOperation
    IBV_WC_FATAL_ERR,       // Fatal
    IBV_WC_MW_BIND_ERR,     // MwBind
};
static_assert(static_cast<std::size_t>(iwarp::WcStatus::MwBind) + 1 == kStatus.size());

constexpr std::array<ibv_wc_opcode, 8> kOpcode = {
    IBV_WC_SEND,       // Send
    IBV_WC_RDMA_WRITE, // RdmaWrite
    IBV_WC_RDMA_READ,  // RdmaRead
    IBV_WC_COMP_SWAP,  // CompareSwap
    IBV_WC_FETCH_ADD,  // FetchAdd
    IBV_WC_RECV,       // Recv
    IBV_WC_BIND_MW,    // BindWindow
    IBV_WC_LOCAL_INV,  // LocalInvalidate
};
static_assert(static_cast<std::size_t>(iwarp::WcOpcode::LocalInvalidate) + 1 == kOpcode.size());

} // namespace

ibv_wc_status wc_status(iwarp::WcStatus s) { return kStatus[static_cast<std::size_t>(s)]; }
ibv_wc_opcode wc_opcode(iwarp::WcOpcode o) { return kOpcode[static_cast<std::size_t>(o)]; }

ibv_wc to_ibv_wc(const iwarp::Completion& c, std::uint32_t qp_num) {
  ibv_wc wc{};
  wc.wr_id = c.wr_id;
  wc.status = wc_status(c.status);
  wc.opcode = wc_opcode(c.opcode);
  wc.byte_len = c.byte_len;
  wc.qp_num = qp_num;
  if (c.invalidated) {
    wc.wc_flags |= IBV_WC_WITH_INV;
    wc.invalidated_rkey = *c.invalidated;
  }
  if (c.immediate) {
    // RFC 7306 Immediate Data is 8 octets; verbs carries 4 (the low ones).
    // Immediate Data arrives after an RDMA Write (RDMA_WRITE_WITH_IMM, the only way uiwarp
    // sends it), so it completes as verbs' RECV_RDMA_WITH_IMM.
    wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
    wc.wc_flags |= IBV_WC_WITH_IMM;
    wc.imm_data = htonl(static_cast<std::uint32_t>(*c.immediate));
  }
  return wc;
}

} // namespace uiwarp
