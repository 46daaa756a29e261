// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Containers for the data path, which must not allocate per message:
//  - StaticVector<T, N>: up to N elements stored inline (an SGL, inline data), with the
//    part of std::vector's interface the engine and its callers use;
//  - Ring<T>: a circular queue whose storage is sized once (the send queue, the receive
//    queue, outstanding Reads); slots are reused, so element addresses stay valid until
//    the element is popped, as long as the ring never grows past its reserved capacity.
#pragma once

#include <algorithm>
#include <array>
#include <cassert>
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <span>
#include <utility>

namespace iwarp {

template <class T, std::size_t N> class StaticVector {
public:
  using value_type = T;
  using iterator = T*;
  using const_iterator = const T*;

  StaticVector() = default;
  StaticVector(std::initializer_list<T> l) { assign(l.begin(), l.end()); }
  StaticVector(std::span<const T> s) { assign(s.begin(), s.end()); }
  StaticVector& operator=(std::initializer_list<T> l) {
    assign(l.begin(), l.end());
    return *this;
  }
  StaticVector& operator=(std::span<const T> s) {
    assign(s.begin(), s.end());
    return *this;
  }

  static constexpr std::size_t capacity() { return N; }
  std::size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  T* data() { return a_.data(); }
  const T* data() const { return a_.data(); }
  T* begin() { return a_.data(); }
  T* end() { return a_.data() + n_; }
  const T* begin() const { return a_.data(); }
  const T* end() const { return a_.data() + n_; }
  T& operator[](std::size_t i) { return a_[i]; }
  const T& operator[](std::size_t i) const { return a_[i]; }
  T& front() { return a_[0]; }
  T& back() { return a_[n_ - 1]; }
  operator std::span<const T>() const { return {a_.data(), n_}; }

  void clear() { n_ = 0; }
  // The mutators return false (and change nothing) when N would be exceeded.
  template <class It> bool assign(It first, It last) {
    auto n = static_cast<std::size_t>(std::distance(first, last));
    if (n > N) return false;
    std::copy(first, last, a_.begin());
    n_ = n;
    return true;
  }
  bool assign(std::size_t n, const T& v) {
    if (n > N) return false;
    std::fill_n(a_.begin(), n, v);
    n_ = n;
    return true;
  }
  bool push_back(const T& v) {
    if (n_ == N) return false;
    a_[n_++] = v;
    return true;
  }
  template <class... A> T& emplace_back(A&&... args) {
    assert(n_ < N);
    a_[n_] = T(std::forward<A>(args)...);
    return a_[n_++];
  }
  template <class It> bool append(It first, It last) {
    auto n = static_cast<std::size_t>(std::distance(first, last));
    if (n_ + n > N) return false;
    std::copy(first, last, a_.begin() + static_cast<std::ptrdiff_t>(n_));
    n_ += n;
    return true;
  }
  bool resize(std::size_t n) {
    if (n > N) return false;
    n_ = n;
    return true;
  }

private:
  std::array<T, N> a_{};
  std::size_t n_ = 0;
};

template <class T> class Ring {
public:
  Ring() = default;
  explicit Ring(std::size_t capacity) { reserve(capacity); }
  Ring(Ring&&) noexcept = default;
  Ring& operator=(Ring&&) noexcept = default;

  // Sizes the storage (rounded up to a power of two); existing elements are kept.
  void reserve(std::size_t capacity) {
    std::size_t cap = 1;
    while (cap < capacity)
      cap <<= 1;
    if (cap <= cap_) return;
    auto s = std::make_unique<T[]>(cap);
    for (std::size_t i = 0; i < n_; ++i)
      s[i] = std::move((*this)[i]);
    slots_ = std::move(s);
    cap_ = cap;
    head_ = 0;
  }
  std::size_t capacity() const { return cap_; }
  std::size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  bool full() const { return n_ == cap_; }

  T& operator[](std::size_t i) { return slots_[(head_ + i) & (cap_ - 1)]; }
  const T& operator[](std::size_t i) const { return slots_[(head_ + i) & (cap_ - 1)]; }
  T& front() { return (*this)[0]; }
  const T& front() const { return (*this)[0]; }
  T& back() { return (*this)[n_ - 1]; }

  // Returns the slot for a new last element, as it was left by its previous user: callers
  // that reuse what a slot holds (buffers sized once) rely on that. A full ring doubles.
  T& push_slot() {
    if (n_ == cap_) reserve(cap_ ? 2 * cap_ : 4);
    ++n_;
    return back();
  }
  T& push_back(T v) { return push_slot() = std::move(v); }
  template <class... A> T& emplace_back(A&&... args) {
    return push_slot() = T(std::forward<A>(args)...);
  }
  void pop_front() {
    head_ = (head_ + 1) & (cap_ - 1);
    --n_;
  }
  void pop_back() { --n_; }
  void clear() {
    head_ = 0;
    n_ = 0;
  }

  template <class R, class E> class Iter {
  public:
    Iter(R* r, std::size_t i) : r_(r), i_(i) {}
    E& operator*() const { return (*r_)[i_]; }
    E* operator->() const { return &(*r_)[i_]; }
    Iter& operator++() {
      ++i_;
      return *this;
    }
    bool operator==(const Iter& o) const { return i_ == o.i_; }

  private:
    R* r_;
    std::size_t i_;
  };
  Iter<Ring, T> begin() { return {this, 0}; }
  Iter<Ring, T> end() { return {this, n_}; }
  Iter<const Ring, const T> begin() const { return {this, 0}; }
  Iter<const Ring, const T> end() const { return {this, n_}; }

private:
  std::unique_ptr<T[]> slots_;
  std::size_t cap_ = 0;
  std::size_t head_ = 0;
  std::size_t n_ = 0;
};

} // namespace iwarp
