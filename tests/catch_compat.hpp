// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Catch2 for every test file, whichever major version the release ships: Debian 12 has Catch2 2
// (one header, catch2/catch.hpp, whose main CATCH_CONFIG_MAIN generates), Debian 13 and sid
// have Catch2 3 (catch2/catch_all.hpp and a compiled library, whose main is Catch::Session).
// The tests use what both offer: TEST_CASE, SECTION, REQUIRE/CHECK, STATIC_REQUIRE, INFO and
// GENERATE with its generators. main() comes from Catch2's own library (Catch2::Catch2WithMain).
#pragma once

#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>
#else
#include <catch2/catch.hpp>
#endif
