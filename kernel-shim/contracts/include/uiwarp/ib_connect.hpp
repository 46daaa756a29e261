// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// IB-style connection set-up between uiwarp peers (a uiwarp extension; docs/extensions.md,
// "IB-style connect"). A program that moves an RC QP INIT -> RTR with an address vector (the peer's
// GID and QPN, exchanged out of band, as ibv_rc_pingpong and perftest without -R do) gets an
// ordinary iWARP connection: one side's uiwarpd opens a TCP connection to the other's
// rendezvous port (uiwarpd.conf ib-connect-port) and sends an MPA Request (rev 2, RFC 6581)
// whose private data names both QPs; the other side's uiwarpd answers for the QP that waits
// for exactly that peer, and each side's socket goes to its QP. After the MPA exchange the
// wire carries plain iWARP.
//
// What both ends agree on, without I/O: GIDs as IP addresses, which end connects, and the
// private data of the Request.
#pragma once

#include <array>
#include <cstdint>
#include <netinet/in.h>
#include <optional>
#include <string>
#include <sys/socket.h>
#include <vector>

namespace uiwarp::ib {

using Gid = std::array<std::uint8_t, 16>;

// The port uiwarpd listens on for IB-style connects while a QP waits for its peer. 4791 is
// RoCEv2's (UDP) port: the same role, on TCP.
inline constexpr std::uint16_t kDefaultPort = 4791;

// A GID of a uiwarp port as the IP address it stands for (port 0): ::ffff:a.b.c.d is IPv4, any
// other non-link-local IPv6 address is itself. nullopt for a GID that is no address (the
// MAC-derived GID 0, fe80::/10, unspecified, multicast).
std::optional<sockaddr_storage> gid_address(const Gid& gid);
// The address as a GID of a uiwarp port (IPv4 as ::ffff:a.b.c.d).
Gid address_gid(const sockaddr_storage& a);
// Same IP address, whichever family spells it (::ffff:a.b.c.d == a.b.c.d); ports ignored.
bool same_host(const sockaddr_storage& a, const sockaddr_storage& b);

// Which end opens the TCP connection: the lower (GID, QPN) of the two. nullopt when both are
// the same endpoint (a QP connected to itself, or two QPs with one number on one host).
enum class Role : std::uint8_t { Initiator, Responder };
std::optional<Role> role(const Gid& local, std::uint32_t local_qpn, const Gid& peer,
                         std::uint32_t peer_qpn);

// The MPA Request's private data (RFC 5044 §7.1: opaque to MPA): "uiwarpIB", a version
// octet, three reserved octets, then the initiator's and the responder's QPN, big-endian.
// A responder that finds anything else there refuses the Request.
struct Request {
  std::uint32_t src_qpn = 0; // the initiator's QP
  std::uint32_t dst_qpn = 0; // the QP it wants on the responder's host
};
inline constexpr std::size_t kRequestLen = 20;
std::vector<std::uint8_t> encode(const Request& r);
std::optional<Request> decode(const std::uint8_t* p, std::size_t n);

std::string qpn_string(std::uint32_t qpn); // "0x1a2b3c", as ibv_rc_pingpong prints QPNs

} // namespace uiwarp::ib
