// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Catch2 for every test file, whichever major version the release ships: Debian 12 has Catch2 2
// (one header, catch2/catch.hpp, whose main CATCH_CONFIG_MAIN generates), Debian 13 and sid
// have Catch2 3 (catch2/catch_all.hpp and a compiled library, whose main is Catch::Session).
// The tests use what both offer: TEST_CASE, SECTION, REQUIRE/CHECK, STATIC_REQUIRE, INFO and
// GENERATE with its generators. Defining UIWARP_CATCH_MAIN first gives main(): only
// common/catch_main.cpp does, compiled once per tree into uiwarp-catch-main.
#pragma once

#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>
#ifdef UIWARP_CATCH_MAIN
int main(int argc, char* argv[]) { return Catch::Session().run(argc, argv); }
#endif
#else
#ifdef UIWARP_CATCH_MAIN
#define CATCH_CONFIG_MAIN
#endif
#include <catch2/catch.hpp>
#endif
