/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * The rdma-core private provider ABI, IBVERBS_PRIVATE_34 (libibverbs v35..v56),
 * declared here because Debian ships no <infiniband/driver.h>. Only what this
 * provider uses, in the layout of rdma-core v44 libibverbs/driver.h. The layout
 * is fixed for a given PABI: a libibverbs with another PABI refuses to load
 * this provider (the symbol verbs_register_driver_34 would be missing), and the
 * Debian package depends on the matching libibverbs1 (see debian/).
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

#define UIWARP_IBVERBS_PABI 34

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

/* Alphabetical, exactly as rdma-core v44 declares it. */
struct verbs_context_ops {
  int (*advise_mr)(struct ibv_pd *, enum ibv_advise_mr_advice, uint32_t, struct ibv_sge *,
                   uint32_t);
  struct ibv_dm *(*alloc_dm)(struct ibv_context *, struct ibv_alloc_dm_attr *);
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
  int (*dealloc_mw)(struct ibv_mw *);
  int (*dealloc_pd)(struct ibv_pd *);
  int (*dealloc_td)(struct ibv_td *);
  int (*dereg_mr)(struct verbs_mr *);
  int (*destroy_ah)(struct ibv_ah *);
  int (*destroy_counters)(struct ibv_counters *);
  int (*destroy_cq)(struct ibv_cq *);
  int (*destroy_flow)(struct ibv_flow *);
  int (*destroy_flow_action)(struct ibv_flow_action *);
  int (*destroy_qp)(struct ibv_qp *);
  int (*destroy_rwq_ind_table)(struct ibv_rwq_ind_table *);
  int (*destroy_srq)(struct ibv_srq *);
  int (*destroy_wq)(struct ibv_wq *);
  int (*detach_mcast)(struct ibv_qp *, const union ibv_gid *, uint16_t);
  void (*free_context)(struct ibv_context *);
  int (*free_dm)(struct ibv_dm *);
  int (*get_srq_num)(struct ibv_srq *, uint32_t *);
  struct ibv_dm *(*import_dm)(struct ibv_context *, uint32_t);
  struct ibv_mr *(*import_mr)(struct ibv_pd *, uint32_t);
  struct ibv_pd *(*import_pd)(struct ibv_context *, uint32_t);
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
  int (*query_device_ex)(struct ibv_context *, const struct ibv_query_device_ex_input *,
                         struct ibv_device_attr_ex *, size_t);
  int (*query_ece)(struct ibv_qp *, struct ibv_ece *);
  int (*query_port)(struct ibv_context *, uint8_t, struct ibv_port_attr *);
  int (*query_qp)(struct ibv_qp *, struct ibv_qp_attr *, int, struct ibv_qp_init_attr *);
  int (*query_qp_data_in_order)(struct ibv_qp *, enum ibv_wr_opcode, uint32_t);
  int (*query_rt_values)(struct ibv_context *, struct ibv_values_ex *);
  int (*query_srq)(struct ibv_srq *, struct ibv_srq_attr *);
  int (*read_counters)(struct ibv_counters *, uint64_t *, uint32_t, uint32_t);
  struct ibv_mr *(*reg_dm_mr)(struct ibv_pd *, struct ibv_dm *, uint64_t, size_t, unsigned int);
  struct ibv_mr *(*reg_dmabuf_mr)(struct ibv_pd *, uint64_t, size_t, uint64_t, int, int);
  struct ibv_mr *(*reg_mr)(struct ibv_pd *, void *, size_t, uint64_t, int);
  int (*req_notify_cq)(struct ibv_cq *, int);
  int (*rereg_mr)(struct verbs_mr *, int, struct ibv_pd *, void *, size_t, int);
  int (*resize_cq)(struct ibv_cq *, int);
  int (*set_ece)(struct ibv_qp *, struct ibv_ece *);
  void (*unimport_dm)(struct ibv_dm *);
  void (*unimport_mr)(struct ibv_mr *);
  void (*unimport_pd)(struct ibv_pd *);
};

/* Exported by libibverbs.so.1 under IBVERBS_PRIVATE_34. */
void verbs_register_driver_34(const struct verbs_device_ops *ops);
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

/* Layout checks: what libibverbs reads from our objects must sit where v44 puts it. */
static_assert(sizeof(struct verbs_context_ops) == 76 * sizeof(void *),
              "verbs_context_ops must have the 76 entries of PABI 34");
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
