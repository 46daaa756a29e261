// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Catch2's runner and main(), compiled once per build tree into uiwarp-catch-main: with Catch2 2
// this file carries the whole framework (about 20 s of the compiler's time), which each test
// program used to compile again.
#define UIWARP_CATCH_MAIN
#include "catch_compat.hpp"
