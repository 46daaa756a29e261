/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * The rdma-core private provider ABI, declared here because Debian ships no
 * <infiniband/driver.h>: only what this provider uses, in rdma-core's layout,
 * for every release uiwarp knows (35 to 65: PABI 34, 57, 59, 64 and 65).
 *
 * The build picks the release: providers/uiwarp/IbverbsAbi.cmake reads the libibverbs it
 * builds against and defines UIWARP_RDMA_CORE (its release) and
 * UIWARP_IBVERBS_PABI (its IBVERBS_PRIVATE_<n>). A libibverbs with another PABI
 * never loads this provider (it looks for lib<name>-rdmav<PABI>.so, and
 * verbs_register_driver_<PABI> would be missing), and the Debian package bounds
 * libibverbs1 to the releases that share this layout (see debian/rules).
 *
 * What changed, from rdma-core's history of libibverbs/driver.h: the structs
 * below are the same from 35 to 65; verbs_context_ops, alphabetical, gained
 * members (UIWARP_SINCE marks each with its first release), twice within one
 * PABI (36 in PABI 34, 62 in PABI 59). Everything else that changed (the
 * ibv_cmd_* helpers' signatures in 57, 59 and 64) is unused here. verbs_context
 * grows too, but it comes from the installed <infiniband/verbs.h>.
 */
#ifndef UIWARP_VERBS_ABI_H
#define UIWARP_VERBS_ABI_H

/* Kept in rdma-core's own C layout, so that it diffs cleanly against driver.h. */
/* clang-format off */

#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#ifdef __cplusplus
#include <atomic>
typedef std::atomic<int> uiwarp_atomic_int;
extern "C" {
#else
#include <stdatomic.h>
typedef atomic_int uiwarp_atomic_int;
#endif

#if !defined(UIWARP_RDMA_CORE) || !defined(UIWARP_IBVERBS_PABI)
#error "UIWARP_RDMA_CORE and UIWARP_IBVERBS_PABI come from providers/uiwarp/IbverbsAbi.cmake"
#endif
/* The PABI of each release, as rdma-core's CMakeLists.txt sets IBVERBS_PABI_VERSION. */
#define UIWARP_PABI_OF(rel) \
  ((rel) < 35 ? -1 : (rel) <= 56 ? 34 : (rel) <= 58 ? 57 : (rel) <= 63 ? 59 : (rel) == 64 ? 64 \
   : (rel) == 65 ? 65 : -1)
#if UIWARP_PABI_OF(UIWARP_RDMA_CORE) != UIWARP_IBVERBS_PABI
#error "this rdma-core release and PABI are not a combination uiwarp knows"
#endif
/* A verbs_context_ops member that rdma-core release `rel` added. */
#define UIWARP_SINCE(rel) (UIWARP_RDMA_CORE >= (rel))

/* Pointee types of members newer releases added, for the releases whose verbs.h lacks them. */
struct ibv_buf;
struct ibv_comp_cntr;
struct ibv_comp_cntr_caps;
struct ibv_comp_cntr_init_attr;
struct ibv_dmah;
struct ibv_dmah_init_attr;
struct ibv_mr_init_attr;
struct ibv_qp_attach_comp_cntr_attr;

/* ccan/list.h */
struct uiwarp_list_node {
  struct uiwarp_list_node *next, *prev;
};

enum { VERBS_MATCH_SENTINEL = 0, VERBS_MATCH_PCI = 1, VERBS_MATCH_MODALIAS = 2, VERBS_MATCH_DRIVER_ID = 3 };

struct verbs_match_ent {
  void *driver_data;
  union {
    const char *modalias;
    uint64_t driver_id;
  } u;
  uint16_t vendor;
  uint16_t device;
  uint8_t kind;
};

struct verbs_sysfs_dev {
  struct uiwarp_list_node entry;
  void *provider_data;
  const struct verbs_match_ent *match;
  unsigned int flags;
  char sysfs_name[IBV_SYSFS_NAME_MAX];
  dev_t sysfs_cdev;
  char ibdev_name[IBV_SYSFS_NAME_MAX];
  char ibdev_path[IBV_SYSFS_PATH_MAX];
  char modalias[512];
  uint64_t node_guid;
  uint32_t driver_id;
  enum ibv_node_type node_type;
  int ibdev_idx;
  uint32_t num_ports;
  uint32_t abi_ver;
  struct timespec time_created;
};

struct verbs_device;

struct verbs_device_ops {
  const char *name;
  uint32_t match_min_abi_version;
  uint32_t match_max_abi_version;
  const struct verbs_match_ent *match_table;
  const struct verbs_device_ops **static_providers;
  bool (*match_device)(struct verbs_sysfs_dev *sysfs_dev);
  struct verbs_context *(*alloc_context)(struct ibv_device *device, int cmd_fd,
                                         void *private_data);
  struct verbs_context *(*import_context)(struct ibv_device *device, int cmd_fd);
  struct verbs_device *(*alloc_device)(struct verbs_sysfs_dev *sysfs_dev);
  void (*uninit_device)(struct verbs_device *device);
};

struct verbs_device {
  struct ibv_device device; /* must be first */
  const struct verbs_device_ops *ops;
  uiwarp_atomic_int refcount;
  struct uiwarp_list_node entry;
  struct verbs_sysfs_dev *sysfs;
  uint64_t core_support;
};

enum ibv_mr_type { IBV_MR_TYPE_MR, IBV_MR_TYPE_NULL_MR, IBV_MR_TYPE_IMPORTED_MR, IBV_MR_TYPE_DMABUF_MR };

struct verbs_mr {
  struct ibv_mr ibv_mr;
  enum ibv_mr_type mr_type;
  int access;
};

struct verbs_xrcd;
struct verbs_qp {
  union {
    struct ibv_qp qp;
    struct ibv_qp_ex qp_ex;
  };
  uint32_t comp_mask;
  struct verbs_xrcd *xrcd;
};

struct verbs_cq {
  union {
    struct ibv_cq cq;
    struct ibv_cq_ex cq_ex;
  };
};

/* Alphabetical, as rdma-core declares it; UIWARP_SINCE(n): added in release n. */
struct verbs_context_ops {
  int (*advise_mr)(struct ibv_pd *, enum ibv_advise_mr_advice, uint32_t, struct ibv_sge *,
                   uint32_t);
#if UIWARP_SINCE(64)
  void *(*alloc_buf)(struct ibv_pd *, size_t, struct ibv_buf **);
#endif
  struct ibv_dm *(*alloc_dm)(struct ibv_context *, struct ibv_alloc_dm_attr *);
#if UIWARP_SINCE(59)
  struct ibv_dmah *(*alloc_dmah)(struct ibv_context *, struct ibv_dmah_init_attr *);
#endif
  struct ibv_mw *(*alloc_mw)(struct ibv_pd *, enum ibv_mw_type);
  struct ibv_mr *(*alloc_null_mr)(struct ibv_pd *);
  struct ibv_pd *(*alloc_parent_domain)(struct ibv_context *, struct ibv_parent_domain_init_attr *);
  struct ibv_pd *(*alloc_pd)(struct ibv_context *);
  struct ibv_td *(*alloc_td)(struct ibv_context *, struct ibv_td_init_attr *);
  void (*async_event)(struct ibv_context *, struct ibv_async_event *);
  int (*attach_counters_point_flow)(struct ibv_counters *, struct ibv_counter_attach_attr *,
                                    struct ibv_flow *);
  int (*attach_mcast)(struct ibv_qp *, const union ibv_gid *, uint16_t);
  int (*bind_mw)(struct ibv_qp *, struct ibv_mw *, struct ibv_mw_bind *);
  int (*close_xrcd)(struct ibv_xrcd *);
  void (*cq_event)(struct ibv_cq *);
  struct ibv_ah *(*create_ah)(struct ibv_pd *, struct ibv_ah_attr *);
#if UIWARP_SINCE(65)
  struct ibv_comp_cntr *(*create_comp_cntr)(struct ibv_context *, struct ibv_comp_cntr_init_attr *);
#endif
  struct ibv_counters *(*create_counters)(struct ibv_context *, struct ibv_counters_init_attr *);
  struct ibv_cq *(*create_cq)(struct ibv_context *, int, struct ibv_comp_channel *, int);
  struct ibv_cq_ex *(*create_cq_ex)(struct ibv_context *, struct ibv_cq_init_attr_ex *);
  struct ibv_flow *(*create_flow)(struct ibv_qp *, struct ibv_flow_attr *);
  struct ibv_flow_action *(*create_flow_action_esp)(struct ibv_context *,
                                                    struct ibv_flow_action_esp_attr *);
  struct ibv_qp *(*create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *);
  struct ibv_qp *(*create_qp_ex)(struct ibv_context *, struct ibv_qp_init_attr_ex *);
  struct ibv_rwq_ind_table *(*create_rwq_ind_table)(struct ibv_context *,
                                                    struct ibv_rwq_ind_table_init_attr *);
  struct ibv_srq *(*create_srq)(struct ibv_pd *, struct ibv_srq_init_attr *);
  struct ibv_srq *(*create_srq_ex)(struct ibv_context *, struct ibv_srq_init_attr_ex *);
  struct ibv_wq *(*create_wq)(struct ibv_context *, struct ibv_wq_init_attr *);
#if UIWARP_SINCE(59)
  int (*dealloc_dmah)(struct ibv_dmah *);
#endif
  int (*dealloc_mw)(struct ibv_mw *);
  int (*dealloc_pd)(struct ibv_pd *);
  int (*dealloc_td)(struct ibv_td *);
  int (*dereg_mr)(struct verbs_mr *);
  int (*destroy_ah)(struct ibv_ah *);
#if UIWARP_SINCE(65)
  int (*destroy_comp_cntr)(struct ibv_comp_cntr *);
#endif
  int (*destroy_counters)(struct ibv_counters *);
  int (*destroy_cq)(struct ibv_cq *);
  int (*destroy_flow)(struct ibv_flow *);
  int (*destroy_flow_action)(struct ibv_flow_action *);
  int (*destroy_qp)(struct ibv_qp *);
  int (*destroy_rwq_ind_table)(struct ibv_rwq_ind_table *);
  int (*destroy_srq)(struct ibv_srq *);
  int (*destroy_wq)(struct ibv_wq *);
  int (*detach_mcast)(struct ibv_qp *, const union ibv_gid *, uint16_t);
#if UIWARP_SINCE(62)
  int (*dm_export_dmabuf_fd)(struct ibv_dm *);
#endif
#if UIWARP_SINCE(64)
  void (*free_buf)(struct ibv_buf *);
#endif
  void (*free_context)(struct ibv_context *);
  int (*free_dm)(struct ibv_dm *);
  int (*get_srq_num)(struct ibv_srq *, uint32_t *);
  struct ibv_dm *(*import_dm)(struct ibv_context *, uint32_t);
  struct ibv_mr *(*import_mr)(struct ibv_pd *, uint32_t);
  struct ibv_pd *(*import_pd)(struct ibv_context *, uint32_t);
#if UIWARP_SINCE(65)
  int (*inc_comp_cntr)(struct ibv_comp_cntr *, uint64_t);
  int (*inc_err_comp_cntr)(struct ibv_comp_cntr *, uint64_t);
#endif
  int (*modify_cq)(struct ibv_cq *, struct ibv_modify_cq_attr *);
  int (*modify_flow_action_esp)(struct ibv_flow_action *, struct ibv_flow_action_esp_attr *);
  int (*modify_qp)(struct ibv_qp *, struct ibv_qp_attr *, int);
  int (*modify_qp_rate_limit)(struct ibv_qp *, struct ibv_qp_rate_limit_attr *);
  int (*modify_srq)(struct ibv_srq *, struct ibv_srq_attr *, int);
  int (*modify_wq)(struct ibv_wq *, struct ibv_wq_attr *);
  struct ibv_qp *(*open_qp)(struct ibv_context *, struct ibv_qp_open_attr *);
  struct ibv_xrcd *(*open_xrcd)(struct ibv_context *, struct ibv_xrcd_init_attr *);
  int (*poll_cq)(struct ibv_cq *, int, struct ibv_wc *);
  int (*post_recv)(struct ibv_qp *, struct ibv_recv_wr *, struct ibv_recv_wr **);
  int (*post_send)(struct ibv_qp *, struct ibv_send_wr *, struct ibv_send_wr **);
  int (*post_srq_ops)(struct ibv_srq *, struct ibv_ops_wr *, struct ibv_ops_wr **);
  int (*post_srq_recv)(struct ibv_srq *, struct ibv_recv_wr *, struct ibv_recv_wr **);
#if UIWARP_SINCE(65)
  int (*qp_attach_comp_cntr)(struct ibv_qp *, struct ibv_comp_cntr *,
                             struct ibv_qp_attach_comp_cntr_attr *);
  int (*query_comp_cntr_caps)(struct ibv_context *, struct ibv_comp_cntr_caps *, size_t);
#endif
  int (*query_device_ex)(struct ibv_context *, const struct ibv_query_device_ex_input *,
                         struct ibv_device_attr_ex *, size_t);
  int (*query_ece)(struct ibv_qp *, struct ibv_ece *);
  int (*query_port)(struct ibv_context *, uint8_t, struct ibv_port_attr *);
#if UIWARP_SINCE(62)
  int (*query_port_speed)(struct ibv_context *, uint32_t, uint64_t *);
#endif
  int (*query_qp)(struct ibv_qp *, struct ibv_qp_attr *, int, struct ibv_qp_init_attr *);
#if UIWARP_SINCE(36)
  int (*query_qp_data_in_order)(struct ibv_qp *, enum ibv_wr_opcode, uint32_t);
#endif
  int (*query_rt_values)(struct ibv_context *, struct ibv_values_ex *);
  int (*query_srq)(struct ibv_srq *, struct ibv_srq_attr *);
#if UIWARP_SINCE(65)
  int (*read_comp_cntr)(struct ibv_comp_cntr *, uint64_t *);
#endif
  int (*read_counters)(struct ibv_counters *, uint64_t *, uint32_t, uint32_t);
#if UIWARP_SINCE(65)
  int (*read_err_comp_cntr)(struct ibv_comp_cntr *, uint64_t *);
#endif
  struct ibv_mr *(*reg_dm_mr)(struct ibv_pd *, struct ibv_dm *, uint64_t, size_t, unsigned int);
  struct ibv_mr *(*reg_dmabuf_mr)(struct ibv_pd *, uint64_t, size_t, uint64_t, int, int);
  struct ibv_mr *(*reg_mr)(struct ibv_pd *, void *, size_t, uint64_t, int);
#if UIWARP_SINCE(59)
  struct ibv_mr *(*reg_mr_ex)(struct ibv_pd *, struct ibv_mr_init_attr *);
#endif
  int (*req_notify_cq)(struct ibv_cq *, int);
  int (*rereg_mr)(struct verbs_mr *, int, struct ibv_pd *, void *, size_t, int);
  int (*resize_cq)(struct ibv_cq *, int);
#if UIWARP_SINCE(65)
  int (*set_comp_cntr)(struct ibv_comp_cntr *, uint64_t);
#endif
  int (*set_ece)(struct ibv_qp *, struct ibv_ece *);
#if UIWARP_SINCE(65)
  int (*set_err_comp_cntr)(struct ibv_comp_cntr *, uint64_t);
#endif
  void (*unimport_dm)(struct ibv_dm *);
  void (*unimport_mr)(struct ibv_mr *);
  void (*unimport_pd)(struct ibv_pd *);
};

/* Exported by libibverbs.so.1 under IBVERBS_PRIVATE_<PABI>; verbs_register_driver_<PABI> is
 * the one whose name carries the PABI (uiwarp_register_driver below calls it). */
#define UIWARP_CAT_(a, b) a##b
#define UIWARP_CAT(a, b) UIWARP_CAT_(a, b)
#define uiwarp_register_driver UIWARP_CAT(verbs_register_driver_, UIWARP_IBVERBS_PABI)
void uiwarp_register_driver(const struct verbs_device_ops *ops);
void *_verbs_init_and_alloc_context(struct ibv_device *device, int cmd_fd, size_t alloc_size,
                                    struct verbs_context *context_offset, uint32_t driver_id);
void verbs_uninit_context(struct verbs_context *context);
void verbs_set_ops(struct verbs_context *vctx, const struct verbs_context_ops *ops);
void verbs_init_cq(struct ibv_cq *cq, struct ibv_context *context,
                   struct ibv_comp_channel *channel, void *cq_context);
int ibv_read_ibdev_sysfs_file(char *buf, size_t size, struct verbs_sysfs_dev *sysfs_dev,
                              const char *fnfmt, ...);

#ifdef __cplusplus
}

/*
 * Layout checks. libibverbs' verbs_set_ops() reads our ops table with its own
 * layout: right when the table has that layout's size and every member we set
 * sits at that layout's index. The numbers are rdma-core's, counted in
 * libibverbs/driver.h at v35.0, v36.0, v59.0, v62.0, v64.0 and 65.0 (the
 * first release of each layout), not derived from the declaration above.
 */
constexpr int uiwarp_layout(int rel) {
  return rel < 36 ? 0 : rel < 59 ? 1 : rel < 62 ? 2 : rel < 64 ? 3 : rel < 65 ? 4 : 5;
}
constexpr int uiwarp_pick(int a, int b, int c, int d, int e, int f) {
  const int v[] = {a, b, c, d, e, f};
  return v[uiwarp_layout(UIWARP_RDMA_CORE)];
}
static_assert(sizeof(struct verbs_context_ops) ==
                  uiwarp_pick(75, 76, 79, 81, 83, 93) * sizeof(void *),
              "verbs_context_ops has as many members as this rdma-core release's");
#define UIWARP_OP_AT(op, ...) \
  static_assert(offsetof(struct verbs_context_ops, op) == uiwarp_pick(__VA_ARGS__) * sizeof(void *), \
                "verbs_context_ops." #op " sits where this rdma-core release has it")
UIWARP_OP_AT(alloc_mw, 2, 2, 3, 3, 4, 4);
UIWARP_OP_AT(alloc_pd, 5, 5, 6, 6, 7, 7);
UIWARP_OP_AT(async_event, 7, 7, 8, 8, 9, 9);
UIWARP_OP_AT(cq_event, 12, 12, 13, 13, 14, 14);
UIWARP_OP_AT(create_cq, 15, 15, 16, 16, 17, 18);
UIWARP_OP_AT(create_cq_ex, 16, 16, 17, 17, 18, 19);
UIWARP_OP_AT(create_qp, 19, 19, 20, 20, 21, 22);
UIWARP_OP_AT(create_qp_ex, 20, 20, 21, 21, 22, 23);
UIWARP_OP_AT(create_srq, 22, 22, 23, 23, 24, 25);
UIWARP_OP_AT(create_srq_ex, 23, 23, 24, 24, 25, 26);
UIWARP_OP_AT(dealloc_pd, 26, 26, 28, 28, 29, 30);
UIWARP_OP_AT(dereg_mr, 28, 28, 30, 30, 31, 32);
UIWARP_OP_AT(destroy_cq, 31, 31, 33, 33, 34, 36);
UIWARP_OP_AT(destroy_qp, 34, 34, 36, 36, 37, 39);
UIWARP_OP_AT(destroy_srq, 36, 36, 38, 38, 39, 41);
UIWARP_OP_AT(free_context, 39, 39, 41, 42, 44, 46);
UIWARP_OP_AT(modify_cq, 45, 45, 47, 48, 50, 54);
UIWARP_OP_AT(modify_qp, 47, 47, 49, 50, 52, 56);
UIWARP_OP_AT(modify_srq, 49, 49, 51, 52, 54, 58);
UIWARP_OP_AT(poll_cq, 53, 53, 55, 56, 58, 62);
UIWARP_OP_AT(post_recv, 54, 54, 56, 57, 59, 63);
UIWARP_OP_AT(post_send, 55, 55, 57, 58, 60, 64);
UIWARP_OP_AT(post_srq_recv, 57, 57, 59, 60, 62, 66);
UIWARP_OP_AT(query_device_ex, 58, 58, 60, 61, 63, 69);
UIWARP_OP_AT(query_port, 60, 60, 62, 63, 65, 71);
UIWARP_OP_AT(query_qp, 61, 61, 63, 65, 67, 73);
UIWARP_OP_AT(query_srq, 63, 64, 66, 68, 70, 76);
UIWARP_OP_AT(reg_mr, 67, 68, 70, 72, 74, 82);
UIWARP_OP_AT(req_notify_cq, 68, 69, 72, 74, 76, 84);
UIWARP_OP_AT(rereg_mr, 69, 70, 73, 75, 77, 85);
UIWARP_OP_AT(resize_cq, 70, 71, 74, 76, 78, 86);
#undef UIWARP_OP_AT
static_assert(offsetof(struct verbs_device, device) == 0, "ibv_device first in verbs_device");
static_assert(offsetof(struct verbs_device, ops) == sizeof(struct ibv_device),
              "verbs_device layout");
static_assert(offsetof(struct ibv_qp_ex, qp_base) == 0, "ibv_qp_ex starts with ibv_qp");
static_assert(offsetof(struct verbs_qp, qp) == 0 && offsetof(struct verbs_qp, qp_ex) == 0,
              "verbs_qp layout");
static_assert(offsetof(struct verbs_mr, ibv_mr) == 0, "verbs_mr layout");
static_assert(offsetof(struct verbs_context, context) + sizeof(struct ibv_context) ==
                  sizeof(struct verbs_context),
              "ibv_context is the last member of verbs_context (container_of, not a cast)");
static_assert(sizeof(std::atomic<int>) == sizeof(int), "atomic_int has the size of int");
#endif

/* clang-format on */
#endif /* UIWARP_VERBS_ABI_H */
