// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// A main() for fuzz targets built without libFuzzer (any compiler): runs
// LLVMFuzzerTestOneInput once over every file named on the command line or
// found in a directory named there, so the seed corpus and saved crash
// reproducers are a plain regression test. A failed invariant aborts.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace fs = std::filesystem;

namespace {

bool iwarp_replay_verbose() {
  const char* e = std::getenv("IWARP_FUZZ_VERBOSE");
  return e && *e && *e != '0';
}

bool run_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", p.c_str());
    return false;
  }
  if (iwarp_replay_verbose()) std::fprintf(stderr, "%s\n", p.c_str());
  std::vector<char> buf((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::uint8_t> data(buf.begin(), buf.end()); // exact size: ASan sees overreads
  LLVMFuzzerTestOneInput(data.data(), data.size());
  return true;
}

} // namespace

int main(int argc, char** argv) {
  std::size_t runs = 0;
  for (int i = 1; i < argc; ++i) {
    fs::path arg(argv[i]);
    std::error_code ec;
    if (fs::is_directory(arg, ec)) {
      std::vector<fs::path> files;
      for (const auto& e : fs::recursive_directory_iterator(arg))
        if (e.is_regular_file()) files.push_back(e.path());
      std::sort(files.begin(), files.end());
      for (const fs::path& f : files) {
        if (!run_file(f)) return 1;
        ++runs;
      }
    } else {
      if (!run_file(arg)) return 1;
      ++runs;
    }
  }
  std::printf("%s: %zu inputs replayed\n", argc > 0 ? argv[0] : "replay", runs);
  if (runs == 0) {
    std::fprintf(stderr, "no inputs found\n");
    return 1;
  }
  return 0;
}
