// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// How the edges of the same-host path (shared_region.cpp, grant.cpp) make a Result: a value,
// or the failing step with its errno's text. Internal to samehost/.
#pragma once

#include "shared_region.hpp"

#include <cstring>
#include <string>
#include <utility>

namespace uiwarp::samehost::detail {

inline std::string describe(const std::string& step, int e) {
  char buf[128];
  return step + ": " + strerror_r(e, buf, sizeof buf); // the GNU strerror_r: returns the text
}

template <class T> Result<T> failed(std::string error, int errnum = 0) {
  Result<T> r;
  r.error = std::move(error);
  r.errnum = errnum;
  return r;
}
// errno first, and the step's parts unjoined: nothing allocates before errno is read.
template <class T, class... Parts> Result<T> failed_call(int e, const Parts&... step) {
  std::string s;
  (s += ... += step);
  return failed<T>(describe(s, e), e);
}
template <class T> Result<T> made(T&& value) {
  Result<T> r;
  r.value.emplace(std::move(value));
  return r;
}

} // namespace uiwarp::samehost::detail
