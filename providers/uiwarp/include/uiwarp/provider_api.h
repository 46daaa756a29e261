/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * The in-process link between libuiwarp-shim.so (the rdma_cm emulation) and the
 * provider libuiwarp-rdmav34.so. libibverbs loads the provider RTLD_LOCAL, so
 * the provider registers itself with the shim (which LD_PRELOAD put in the
 * global scope) through uiwarp_shim_register_provider().
 */
#ifndef UIWARP_PROVIDER_API_H
#define UIWARP_PROVIDER_API_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What MPA negotiated for a connection (RFC 5044 §7.1, RFC 6581). */
struct uiwarp_conn_params {
  uint32_t version;    /* DDP/RDMAP version: 1 IETF, 0 RDMAC */
  uint32_t crc;        /* CRC32c on */
  uint32_t markers_tx; /* insert markers in what we send */
  uint32_t markers_rx; /* peer inserts markers */
  uint32_t ird;        /* inbound RDMA Read limit */
  uint32_t ord;        /* outbound RDMA Read limit */
  uint32_t initiator;  /* MPA role */
  int32_t rtr;         /* P2P RTR: -1 none, 0 Send, 1 Write, 2 Read */
  uint32_t mulpdu;     /* largest ULPDU to send (0: derive from the socket's MSS) */
  uint32_t large_fpdu; /* both ends set siw's large-FPDU flag (MPA_RR_FLAG_GSO_EXP) */
};

/* Events the provider reports for a connected QP. */
enum uiwarp_qp_event {
  UIWARP_QP_DISCONNECTED = 1, /* graceful close finished or peer closed */
  UIWARP_QP_ERROR = 2,        /* Terminate sent or received, or connection lost */
};

struct uiwarp_provider_ops {
  uint32_t abi; /* UIWARP_PROVIDER_ABI */
  /* Gives connected socket `fd` (ownership passes) to QP `qp_num`, which goes to
   * RTS. Returns 0 or an errno (ENOENT: no such QP; EINVAL: QP not in INIT/RTR). */
  int (*attach)(uint32_t qp_num, int fd, const struct uiwarp_conn_params* params);
  /* rdma_disconnect: graceful close of the QP's connection. */
  int (*disconnect)(uint32_t qp_num);
};

#define UIWARP_PROVIDER_ABI 2

/* Exported by the shim. */
void uiwarp_shim_register_provider(const struct uiwarp_provider_ops* ops);
/* Exported by the shim: the provider reports connection events of a QP. */
void uiwarp_shim_qp_event(uint32_t qp_num, enum uiwarp_qp_event event, const char* reason);

#ifdef __cplusplus
}
#endif

#endif /* UIWARP_PROVIDER_API_H */
