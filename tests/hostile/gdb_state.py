# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# gdb script (gdb -x) for a hung uiwarp program: after the backtraces, the state that decides
# whether a connection's end is reported: every QP of the provider (its socket, FIN/peer-close
# flags, whether it reported the end to the shim, the engine's state) and every RDMA CM id of the
# shim (connected, disconnected, its QP). Needs a build with debug information.
import gdb


def rb_nodes(m):
    """The nodes of a std::map, in order, walked by hand (libstdc++'s printers need node types
    that an optimised build may not describe)."""
    header = m["_M_t"]["_M_impl"]["_M_header"]
    node = header["_M_left"]
    end = header.address
    out = []
    while node != end and len(out) < 10000:
        out.append(node)
        if node["_M_right"]:
            node = node["_M_right"]
            while node["_M_left"]:
                node = node["_M_left"]
        else:
            parent = node["_M_parent"]
            while node == parent["_M_right"]:
                node, parent = parent, parent["_M_parent"]
            if node["_M_right"] != parent:
                node = parent
    return out


def show(expr, value_type, fields, pointer=False):
    """Each entry of the std::map<std::uint32_t, V> `expr` (a gdb.Value or an expression), V =
    `value_type` (a type name; a pointer to it with `pointer`)."""
    try:
        m = gdb.parse_and_eval(expr) if isinstance(expr, str) else expr
        vt = gdb.lookup_type(value_type)
        if pointer:
            vt = vt.pointer()
    except gdb.error as e:
        print(f"{expr}: {e}")
        return []
    base = gdb.lookup_type("std::_Rb_tree_node_base").sizeof
    u32 = gdb.lookup_type("unsigned int")
    nodes = rb_nodes(m)
    print(f"{expr if isinstance(expr, str) else 'shim RDMA CM ids'}: {len(nodes)} entries")
    out = []
    for n in nodes:
        addr = int(n) + base
        key = gdb.Value(addr).cast(u32.pointer()).dereference()
        off = (u32.sizeof + vt.alignof - 1) // vt.alignof * vt.alignof
        obj = gdb.Value(addr + off).cast(vt.pointer()).dereference()
        if obj.type.code == gdb.TYPE_CODE_PTR:
            obj = obj.dereference()
        try:
            desc = " ".join(f"{f}={obj[f]}" for f in fields)
        except gdb.error as e:
            desc = str(e)
        print(f"  [{int(key):#x}] {desc}")
        out.append(obj)
    return out


qps = show("'uiwarp::(anonymous namespace)::g_qps'", "uiwarp::Qp", pointer=True, fields=
           ["fd", "state", "fin_sent", "peer_closed", "event_reported", "want_write"])
for q in qps:
    try:
        # std::unique_ptr<iwarp::Qp>: its first word is the pointer.
        qp_t = gdb.lookup_type("iwarp::Qp").pointer()
        ptr = gdb.Value(int(q["engine"].address)).cast(qp_t.pointer()).dereference()
        if int(ptr):
            e = ptr.dereference()
            print(f"  engine: state_={e['state_']} peer_closed_={e['peer_closed_']} "
                  f"rx_stopped_={e['rx_stopped_']} error_={e['error_']}")
    except gdb.error as ex:
        print(f"  engine: {ex}")
# The shim's Ucma singleton is a function-local static without debug information of its own.
try:
    ucma_t = gdb.lookup_type("uiwarp::ucma::(anonymous namespace)::Ucma")
    at = int(gdb.parse_and_eval("&'uiwarp::ucma::(anonymous namespace)::Ucma::get()::u'"))
    ucma = gdb.Value(at).cast(ucma_t.pointer().pointer()).dereference().dereference()
    ids = ucma["ids_"]
except gdb.error as ex:
    ids = None
    print(f"shim ids: {ex}")
if ids is not None:
    show(ids, "uiwarp::ucma::(anonymous namespace)::Id", fields=["handle", "qp_num", "connecting", "connected", "disconnected", "accepted", "child"])
