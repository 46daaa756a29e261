// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// IB-style connect, the provider's part (uiwarp/ib_connect.hpp): INIT -> RTR with an address
// vector (the peer's GID and QPN) asks the shim for the connection; the QP then waits in RTR
// or RTS, receives and sends queued, until the shim attaches the socket (cm_attach.cpp) or
// reports that the peer never came (ib_failed: ERR, flush, IBV_EVENT_QP_FATAL).
#include "uiwarp/ib_connect.hpp"

#include "provider.hpp"
#include "uiwarp/provider_api.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <new>
#include <optional>
#include <string>

namespace uiwarp {

namespace {

std::optional<ib::Gid> port_gid(const Device& dev, unsigned index) {
  const std::string text = dev.attr("ports/1/gids/" + std::to_string(index));
  ib::Gid g{};
  if (text.empty() || ::inet_pton(AF_INET6, text.c_str(), g.data()) != 1) return std::nullopt;
  return g;
}

int refuse(const std::string& why, int err = EINVAL) {
  explain(why.c_str());
  return err;
}

} // namespace

int ib_rtr(Qp* qp, const ibv_qp_attr& attr, int mask) {
  if (!(mask & IBV_QP_AV) || !(mask & IBV_QP_DEST_QPN))
    return refuse("an iWARP QP enters RTR either through the RDMA CM or, between uiwarp peers, "
                  "with the peer's address vector and QPN (IBV_QP_AV | IBV_QP_DEST_QPN)");
  const ibv_ah_attr& ah = attr.ah_attr;
  if (!ah.is_global)
    return refuse("IB-style connect on uiwarp needs the peer's GID (a global route: "
                  "ibv_rc_pingpong -g 1, perftest -x 1); LIDs mean nothing on iWARP");
  auto sgid = port_gid(*qp->ctx()->dev, ah.grh.sgid_index);
  auto local = sgid ? ib::gid_address(*sgid) : std::nullopt;
  if (!local)
    return refuse("IB-style connect: source GID index " + std::to_string(ah.grh.sgid_index) +
                  " is not an IP address of the port (GID 0 is derived from the MAC): use the "
                  "index of an IPv4 or IPv6 GID, as ibv_devinfo -v lists them (e.g. -g 1, -x 1)");
  ib::Gid dgid;
  std::copy(std::begin(ah.grh.dgid.raw), std::end(ah.grh.dgid.raw), dgid.begin());
  auto peer = ib::gid_address(dgid);
  if (!peer)
    return refuse("IB-style connect: the peer's GID is not an IP address (the peer used GID 0, "
                  "derived from the MAC?): both sides must use an IPv4 or IPv6 GID");
  const std::uint32_t me = qp->vqp.qp.qp_num;
  auto role = ib::role(*sgid, me, dgid, attr.dest_qp_num);
  if (!role) return refuse("IB-style connect: a QP cannot be connected to itself");
  const ShimOps* ops = shim();
  if (!ops)
    return refuse("IB-style connect needs libuiwarp-shim.so: run the program with uiwarp-run",
                  EOPNOTSUPP);
  try {
    qp->early.send.reserve(std::max<std::uint32_t>(qp->cap.max_send_wr, 1));
  } catch (const std::bad_alloc&) {
    return ENOMEM;
  }
  IbTarget t;
  t.local = *local;
  t.peer = *peer;
  t.local_qpn = me;
  t.peer_qpn = attr.dest_qp_num;
  // IRD as the program set it (0: uiwarpd's default). Its ORD comes only with RTS, so the
  // connection offers the most this device allows, and the peer's IRD bounds it (RFC 6581 §9.1).
  t.ird = (mask & IBV_QP_MAX_DEST_RD_ATOMIC) ? attr.max_dest_rd_atomic : 0;
  t.ord = Limits::kMaxOrdIrd;
  t.initiator = *role == ib::Role::Initiator;
  // The responder's uiwarpd accepts without asking the program (no rdma_accept): the same-host
  // offer goes with the wait, and into the Reply if the Request asks for the path.
  if (!t.initiator) {
    iwarp::SameHostOffer offer;
    if (same_host_offer_locked(qp, &offer)) t.same_host_offer = offer;
  }
  if (int err = ops->ib_connect(me, t)) return err;
  qp->ib.pending = true;
  qp->ib.path = true;
  qp->ib.peer_qpn = attr.dest_qp_num;
  return 0;
}

void ib_cancel(Qp* qp) {
  if (!qp->ib.pending) return;
  qp->ib.pending = false;
  if (const ShimOps* ops = shim()) ops->ib_cancel(qp->vqp.qp.qp_num);
}

void ib_failed(std::uint32_t qp_num, int /*error*/, const char* /*reason*/) noexcept {
  Qp* qp = find_qp(qp_num);
  if (!qp) return;
  {
    std::lock_guard lock(qp->mu);
    if (qp->ib.pending && !qp->engine) {
      qp->ib.pending = false;
      qp->set_state(IBV_QPS_ERR);
      qp->flush(); // the shim logged why
      qp->ctx()->post_async_event(reinterpret_cast<std::uintptr_t>(&qp->vqp.qp),
                                  IBV_EVENT_QP_FATAL);
      qp->last_wqe_reached();
    }
  }
  qp->unref();
}

} // namespace uiwarp
