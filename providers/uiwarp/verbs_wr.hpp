// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Send work requests into libiwarp (verbs_wr.cpp), used by post_send and the ibv_wr_* API.
#pragma once

#include "provider.hpp"

namespace uiwarp {

// ibv_send_wr -> SendWr (0 or EINVAL); inline data is copied, SGEs are referenced.
int convert_send(const Qp* qp, const ibv_send_wr* wr, iwarp::SendWr& out);
// Queues one WR on the QP (qp->mu held): 0, EINVAL (QP state) or ENOMEM (queue full).
// *copied (if given) is set when the same-host path carried it: done, nothing queued.
int submit_send(Qp* qp, const iwarp::SendWr& wr, bool* copied = nullptr);
// A Bind of window `mw`, which must be of `type` and of the QP's PD `pd` (verbs_mw.cpp): 0 or
// EINVAL (no such window, access flags a window cannot have, a length without a region, a
// region of another device).
int to_window_bind(const ibv_mw* mw, ibv_mw_type type, const ibv_pd* pd, std::uint32_t new_rkey,
                   const ibv_mw_bind_info& info, iwarp::SendWr& out);
// Installs the ibv_wr_* operations (create_qp_ex with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS).
void set_wr_ops(Qp* qp);

} // namespace uiwarp
