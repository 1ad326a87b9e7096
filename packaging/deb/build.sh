#!/usr/bin/env bash
# Builds the Debian package of Warden from a binary built beforehand (for operators:
# `cargo build --profile dist -p warden-cli`, then
# `packaging/deb/build.sh target/dist/warden OUTDIR`), with dpkg-deb alone:
#
#   /usr/bin/warden
#   /lib/systemd/system/warden.service, warden-worker.service  (packaging/systemd, ExecStart
#                                                               pointed at /usr/bin/warden)
#   /usr/share/doc/warden/   README.md, docs/*.md, copyright, changelog.Debian.gz
#   /etc/warden/env          the secrets file the units read (mode 0600, a conffile: kept on
#                            upgrade and removal, deleted on purge)
#
# The maintainer scripts create the `warden` system user and group (home /var/lib/warden, no
# shell) and reload systemd; nothing is enabled or started: the operator fills /etc/warden/env
# and runs `systemctl enable --now warden` (docs/operations.md). Prints the .deb's path.
set -euo pipefail
cd "$(dirname "$0")/../.."
binary="${1:?usage: build.sh PATH-TO-WARDEN OUTDIR}"
out="${2:?usage: build.sh PATH-TO-WARDEN OUTDIR}"
[ -x "$binary" ] || { echo "build.sh: $binary is not an executable" >&2; exit 2; }

version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)"
[ -n "$version" ] || { echo "build.sh: no version in Cargo.toml" >&2; exit 2; }
arch="$(dpkg --print-architecture)"
root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT

install -D -m 0755 "$binary" "$root/usr/bin/warden"
for unit in packaging/systemd/*.service; do
  install -d "$root/lib/systemd/system"
  sed 's|/usr/local/bin/warden|/usr/bin/warden|' "$unit" > "$root/lib/systemd/system/$(basename "$unit")"
  chmod 0644 "$root/lib/systemd/system/$(basename "$unit")"
done
doc="$root/usr/share/doc/warden"
install -d "$doc/docs"
install -m 0644 README.md "$doc/"
install -m 0644 docs/*.md "$doc/docs/"
cat > "$doc/copyright" <<COPYRIGHT
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: warden
License: see the source repository's license
COPYRIGHT
printf 'warden (%s) unstable; urgency=medium\n\n  * Built from %s.\n\n -- Warden <warden@localhost>  %s\n' \
  "$version" "$(git rev-parse --short HEAD 2>/dev/null || echo 'a source tree')" \
  "$(date -R)" | gzip -9n > "$doc/changelog.Debian.gz"
install -d -m 0700 "$root/etc/warden"
cat > "$root/etc/warden/env" <<'ENVFILE'
# Secrets of the warden units (systemd EnvironmentFile): WARDEN_MODEL, the model's key,
# WARDEN_API_TOKENS, the interfaces' tokens. Mode 0600, root's. See docs/operations.md.
ENVFILE
chmod 0600 "$root/etc/warden/env"

install -d "$root/DEBIAN"
size="$(du -sk --exclude=DEBIAN "$root" | cut -f1)"
cat > "$root/DEBIAN/control" <<CONTROL
Package: warden
Version: $version
Architecture: $arch
Maintainer: Warden <warden@localhost>
Installed-Size: $size
Depends: git, bash, ca-certificates
Suggests: runsc, bubblewrap
Section: devel
Priority: optional
Homepage: https://github.com/warden
Description: run AI coding agents on your repositories, safely
 Warden pins repositories to exact commits, runs an agent loop whose every tool
 call executes in an isolated sandbox, checks the answers' citations and the
 changes' checks, and publishes nothing without an approval bound to a hash.
CONTROL
echo "/etc/warden/env" > "$root/DEBIAN/conffiles"
cat > "$root/DEBIAN/postinst" <<'POSTINST'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
  if ! getent group warden >/dev/null; then
    addgroup --system warden >/dev/null 2>&1 || groupadd --system warden
  fi
  if ! getent passwd warden >/dev/null; then
    adduser --system --ingroup warden --home /var/lib/warden --no-create-home \
      --shell /usr/sbin/nologin warden >/dev/null 2>&1 \
      || useradd --system --gid warden --home-dir /var/lib/warden --shell /usr/sbin/nologin warden
  fi
  if [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null 2>&1 || true
  fi
fi
exit 0
POSTINST
cat > "$root/DEBIAN/postrm" <<'POSTRM'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload >/dev/null 2>&1 || true
fi
exit 0
POSTRM
cat > "$root/DEBIAN/prerm" <<'PRERM'
#!/bin/sh
set -e
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
  systemctl stop warden.service warden-worker.service >/dev/null 2>&1 || true
fi
exit 0
PRERM
chmod 0755 "$root/DEBIAN/postinst" "$root/DEBIAN/postrm" "$root/DEBIAN/prerm"

mkdir -p "$out"
deb="$out/warden_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >&2
echo "$deb"
