// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// libuiwarp-rdmav<PABI>.so: the libibverbs provider. Device discovery and context
// set-up; the verbs live in verbs_*.cpp and the ops table below maps them.
#include "provider.hpp"
#include "uiwarp/log.hpp"
#include "uiwarp/provider_api.hpp"
#include "uiwarp/sysfs_layout.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <mutex>
#include <new>
#include <rdma/ib_user_ioctl_verbs.h>
#include <rdma/ib_user_verbs.h>
#include <set>
#include <string>
#include <unistd.h>

namespace uiwarp {

namespace {

void free_context(ibv_context* ibctx) noexcept;

// One alphabetised table; verbs iWARP has no use for stay NULL, so libibverbs
// answers them with EOPNOTSUPP.
const verbs_context_ops kOps = {
    .alloc_mw = alloc_mw,
    .alloc_pd = alloc_pd,
    .async_event = async_event,
    .bind_mw = bind_mw,
    .cq_event = cq_event,
    .create_cq = create_cq,
    .create_cq_ex = create_cq_ex,
    .create_qp = create_qp,
    .create_qp_ex = create_qp_ex,
    .create_srq = create_srq,
    .create_srq_ex = create_srq_ex,
    .dealloc_mw = dealloc_mw,
    .dealloc_pd = dealloc_pd,
    .dereg_mr = dereg_mr,
    .destroy_cq = destroy_cq,
    .destroy_qp = destroy_qp,
    .destroy_srq = destroy_srq,
    .free_context = free_context,
    .modify_cq = modify_cq,
    .modify_qp = modify_qp,
    .modify_srq = modify_srq,
    .poll_cq = poll_cq,
    .post_recv = post_recv,
    .post_send = post_send,
    .post_srq_recv = post_srq_recv,
    .query_device_ex = query_device_ex,
    .query_port = query_port,
    .query_qp = query_qp,
    .query_srq = query_srq,
    .reg_mr = reg_mr,
    .req_notify_cq = req_notify_cq,
    .rereg_mr = rereg_mr,
    .resize_cq = resize_cq,
};

void free_context(ibv_context* ibctx) noexcept {
  Context* ctx = to_ctx(ibctx);
  if (ctx->async_wfd >= 0) ::close(ctx->async_wfd);
  verbs_uninit_context(&ctx->vctx); // closes cmd_fd and async_fd
  ctx->~Context();
  std::free(ctx);
}

verbs_context* alloc_context(ibv_device* ibdev, int cmd_fd, void* /*private_data*/) noexcept {
  // libibverbs allocates sizeof(Context) zeroed and initialises vctx; we then
  // construct the C++ members around it.
  auto* raw = static_cast<Context*>(_verbs_init_and_alloc_context(
      ibdev, cmd_fd, sizeof(Context), nullptr /* vctx is Context's first member: offset 0 */,
      RDMA_DRIVER_UNKNOWN));
  if (!raw) return nullptr;
  verbs_context saved = raw->vctx;
  Context* ctx;
  try {
    ctx = new (raw) Context; // the STag table allocates
  } catch (const std::bad_alloc&) {
    verbs_uninit_context(&raw->vctx);
    std::free(raw);
    errno = ENOMEM;
    return nullptr;
  }
  ctx->vctx = saved;
  ctx->dev = to_dev(ibdev); // vdev.device is first in both
  int p[2];
  if (::pipe2(p, O_CLOEXEC) < 0) {
    verbs_uninit_context(&ctx->vctx);
    ctx->~Context();
    std::free(ctx);
    return nullptr;
  }
  // Our own async event fd, so libibverbs does not ask the kernel for one.
  ctx->vctx.context.async_fd = p[0];
  // One progress engine per context, so a single completion vector.
  ctx->vctx.context.num_comp_vectors = 1;
  ctx->async_wfd = p[1];
  ctx->comp_channel_wfd = shim() ? shim()->comp_channel_wfd : nullptr;
  ctx->same_host.set_wait_report(same_host_wait_report);
  verbs_set_ops(&ctx->vctx, &kOps);
  return &ctx->vctx;
}

verbs_device* alloc_device(verbs_sysfs_dev* sysfs) noexcept {
  try {
    auto* d = new Device{};
    d->ibdev = sysfs->ibdev_name;
    d->sysfs_path = sysfs->ibdev_path;
    d->netdev = d->attr(sysfs::kAttrNetdev);
    if (d->netdev.empty()) d->netdev = d->attr(sysfs::kAttrPortNdev0);
    return &d->vdev;
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}

void uninit_device(verbs_device* vdev) noexcept { delete to_dev(vdev); }

const verbs_match_ent kMatch[] = {
    {nullptr, {"rdma_device:*Nuiwarp*"}, 0, 0, VERBS_MATCH_MODALIAS},
    {},
};

const verbs_device_ops kDeviceOps = {
    .name = "uiwarp",
    .match_min_abi_version = 1,
    .match_max_abi_version = 1,
    .match_table = kMatch,
    .static_providers = nullptr,
    .match_device = nullptr,
    .alloc_context = alloc_context,
    .import_context = nullptr,
    .alloc_device = alloc_device,
    .uninit_device = uninit_device,
};

__attribute__((constructor)) void register_driver() { uiwarp_register_driver(&kDeviceOps); }

} // namespace

std::string Device::attr(const std::string& file) const {
  std::ifstream in(sysfs_path + "/" + file);
  std::string s;
  std::getline(in, s);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' '))
    s.pop_back();
  return s;
}

void Context::post_async_event(std::uint64_t element, std::uint32_t type) {
  ib_uverbs_async_event_desc ev{};
  ev.element = element;
  ev.event_type = type;
  // A full pipe means nobody reads async events; dropping them is what the
  // kernel does when its queue overflows.
  [[maybe_unused]] ssize_t n = ::write(async_wfd, &ev, sizeof ev);
}

void async_event(ibv_context*, ibv_async_event*) noexcept {}

void explain(const char* what) {
  static std::mutex mu;
  static std::set<std::string> said;
  std::lock_guard<std::mutex> lock(mu);
  if (said.insert(what).second) log::warn("provider", what);
}

} // namespace uiwarp
