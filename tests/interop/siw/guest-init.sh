#!/bin/sh
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# /init of the siw reference guest (busybox sh). Loads siw (the variant named by siwvariant= on
# the kernel command line), brings up eth0 as 10.0.2.15/24 and siw0 on it, prints SIW-READY, then
# runs the commands the host writes to the serial console, one per line, in this shell (so that
# background jobs started by one line can be waited for by a later one). The console does not
# echo: what the host reads back is only what the commands print.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
arg() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" /proc/cmdline; }
variant=$(arg siwvariant)
for m in $(cat /etc/siw-modules); do
  case $m in */siw.ko) [ -z "$variant" ] || [ "$variant" = stock ] || m=${m%/siw.ko}/siw-$variant.ko ;; esac
  insmod "$m" || echo "insmod $m failed"
done
ip link set lo up
ip link set eth0 up
ip addr add 10.0.2.15/24 dev eth0
ip route add default via 10.0.2.2
rdma link add siw0 type siw netdev eth0 || echo "SIW-FAILED: rdma link add"
stty -echo 2>/dev/null
echo "SIW-READY variant=${variant:-stock} uptime=$(cut -d' ' -f1 /proc/uptime)s"
while IFS= read -r line; do eval "$line"; done
poweroff -f
