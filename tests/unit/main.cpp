// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#define UIWARP_CATCH_MAIN
#include "catch_compat.hpp"
