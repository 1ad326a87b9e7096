#!/usr/bin/env bash
# Builds the Debian package (packaging/deb/build.sh) from the warden binary given as $1 and
# installs it for real: dpkg -i, then the binary answers, the `warden` user exists, the units
# as installed pass `systemd-analyze verify`, the secrets file is 0600 and root's; dpkg --purge
# then removes all of it. Runs as root (CI does). Leaves the system user, as Debian packages do.
set -euo pipefail
cd "$(dirname "$0")/.."
binary="${1:?usage: deb.sh PATH-TO-WARDEN}"
work="$(mktemp -d)"
trap 'rm -rf "$work"; dpkg --purge warden >/dev/null 2>&1 || true' EXIT
deb="$(bash packaging/deb/build.sh "$binary" "$work")"
grep -q "Package: warden" <<<"$(dpkg-deb --info "$deb")"
contents="$(dpkg-deb --contents "$deb")"
for path in ./usr/bin/warden ./lib/systemd/system/warden.service \
  ./lib/systemd/system/warden-worker.service ./etc/warden/env \
  ./usr/share/doc/warden/README.md ./usr/share/doc/warden/docs/operations.md; do
  grep -q " $path\$" <<<"$contents" || { echo "deb.sh: $path missing from $deb" >&2; exit 1; }
done
dpkg -i "$deb" >/dev/null
/usr/bin/warden --version
getent passwd warden >/dev/null || { echo "deb.sh: no warden user after install" >&2; exit 1; }
[ "$(stat -c '%a %U' /etc/warden/env)" = "600 root" ] || {
  echo "deb.sh: /etc/warden/env is $(stat -c '%a %U' /etc/warden/env), not 600 root" >&2; exit 1; }
for unit in warden.service warden-worker.service; do
  grep -q '^ExecStart=/usr/bin/warden ' "/lib/systemd/system/$unit"
  systemd-analyze verify "/lib/systemd/system/$unit"
done
dpkg --purge warden >/dev/null
if [ -e /usr/bin/warden ] || [ -e /lib/systemd/system/warden.service ] || [ -e /etc/warden/env ]; then
  echo "deb.sh: dpkg --purge left files behind" >&2
  exit 1
fi
echo "$(basename "$deb"): built, installed (binary, user, units verified, secrets file 0600), purged"
