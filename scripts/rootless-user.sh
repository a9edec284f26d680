#!/usr/bin/env bash
# The unprivileged user the rootless test runs use (run as root): created
# once, as Debian's useradd creates any user, with a home and subordinate id
# ranges in /etc/subuid and /etc/subgid (the distribution's defaults; nothing
# else is set up for it). Prints its name. BURROW_TEST_USER names another.
set -euo pipefail
user="${BURROW_TEST_USER:-burrow-rootless}"
if ! id "$user" >/dev/null 2>&1; then
  useradd --create-home --shell /bin/bash "$user" >&2
fi
# useradd gives a new user ranges where login.defs says so (Debian's does);
# an older user may lack them.
for f in subuid subgid; do
  if ! grep -q "^$user:" "/etc/$f" 2>/dev/null; then
    last=$(awk -F: '{ e = $2 + $3; if (e > m) m = e } END { print (m > 100000 ? m : 100000) }' "/etc/$f" 2>/dev/null || echo 100000)
    echo "$user:$last:65536" >>"/etc/$f"
  fi
done
# The user runs the test binaries of this checkout and reads its images:
# every directory above it must be searchable by others (a checkout under a
# 0700 home or work directory is not). Only the search bit is added, and
# each change is said.
dir=$(cd "$(dirname "$0")/.." && pwd)
while [ "$dir" != / ]; do
  if ! runuser -u "$user" -- test -x "$dir"; then
    echo "rootless-user.sh: chmod o+x $dir (so that $user reaches the checkout)" >&2
    chmod o+x "$dir"
  fi
  dir=$(dirname "$dir")
done
echo "$user"
