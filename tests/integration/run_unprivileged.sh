#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# run_unprivileged.sh CMD...: runs CMD as uid/gid 65534 (nobody) when started as root, else as
# is. Exits 77 (ctest: skipped) if that is not possible, e.g. the build tree is not readable by
# nobody.
set -u
if [[ $(id -u) != 0 ]]; then exec "$@"; fi
command -v setpriv >/dev/null || { echo "SKIP: no setpriv"; exit 77; }
as_nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups)
for a in "$@"; do
  if [[ $a == /* && -e $a ]] && ! "${as_nobody[@]}" test -r "$a"; then
    echo "SKIP: $a is not readable by uid 65534"
    exit 77
  fi
done
exec "${as_nobody[@]}" env -u XDG_RUNTIME_DIR -u UIWARP_STATE_DIR HOME=/ "$@"
