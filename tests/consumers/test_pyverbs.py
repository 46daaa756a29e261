#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""uiwarp through Debian's python3-pyverbs (rdma-core's Python bindings): the device, PDs, MRs
with the kernel's access rules, CQs with a completion channel, and RC QPs connected with the
synchronous RDMA CM that move data (Sends, RDMA Writes and RDMA Reads, every byte checked).

Run under uiwarp-run with Debian's interpreter:
    uiwarp-run /usr/bin/python3 tests/consumers/test_pyverbs.py [-v] [--dev uiwarp0]
Exits 77 (ctest: skipped) when pyverbs is not installed.
"""
import errno
import multiprocessing
import os
import socket
import struct
import sys
import unittest

try:
    import pyverbs.cm_enums as ce
    import pyverbs.device as d
    import pyverbs.enums as e
    from pyverbs.cmid import CMID, AddrInfo
    from pyverbs.cq import CQ, CompChannel
    from pyverbs.mr import MR
    from pyverbs.pd import PD
    from pyverbs.pyverbs_error import PyverbsRDMAError
    from pyverbs.qp import QP, QPCap, QPInitAttr
except ImportError as ex:
    print(f"skipped: python3-pyverbs is not installed ({ex})")
    sys.exit(77)

DEV = "uiwarp0"
ADDR = "127.0.0.1"
SIZES = [1, 64, 4096, 65536, 1 << 20]


def pattern(size, seed):
    return bytes((i * 7 + seed * 31 + (i >> 8)) & 0xFF for i in range(size))


def free_port():
    with socket.socket() as s:
        s.bind((ADDR, 0))
        return s.getsockname()[1]


class DeviceTest(unittest.TestCase):
    def test_listed_as_iwarp_rnic(self):
        devs = {x.name.decode(): x for x in d.get_device_list()}
        self.assertIn(DEV, devs)
        self.assertEqual(devs[DEV].node_type, e.IBV_NODE_RNIC)
        self.assertEqual(devs[DEV].transport_type, e.IBV_TRANSPORT_IWARP)

    def test_query_device_and_port(self):
        with d.Context(name=DEV) as ctx:
            attr = ctx.query_device()
            self.assertEqual(attr.phys_port_cnt, 1)
            self.assertGreater(attr.max_qp, 0)
            self.assertGreater(attr.max_mr_size, 0)
            self.assertGreaterEqual(attr.max_qp_rd_atom, 1)
            self.assertEqual(attr.atomic_caps, e.IBV_ATOMIC_HCA)  # RFC 7306 between uiwarp peers
            self.assertEqual(ctx.query_device_ex().phys_port_cnt_ex, 1)
            port = ctx.query_port(1)
            self.assertEqual(port.state, e.IBV_PORT_ACTIVE)
            self.assertEqual(port.link_layer, e.IBV_LINK_LAYER_ETHERNET)
            self.assertGreaterEqual(port.gid_tbl_len, 1)
            # GID 0 is fe80::<node GUID>.
            gid = str(ctx.query_gid(1, 0))
            self.assertTrue(gid.startswith("fe80:0000:0000:0000:"), gid)
            # node_guid comes in network byte order.
            guid = int.from_bytes(attr.node_guid.to_bytes(8, "little"), "big")
            self.assertEqual(gid[20:].replace(":", ""), "%016x" % guid)
            with self.assertRaises(PyverbsRDMAError):
                ctx.query_port(2)


class MemoryTest(unittest.TestCase):
    def setUp(self):
        self.ctx = d.Context(name=DEV)
        self.pd = PD(self.ctx)

    def tearDown(self):
        self.pd.close()
        self.ctx.close()

    def test_mr_write_read_and_keys(self):
        access = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE |
                  e.IBV_ACCESS_REMOTE_READ)
        with MR(self.pd, 65536, access) as mr:
            data = pattern(65536, 3)
            mr.write(data, len(data))
            self.assertEqual(mr.read(len(data), 0), data)
            self.assertEqual(mr.length, 65536)
            self.assertNotEqual(mr.lkey, 0)

    def test_kernel_access_rules(self):
        # ib_check_mr_access: remote write or atomic need local write; the device's lack of
        # atomics does not make REMOTE_ATOMIC fail at registration, and MW_BIND is accepted.
        for access in (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_ATOMIC,
                       e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_MW_BIND, 0):
            MR(self.pd, 4096, access).close()
        for access in (e.IBV_ACCESS_REMOTE_WRITE, e.IBV_ACCESS_REMOTE_ATOMIC):
            with self.assertRaises(PyverbsRDMAError) as cm:
                MR(self.pd, 4096, access)
            self.assertEqual(cm.exception.error_code, errno.EINVAL)

    def test_memory_windows(self):
        # Type 1 and type 2B windows (RFC 5040 2.1): each gets an STag of its own; an unknown
        # type is EINVAL, as ib_uverbs answers.
        from pyverbs.mr import MW
        with MW(self.pd, e.IBV_MW_TYPE_1) as mw1, MW(self.pd, e.IBV_MW_TYPE_2) as mw2:
            self.assertEqual(mw1.type, e.IBV_MW_TYPE_1)
            self.assertEqual(mw2.type, e.IBV_MW_TYPE_2)
            self.assertNotEqual(mw1.rkey, mw2.rkey)
        with self.assertRaises(PyverbsRDMAError) as cm:
            MW(self.pd, 3)
        self.assertEqual(cm.exception.error_code, errno.EINVAL)


class QueueTest(unittest.TestCase):
    def test_cq_with_channel_and_empty_poll(self):
        with d.Context(name=DEV) as ctx:
            with CompChannel(ctx) as ch, CQ(ctx, 64, None, ch, 0) as cq:
                self.assertGreaterEqual(cq.cqe, 64)
                npolled, wcs = cq.poll(4)
                self.assertEqual(npolled, 0)
                cq.req_notify()

    def test_rc_qp_create_and_query(self):
        with d.Context(name=DEV) as ctx, PD(ctx) as pd, CQ(ctx, 64, None, None, 0) as cq:
            cap = QPCap(max_send_wr=32, max_recv_wr=32, max_send_sge=2, max_recv_sge=2)
            with QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap)) as qp:
                _, init = qp.query(e.IBV_QP_CAP)
                self.assertGreaterEqual(init.cap.max_send_wr, 32)
                self.assertGreaterEqual(init.cap.max_recv_wr, 32)
            # Only RC on iWARP: UD is refused as unsupported, so callers can tell.
            with self.assertRaises(PyverbsRDMAError) as cm:
                QP(pd, QPInitAttr(qp_type=e.IBV_QPT_UD, scq=cq, rcq=cq, cap=cap))
            self.assertEqual(cm.exception.error_code, errno.EOPNOTSUPP)


def qp_attr():
    return QPInitAttr(qp_type=e.IBV_QPT_RC,
                      cap=QPCap(max_send_wr=16, max_recv_wr=16, max_send_sge=1, max_recv_sge=1))


def check_wc(wc, what):
    if wc is None or wc.status != e.IBV_WC_SUCCESS:
        raise RuntimeError(f"{what}: completion {wc and wc.status}")
    return wc


def server(port, q):
    """The passive side, in a process of its own: accepts, offers one buffer for RDMA Write
    and one for RDMA Read, answers each Send with its checksum, then checks what was written."""
    try:
        ai = AddrInfo(src=ADDR, src_service=str(port), port_space=ce.RDMA_PS_TCP,
                      flags=ce.RAI_PASSIVE)
        listen_id = CMID(creator=ai, qp_init_attr=qp_attr())
        listen_id.listen()
        q.send("listening")
        cid = listen_id.get_request()
        big = max(SIZES)
        rx = cid.reg_msgs(big)
        tx = cid.reg_msgs(64)
        wtarget = cid.reg_write(big)
        rsource = cid.reg_read(big)
        rsource.write(pattern(big, 9), big)
        cid.post_recv(rx, big)
        cid.accept()
        tx.write(struct.pack("<QIQI", wtarget.buf, wtarget.rkey, rsource.buf, rsource.rkey), 24)
        cid.post_send(tx, e.IBV_SEND_SIGNALED, 24)
        check_wc(cid.get_send_comp(), "send keys")
        for n, size in enumerate(SIZES):
            wc = check_wc(cid.get_recv_comp(), f"recv {size}")
            if wc.byte_len != size or rx.read(size, 0) != pattern(size, n):
                raise RuntimeError(f"Send of {size} B arrived wrong ({wc.byte_len} B)")
            cid.post_recv(rx, big)
            tx.write(struct.pack("<I", size), 4)
            cid.post_send(tx, e.IBV_SEND_SIGNALED, 4)
            check_wc(cid.get_send_comp(), "ack")
        check_wc(cid.get_recv_comp(), "written")  # the client has written
        cid.post_recv(rx, big)  # for "bye": on iWARP a Send with no receive posted is fatal
        if wtarget.read(big, 0) != pattern(big, 5):
            raise RuntimeError("RDMA Write target does not hold what was written")
        tx.write(b"ok", 2)
        cid.post_send(tx, e.IBV_SEND_SIGNALED, 2)
        check_wc(cid.get_send_comp(), "ok")
        check_wc(cid.get_recv_comp(), "bye")
        cid.disconnect()
        q.send("done")
    except Exception as ex:  # reported to the test in the parent
        q.send(f"server: {type(ex).__name__}: {ex}")


class RdmaCmTrafficTest(unittest.TestCase):
    def test_send_write_read_over_rdma_cm(self):
        port = free_port()
        ctx = multiprocessing.get_context("fork")
        # A Pipe, not a Queue: a Queue's feeder thread needs the GIL, which pyverbs keeps while
        # the server blocks in rdma_get_request.
        q, child_end = ctx.Pipe(duplex=False)
        srv = ctx.Process(target=server, args=(port, child_end))
        srv.start()
        try:
            self.assertTrue(q.poll(60), "the server did not start")
            self.assertEqual(q.recv(), "listening")
            ai = AddrInfo(dst=ADDR, dst_service=str(port), port_space=ce.RDMA_PS_TCP)
            cid = CMID(creator=ai, qp_init_attr=qp_attr())
            big = max(SIZES)
            rx = cid.reg_msgs(64)
            tx = cid.reg_msgs(big)
            local = cid.reg_read(big)  # RDMA Read lands here; RDMA Write is sent from here
            cid.post_recv(rx, 64)
            cid.connect()
            check_wc(cid.get_recv_comp(), "keys")
            waddr, wkey, raddr, rkey = struct.unpack("<QIQI", rx.read(24, 0))
            for n, size in enumerate(SIZES):
                cid.post_recv(rx, 64)
                tx.write(pattern(size, n), size)
                cid.post_send(tx, e.IBV_SEND_SIGNALED, size)
                check_wc(cid.get_send_comp(), f"send {size}")
                check_wc(cid.get_recv_comp(), f"ack {size}")
                self.assertEqual(struct.unpack("<I", rx.read(4, 0))[0], size)
            local.write(pattern(big, 5), big)
            cid.post_write(local, big, waddr, wkey, e.IBV_SEND_SIGNALED)
            check_wc(cid.get_send_comp(), "RDMA Write")
            local.write(bytes(big), big)
            cid.post_read(local, big, raddr, rkey, e.IBV_SEND_SIGNALED)
            check_wc(cid.get_send_comp(), "RDMA Read")
            self.assertEqual(local.read(big, 0), pattern(big, 9), "RDMA Read data")
            cid.post_recv(rx, 64)
            tx.write(b"w", 1)
            cid.post_send(tx, e.IBV_SEND_SIGNALED, 1)
            check_wc(cid.get_send_comp(), "written")
            check_wc(cid.get_recv_comp(), "ok")
            self.assertEqual(rx.read(2, 0), b"ok")
            cid.post_send(tx, e.IBV_SEND_SIGNALED, 1)
            check_wc(cid.get_send_comp(), "bye")
            self.assertTrue(q.poll(60), "the server did not finish")
            self.assertEqual(q.recv(), "done")
            cid.close()
        finally:
            srv.join(30)
            if srv.is_alive():
                srv.kill()
        self.assertEqual(srv.exitcode, 0)


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--dev" in args:
        i = args.index("--dev")
        DEV = args[i + 1]
        del args[i:i + 2]
    if not any(x.name.decode() == DEV for x in d.get_device_list()):
        print(f"skipped: no RDMA device {DEV} (run under uiwarp-run)")
        sys.exit(77)
    unittest.main(argv=[sys.argv[0]] + args)
