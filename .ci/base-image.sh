#!/usr/bin/env bash
# A stand-in for python:3.11-slim made from Debian packages, for machines that reach Debian and PyPI but no
# container registry (CI). Prints the image's name (NAME:TAG) on stdout; everything else goes to stderr.
#
#   debootstrap (minbase: apt, dpkg, passwd's useradd) + Debian bookworm's python3 (3.11) + a venv at /opt/venv,
#   first on PATH, so `python`, `pip` and what pip installs resolve as in the official image.
#
# Cached twice, keyed by this script's own hash: the docker image itself when the engine still has it, else a
# tarball under /var/cache/zerocalc (kept across engine restarts on the same machine).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
key="$(sha256sum "$here/base-image.sh" | cut -c1-12)"
name="zerocalc-base:bookworm-$key"
cache="${ZEROCALC_BASE_CACHE:-/var/cache/zerocalc}"
tarball="$cache/base-bookworm-$key.tar"
path="/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

if docker image inspect "$name" >/dev/null 2>&1; then
  echo "base image $name: cached in the engine" >&2
  echo "$name"; exit 0
fi

if [ ! -s "$tarball" ]; then
  start=$(date +%s)
  # The mirror the machine's own apt uses (deb822 or one-line sources).
  mirror="$(cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null \
            | awk '/^URIs:/ {print $2} /^deb / {print ($2 ~ /^\[/ ? $3 : $2)}' | grep -v security | head -1 || true)"
  mirror="${mirror:-http://deb.debian.org/debian}"
  rootfs="$(mktemp -d /tmp/zerocalc-rootfs.XXXXXX)"
  trap 'rm -rf "$rootfs"' EXIT
  echo "base image $name: debootstrap bookworm from $mirror" >&2
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$rootfs" "$mirror" \
    >/tmp/zerocalc-debootstrap.log 2>&1 || { tail -20 /tmp/zerocalc-debootstrap.log >&2; exit 1; }
  # CAs this machine adds to Debian's (a TLS-inspecting egress proxy on CI): pip inside a build must trust them.
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$rootfs/usr/local/share/ca-certificates/"
    chroot "$rootfs" update-ca-certificates >/dev/null 2>&1
  fi
  chroot "$rootfs" python3 -m venv /opt/venv
  # As in the official image: no apt lists, no .deb cache, no docs, man pages or locales.
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/* "$rootfs"/usr/share/doc/* \
         "$rootfs"/usr/share/man/* "$rootfs"/usr/share/locale/* "$rootfs"/var/log/*
  chmod 755 "$rootfs"   # mktemp made it 0700: the image's / must let the unprivileged user through
  mkdir -p "$cache"
  tar --numeric-owner -C "$rootfs" -cf "$tarball.part" . && mv "$tarball.part" "$tarball"
  echo "base image $name: root file system built in $(( $(date +%s) - start )) s" >&2
fi

start=$(date +%s)
docker import --change "ENV PATH=$path" --change "ENV LANG=C.UTF-8" --change 'CMD ["python3"]' \
  "$tarball" "$name" >/dev/null
echo "base image $name: imported in $(( $(date +%s) - start )) s" >&2
echo "$name"
