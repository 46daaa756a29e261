#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# test_ops_layout.sh OPS_COUNT LIBIBVERBS: the provider's verbs_context_ops (verbs_abi.h, whose
# layout comes from rdma-core's history) has as many members as the libibverbs it was built
# against reads. verbs_set_ops() copies each member of the provider's table, one load at each
# offset: the loads from its second argument, counted in the disassembly, are the members of
# that library's own table. A table one member short or long would shift every verb after it.
# x86_64 only (the disassembly); exit 77 elsewhere or without objdump.
source "$(dirname "$0")/../../scripts/lib/common.sh"
test_init
OPS_COUNT=$1
LIB=$2
[[ $(uname -m) == x86_64 ]] || { echo "SKIP: reads x86_64 code"; exit 77; }
command -v objdump >/dev/null || { echo "SKIP: objdump not found (binutils)"; exit 77; }
addr=$(objdump -T "$LIB" | awk '$NF == "verbs_set_ops" { print $1 }')
check "$LIB exports verbs_set_ops" test -n "$addr"
# From the function's start to the blank line that ends it; the ops pointer arrives in %rsi and
# may be copied once to another register first.
theirs=$(objdump -d --no-show-raw-insn "$LIB" --start-address="0x$addr" \
  --stop-address="$(printf '0x%x' $((0x$addr + 0x4000)))" |
  awk 'f && /^$/ { exit } /^[0-9a-f]+ <verbs_set_ops/ { f = 1 } f' |
  awk '
    /mov +%rsi,%r[a-z0-9]+$/ && !copy { copy = $NF; sub(/.*,%/, "", copy) }
    match($0, /mov +(0x[0-9a-f]+)?\(%r[a-z0-9]+\),/) {
      s = substr($0, RSTART, RLENGTH)
      base = s; sub(/.*\(%/, "", base); sub(/\).*/, "", base)
      off = s; sub(/^mov +/, "", off); sub(/\(.*/, "", off)
      if (base == "rsi" || base == copy) seen[base " " (off == "" ? "0x0" : off)] = 1
    }
    END { for (k in seen) { split(k, p, " "); n[p[1]]++ }
          for (b in n) if (n[b] > m) m = n[b]; print m + 0 }')
ours=$("$OPS_COUNT")
echo "verbs_context_ops: $ours members in verbs_abi.h, $theirs read by $LIB's verbs_set_ops"
expect_eq "verbs_context_ops has the members $(basename "$LIB") reads" "$theirs" "$ours"
finish
