#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# Builds the siw reference guest: Debian 12's own kernel, siw.ko compiled out of tree from Debian's
# linux-source (Debian's 6.1 config has '# CONFIG_RDMA_SIW is not set'), and an initramfs with the
# stock rdma-core tools (rping, perftest) and iperf3. See tests/interop/siw/README.md.
#
#   build-guest.sh [VARIANT...]   build into $CACHE what the cache lacks (a cache hit takes ~1 s)
#
# Output in $CACHE: vmlinuz, initrd.cpio.gz (stock siw), siw-VARIANT.ko, key. Variants are siw.ko
# built with one of its compile-time policy constants changed; the harness appends the one it
# boots with to the initrd (siwvariant=NAME on the kernel command line picks it):
#   stock  siw as Debian's source has it (MPA rev 2, CRC only when the peer asks, no P2P, no GSO)
#   crc    mpa_crc_required = true: siw asks for CRC and drops a peer that answers without it
#   gso    try_gso = true: siw offers its private large-FPDU flag (MPA_RR_FLAG_GSO_EXP)
#   p2p    peer_to_peer = true: siw asks for RFC 6581 peer-to-peer mode as the initiator
#
# Exit status: 0 built or cached; 77 when the Debian packages cannot be fetched (no apt
# source reachable: the caller skips); 1 on any other failure.
# Env: UIWARP_SIW_CACHE (default /var/cache/uiwarp-siw), UIWARP_SIW_WORK (scratch, default
# /var/tmp/siw-work, ~800 MB while building), KVER (pin a kernel ABI, e.g. 6.1.0-56-amd64).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${UIWARP_SIW_CACHE:-/var/cache/uiwarp-siw}
W=${UIWARP_SIW_WORK:-/var/tmp/siw-work}
export DEBIAN_FRONTEND=noninteractive
t0=$(date +%s.%N)
el() { awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }

for tool in apt-get apt-cache dpkg-deb depmod modprobe cpio xz make gcc-12 strip; do
  command -v "$tool" >/dev/null || { echo "build-guest: missing $tool (scripts/deps installs it)"; exit 77; }
done

# The cache key: the kernel ABI, the versions of everything we take from Debian, and this
# harness's own build inputs (this script and the guest's init), so a change to either rebuilds.
apt-get update -qq >/dev/null 2>&1 || echo "build-guest: apt-get update failed; using the current package lists"
KVER=${KVER:-$(apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/.*Depends: linux-image-//p' | head -n 1)}
[[ -n $KVER ]] || { echo "build-guest: no linux-image-amd64 in the package lists"; exit 77; }
KS=${KVER%%.*}.$(echo "$KVER" | cut -d. -f2)   # 6.1
versions=$(apt-cache policy "linux-source-$KS" libibverbs1 perftest | awk '/^[^ ]/{p=$1} /Candidate/{printf "%s%s ", p, $2}')
KEY="$KVER $versions$(cat "$HERE/build-guest.sh" "$HERE/guest-init.sh" | sha256sum | cut -c1-16)"
declare -A patch=(
  [crc]='s/^const bool mpa_crc_required;/const bool mpa_crc_required = true;/'
  [gso]='s/^const bool try_gso;/const bool try_gso = true;/'
  [p2p]='s/^const bool peer_to_peer;/const bool peer_to_peer = true;/'
)
for v in "$@"; do [[ -n ${patch[$v]:-} ]] || { echo "build-guest: unknown variant '$v' (${!patch[*]})"; exit 1; }; done
mkdir -p "$CACHE" "$W"
cd "$W"

# siw-VARIANT.ko from the kept source and headers (in $W after a full build of this key).
build_variant() {
  local v=$1
  rm -rf "siw-$v" && cp -r siwsrc "siw-$v"
  sed -i "${patch[$v]}" "siw-$v/siw_main.c"
  # A patch that no longer matches the source must not silently build the stock module.
  if cmp -s siwsrc/siw_main.c "siw-$v/siw_main.c"; then echo "build-guest: variant $v: patch did not apply"; exit 1; fi
  make_siw "siw-$v"
  cp "siw-$v/siw.ko" "$CACHE/siw-$v.ko.new" && mv "$CACHE/siw-$v.ko.new" "$CACHE/siw-$v.ko"
  echo "build-guest: T variant $v $(el)s"
}
make_siw() {
  make -s -C "kb/usr/src/linux-headers-$KVER" M="$W/$1" CONFIG_RDMA_SIW=m modules -j"$(nproc)" 2>&1 |
    { grep -v -e BTF -e Skipping || true; }
  strip --strip-debug "$1/siw.ko"
}

if [[ -s $CACHE/initrd.cpio.gz && -s $CACHE/vmlinuz && "$(cat "$CACHE/key" 2>/dev/null)" == "$KEY" ]]; then
  missing=()
  for v in "$@"; do [[ -s $CACHE/siw-$v.ko ]] || missing+=("$v"); done
  if ((${#missing[@]} == 0)); then echo "build-guest: cache hit ($CACHE: $KEY)"; exit 0; fi
  if [[ "$(cat "$W/key" 2>/dev/null)" == "$KEY" && -d siwsrc && -d kb ]]; then
    for v in "${missing[@]}"; do build_variant "$v"; done
    exit 0
  fi
fi
echo "build-guest: building into $CACHE (key: $KEY)"
rm -rf debs kern kb siwsrc siw-* root "$CACHE"/siw-*.ko "$W/key"
mkdir -p debs kern kb siwsrc root

# Everything from Debian's archive, the same versions the host's apt sees. The guest's user
# space is the stock rdma-core (libsiw provider, rping, perftest) plus busybox for the shell.
guest_debs=(libc6 libgcc-s1 libstdc++6 libibverbs1 librdmacm1 ibverbs-providers rdmacm-utils perftest
  ibverbs-utils libibumad3 libpci3 libnl-3-200 libnl-route-3-200 iproute2 libmnl0 libbpf1 libelf1
  zlib1g libbsd0 libmd0 libcap2 libdb5.3 libselinux1 libpcre2-8-0 libtirpc3 libxtables12 libudev1
  libgssapi-krb5-2 libkrb5-3 libk5crypto3 libcom-err2 libkrb5support0 libkeyutils1
  iperf3 libiperf0 libsctp1 libssl3 busybox-static)
if ! (cd debs && apt-get download -qq -o APT::Sandbox::User=root "linux-image-$KVER" "linux-headers-$KVER" \
      "linux-headers-${KVER%-amd64}-common" "linux-kbuild-$KS" "linux-source-$KS" "${guest_debs[@]}" >/dev/null); then
  echo "build-guest: apt-get download failed (no Debian mirror reachable?)"
  exit 77
fi
echo "build-guest: T download $(el)s"

# siw.ko, out of tree, against Debian's headers with Debian's compiler (gcc-12, as
# CONFIG_CC_VERSION_TEXT says), so the module loads into the unmodified kernel.
dpkg-deb -x debs/linux-image-"${KVER}"_*.deb kern
for d in debs/linux-headers-*.deb debs/linux-kbuild-*.deb; do dpkg-deb -x "$d" kb; done
sed -i "s#include /usr/src/#include $W/kb/usr/src/#" "kb/usr/src/linux-headers-$KVER/Makefile"
dpkg-deb --fsys-tarfile debs/linux-source-*.deb | tar -xO --wildcards './usr/src/linux-source-*.tar.xz' |
  xz -dc | tar -x -C siwsrc --strip-components=5 --wildcards 'linux-source-*/drivers/infiniband/sw/siw/*'
echo "build-guest: T siw source $(el)s"
cp -r siwsrc siw-stock
make_siw siw-stock
M=kern/lib/modules/$KVER
mkdir -p "$M/updates"
cp siw-stock/siw.ko "$M/updates/siw.ko"
depmod -b kern "$KVER"
echo "build-guest: T siw.ko $(el)s"

for d in debs/*.deb; do case $d in *linux-*) ;; *) dpkg-deb -x "$d" root ;; esac; done
rm -rf root/usr/share/{doc,man,locale,i18n,zoneinfo,lintian,info} root/usr/lib/x86_64-linux-gnu/gconv
mkdir -p root/{proc,sys,dev,tmp,run,root,etc}
# nobody (65534): a user without CAP_SYS_PTRACE, for uiwarp's programs where Yama's ptrace_scope
# is to matter (Yama does not restrict root; scripts/bench-siw, ci.sh).
printf '%s\n' "root:x:0:0:root:/root:/bin/sh" "nobody:x:65534:65534:nobody:/nonexistent:/bin/sh" >root/etc/passwd
printf '%s\n' "root:x:0:" "nogroup:x:65534:" >root/etc/group
for a in $(root/bin/busybox --list); do
  [[ -e root/bin/$a || -e root/usr/bin/$a || -e root/sbin/$a || -e root/usr/sbin/$a ]] || ln -s busybox "root/bin/$a"
done
# Modules and their dependencies in insmod order (the guest has no modprobe configuration).
for m in virtio_pci virtio_net siw rdma_ucm ib_uverbs; do
  modprobe -d kern -S "$KVER" --show-depends "$m" | awk '$1=="insmod"{print $2}'
done | awk '!s[$0]++' | while read -r f; do
  r=${f#"$W"/kern}
  mkdir -p "root$(dirname "$r")"
  cp "$f" "root$r"
  echo "$r"
done >root/etc/siw-modules
grep -q '/siw.ko$' root/etc/siw-modules || { echo "build-guest: siw.ko is not in the module list"; exit 1; }
install -m 755 "$HERE/guest-init.sh" root/init
(cd root && find . | cpio -o -H newc --quiet | gzip -1) >"$CACHE/initrd.cpio.gz.new"
mv "$CACHE/initrd.cpio.gz.new" "$CACHE/initrd.cpio.gz"
cp "kern/boot/vmlinuz-$KVER" "$CACHE/vmlinuz"
echo "$KEY" >"$CACHE/key"
# Keep the siw source and the kernel headers ($W/kb, ~90 MB) for variants built later.
rm -rf debs kern root siw-stock
echo "$KEY" >"$W/key"
echo "build-guest: T stock guest $(el)s ($(du -sh "$CACHE" | cut -f1) in $CACHE)"
for v in "$@"; do build_variant "$v"; done
