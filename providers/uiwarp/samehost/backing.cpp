// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#include "backing.hpp"

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <string>
#include <sys/shm.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

namespace uiwarp::samehost {

namespace {

// Reads a number in `base` off the front of `s`, then the separator `sep` (0: none wanted).
template <class T> bool take(std::string_view& s, T& out, int base, char sep) {
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out, base);
  if (ec != std::errc{} || p == s.data()) return false;
  s.remove_prefix(static_cast<std::size_t>(p - s.data()));
  if (sep == 0) return true;
  if (s.empty() || s.front() != sep) return false;
  s.remove_prefix(1);
  return true;
}

void skip_spaces(std::string_view& s) {
  while (!s.empty() && s.front() == ' ')
    s.remove_prefix(1);
}

// The line of /proc/self/maps whose mapping holds `addr`, copied into `buf`; false if none.
bool line_of(std::uint64_t addr, std::string& buf, MapsLine& out) {
  std::FILE* f = std::fopen("/proc/self/maps", "re");
  if (!f) return false;
  char* line = nullptr;
  std::size_t cap = 0;
  bool found = false;
  for (ssize_t n; (n = ::getline(&line, &cap, f)) > 0;) {
    std::string_view l(line, static_cast<std::size_t>(n));
    if (l.back() == '\n') l.remove_suffix(1);
    const auto m = parse_maps_line(l);
    if (!m || addr >= m->end) continue;
    if (addr >= m->start) {
      buf.assign(l);
      out = *parse_maps_line(buf); // its path into buf, which outlives the line
      found = true;
    }
    break; // the lines are in address order: past addr, no later one holds it
  }
  std::free(line);
  std::fclose(f);
  return found;
}

// This process's descriptor of the file (dev, ino), or -1.
int descriptor_of(dev_t dev, std::uint64_t ino) {
  DIR* d = ::opendir("/proc/self/fd");
  if (!d) return -1;
  const int own = ::dirfd(d);
  int found = -1;
  while (const dirent* e = ::readdir(d)) {
    int fd = -1;
    std::string_view name(e->d_name);
    if (!take(name, fd, 10, 0) || !name.empty() || fd == own) continue;
    struct stat st {};
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_dev == dev && st.st_ino == ino) {
      found = fd;
      break;
    }
  }
  ::closedir(d);
  return found;
}

} // namespace

std::uint64_t ipc_namespace() {
  struct stat st {};
  return ::stat("/proc/self/ns/ipc", &st) == 0 ? st.st_ino : 0;
}

std::optional<MapsLine> parse_maps_line(std::string_view s) {
  // "start-end perms offset major:minor inode   path"
  MapsLine m;
  if (!take(s, m.start, 16, '-') || !take(s, m.end, 16, ' ')) return std::nullopt;
  if (s.size() < 5 || s[4] != ' ') return std::nullopt;
  m.shared = s[3] == 's';
  s.remove_prefix(5);
  if (!take(s, m.offset, 16, ' ') || !take(s, m.major, 16, ':') || !take(s, m.minor, 16, ' ') ||
      !take(s, m.inode, 10, 0))
    return std::nullopt;
  skip_spaces(s);
  m.path = s;
  if (m.end < m.start) return std::nullopt;
  return m;
}

bool is_sysv_path(std::string_view path) { return path.starts_with("/SYSV"); }

Backing find_backing(const void* addr, std::size_t len) {
  const auto a = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(addr));
  std::string buf;
  MapsLine m;
  // One mapping must hold the whole region, shared: a private one's stores are not the
  // object's, and two mappings may be two objects.
  if (len == 0 || !line_of(a, buf, m) || !m.shared || len > m.end - a) return {};
  Backing b;
  b.offset = m.offset + (a - m.start);
  if (is_sysv_path(m.path)) {
    shmid_ds ds{};
    const auto id = static_cast<int>(m.inode);
    if (::shmctl(id, IPC_STAT, &ds) != 0 || b.offset + len > ds.shm_segsz) return {};
    const std::uint64_t ns = ipc_namespace();
    if (ns == 0) return {};
    b.kind = BackingKind::SysV;
    b.id = static_cast<std::uint64_t>(id);
    b.dev = ns;
    return b;
  }
  const int fd = descriptor_of(makedev(m.major, m.minor), m.inode);
  if (fd < 0) return {}; // closed after mmap: nothing the peer can open
  // A file that cannot shrink, and that the peer may map writable. F_GET_SEALS is EINVAL for a
  // file without seals (a regular file, a tmpfs file opened by name): it could be truncated
  // under a copy.
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0 || !(seals & F_SEAL_SHRINK) || (seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)))
    return {};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || b.offset + len > static_cast<std::uint64_t>(st.st_size)) return {};
  b.kind = BackingKind::Memfd;
  b.id = static_cast<std::uint64_t>(fd);
  b.dev = st.st_dev;
  b.ino = st.st_ino;
  return b;
}

} // namespace uiwarp::samehost
