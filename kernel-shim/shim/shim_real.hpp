// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The real functions behind the shim's interposers (dlsym(RTLD_NEXT), resolved at load and
// lazily for calls made by other libraries' constructors that run first), the calls the shim
// itself makes through them, and its debug log (UIWARP_DEBUG).
#pragma once

#include <atomic>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/types.h>

namespace uiwarp::shim {

using open_fn = int (*)(const char*, int, ...);
using openat_fn = int (*)(int, const char*, int, ...);
using open2_fn = int (*)(const char*, int);
using openat2_fn = int (*)(int, const char*, int);
using stat_fn = int (*)(const char*, struct stat*);
using stat64_fn = int (*)(const char*, struct stat64*);
using fstatat_fn = int (*)(int, const char*, struct stat*, int);
using fstatat64_fn = int (*)(int, const char*, struct stat64*, int);
using xstat_fn = int (*)(int, const char*, void*);
using fxstatat_fn = int (*)(int, int, const char*, void*, int);
using statx_fn = int (*)(int, const char*, int, unsigned, struct statx*);
using write_fn = ssize_t (*)(int, const void*, size_t);
using fstat_fn = int (*)(int, struct stat*);
using fstat64_fn = int (*)(int, struct stat64*);
using close_fn = int (*)(int);
using dup_fn = int (*)(int);
using dup2_fn = int (*)(int, int);
using dup3_fn = int (*)(int, int, int);
using fcntl_fn = int (*)(int, int, ...);
using socket_fn = int (*)(int, int, int);
using opendir_fn = DIR* (*)(const char*);

// One lazily resolved pointer per interposed symbol.
struct RealSym {
  const char* name;
  std::atomic<void*> ptr{nullptr};
  std::atomic<bool> tried{false};
};

void* resolve(RealSym& s);
template <typename F> F real(RealSym& s) { return reinterpret_cast<F>(resolve(s)); }

extern RealSym r_open, r_open64, r_openat, r_openat64, r_open_2, r_open64_2, r_openat_2,
    r_openat64_2, r_stat, r_stat64, r_lstat, r_lstat64, r_fstatat, r_fstatat64, r_xstat, r_xstat64,
    r_lxstat, r_lxstat64, r_fxstatat, r_fxstatat64, r_statx, r_fstat, r_fstat64, r_write, r_close,
    r_dup, r_dup2, r_dup3, r_fcntl, r_fcntl64, r_socket, r_opendir;

// The calls the shim itself needs; raw system calls if the symbol cannot be found at all.
int sys_openat(const char* path, int flags);
ssize_t sys_write(int fd, const void* buf, size_t n);
int sys_close(int fd);
int sys_stat(const char* path, struct stat* st);
// Never through the fstat interposer (the fd table's lock may be held).
int sys_fstat(int fd, struct stat* st);

// -1 with ENOSYS: the real function is missing.
int enosys();

// A debug line of the shim's, through the one log of the code inside applications
// (uiwarp/log.hpp: VERBS_LOG_LEVEL=4 or UIWARP_DEBUG=1 asks for it, VERBS_LOG_FILE says where).
void dbg(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

} // namespace uiwarp::shim
