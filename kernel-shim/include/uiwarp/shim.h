/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * uiwarp/shim.h: the C interface that libuiwarp-shim.so (the LD_PRELOAD kernel shim) offers to
 * the uiwarp provider.
 *
 * Completion channels. libibverbs' ibv_create_comp_channel() does not go through the provider:
 * it write()s the uverbs command CREATE_COMP_CHANNEL (17) to the context's cmd_fd. The shim
 * answers that write itself: it creates a pipe (pipe2(O_CLOEXEC)), hands the read end to
 * libibverbs as channel->fd, and keeps the write end. ibv_get_cq_event() then read()s 8-byte
 * `struct ib_uverbs_comp_event_desc { __u64 cq_handle; }` records from channel->fd, and turns
 * cq_handle back into the `struct ibv_cq *` it reports.
 *
 * So, to signal a completion event for a CQ bound to a channel, the provider writes exactly
 * one 8-byte record whose cq_handle is the CQ's `struct ibv_cq *` (as uintptr_t) to
 * uiwarp_shim_comp_channel_wfd(cq->channel->fd). Rules:
 *   - Write whole 8-byte records with a single write(); pipe writes of at most PIPE_BUF bytes are
 *     atomic, so records from several threads never interleave, and every read of 8 bytes by
 *     libibverbs returns one whole record. Blocking reads and an O_NONBLOCK read end (set by the
 *     application with fcntl) behave as with the kernel's channel fd; poll/epoll on
 *     channel->fd report POLLIN while a record is queued.
 *   - The write end is O_NONBLOCK (and O_CLOEXEC). A write failing with EAGAIN means 8192
 *     events are already queued unread (64 KiB pipe); the kernel would only queue one event per
 *     CQ arming, so a provider that writes once per ibv_req_notify_cq() never sees it.
 *   - The write end belongs to the shim. It stays open while channel->fd or any dup() of it is
 *     open, and is closed with the last of them. libibverbs refuses ibv_destroy_comp_channel()
 *     while CQs still use the channel, so a provider that stops writing when the CQ is destroyed
 *     is safe. Do not close() it; dup() it if a longer lifetime is ever needed.
 *
 * The uiwarp provider gets the function in the shim's versioned ops (ShimOps::comp_channel_wfd,
 * uiwarp/provider_api.hpp), so that it also loads when the shim is not preloaded (then comp
 * channels are not available); other tools (the tests) may look it up by name with dlsym.
 *
 * All functions here are thread-safe and never throw.
 */
#ifndef UIWARP_SHIM_H
#define UIWARP_SHIM_H

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Returns the write end of the pipe behind the completion-channel fd `channel_fd` (an fd that the
 * shim returned from an emulated CREATE_COMP_CHANNEL, or a dup of one), or -1 if `channel_fd` is
 * not such an fd (errno is then EBADF).
 */
int uiwarp_shim_comp_channel_wfd(int channel_fd);

/*
 * Returns non-zero if `fd` is a uverbs command fd opened through the shim (the cmd_fd that
 * libibverbs passes to the provider's alloc_context), 0 otherwise.
 */
int uiwarp_shim_is_uverbs_fd(int fd);

#ifdef __cplusplus
}
#endif

#endif /* UIWARP_SHIM_H */
