// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// ProviderOps::same_host_offer until the provider's same-host manager defines it: no offer, so
// every MPA Reply goes without one and every connection stays on TCP. Weak: the manager's own
// definition (qp_same_host.cpp) replaces it at link time.
#include "provider.hpp"

namespace uiwarp {

__attribute__((weak)) bool same_host_offer(std::uint32_t, iwarp::SameHostOffer*) noexcept {
  return false; // replaced by the provider's same-host manager
}

} // namespace uiwarp
