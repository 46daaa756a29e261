// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// The rdma_cm character device (UCMA, /dev/infiniband/rdma_cm) emulated in the
// application's process, with the kernel's iWARP semantics
// (docs/architecture.md): librdmacm writes its commands to the fd the
// shim returned from open(); the network side is uiwarpd's, and connected
// sockets are handed to the provider's QPs.
#pragma once

#include <cstddef>
#include <sys/stat.h>
#include <sys/types.h>

namespace uiwarp::ucma {

// open("/dev/infiniband/rdma_cm", flags): an event channel (an eventfd, readable
// while events are queued, so poll/epoll work). -1 with errno on failure.
int open_channel(int flags);
// True for fds open_channel returned (and not closed since).
bool is_channel(int fd);
// write(fd, buf, len) on a channel: one UCMA command. Returns len or -1/errno.
ssize_t command(int fd, const void* buf, std::size_t len);
// close(fd) of a channel: drops its ids' state.
void closed(int fd);
// fstat(fd) of a channel reports the character device librdmacm expects.
void fix_stat(struct stat* st);

} // namespace uiwarp::ucma
