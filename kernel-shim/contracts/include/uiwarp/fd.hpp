// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// An owned file descriptor, closed with its owner; and whether a descriptor still names the file
// it named (a program may close descriptors it does not know, and the number come back).
#pragma once

#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <utility>

namespace uiwarp {

// `fd` is the file of device `dev`, inode `ino`. By raw system call, which the shim's
// interposers never see.
inline bool same_file(int fd, dev_t dev, ino_t ino) {
  struct stat st;
  return ::syscall(SYS_fstat, fd, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

class Fd {
public:
  explicit Fd(int fd = -1) noexcept : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    reset(std::exchange(o.fd_, -1));
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  int release() noexcept { return std::exchange(fd_, -1); }
  void reset(int fd = -1) noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

private:
  int fd_;
};

} // namespace uiwarp
