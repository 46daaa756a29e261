// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Prints how many members the provider's verbs_context_ops has (verbs_abi.h, for the rdma-core
// release this tree is built against), for test_ops_layout.sh to compare with libibverbs itself.
#include "verbs_abi.h"

#include <cstdio>

int main() {
  std::printf("%zu\n", sizeof(verbs_context_ops) / sizeof(void*));
  return 0;
}
