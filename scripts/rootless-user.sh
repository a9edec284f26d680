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
echo "$user"
