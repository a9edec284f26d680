#!/usr/bin/env bash
# Builds a small busybox root filesystem: the demo image of the quickstart
# and the image of the end-to-end tests.
#   usage: scripts/make-demo-rootfs.sh DIR
set -euo pipefail
dir=${1:?usage: make-demo-rootfs.sh DIR}
bb=$(command -v busybox || true)
if [ -z "$bb" ] || ! file -L "$bb" 2>/dev/null | grep -q 'statically linked'; then
  for cand in /bin/busybox /usr/bin/busybox; do
    [ -x "$cand" ] && bb=$cand && break
  done
fi
[ -n "$bb" ] || { echo "busybox not found: apt-get install busybox-static" >&2; exit 1; }
tmp="$dir.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp"/{bin,sbin,etc,tmp,root,home,proc,sys,dev,run,var/tmp,usr/bin,usr/sbin}
chmod 1777 "$tmp/tmp" "$tmp/var/tmp"
cp "$bb" "$tmp/bin/busybox"
for applet in $("$tmp/bin/busybox" --list); do
  [ "$applet" = busybox ] && continue
  ln -sf busybox "$tmp/bin/$applet"
done
cat > "$tmp/etc/passwd" <<'P'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
P
cat > "$tmp/etc/group" <<'G'
root:x:0:
nogroup:x:65534:
G
echo "burrow demo image (busybox)" > "$tmp/etc/motd"
rm -rf "$dir"
mv "$tmp" "$dir"
echo "built $dir"
