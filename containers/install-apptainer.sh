#!/usr/bin/env bash
# Install Apptainer on Debian 12 "bookworm" (run as root); idempotent.
#
# Bookworm has no apptainer (nor singularity) package. Debian unstable ("sid") has
# apptainer 1.4.5, built against a newer glibc than bookworm's. So:
#   * squashfs-tools uidmap patchelf debootstrap come from bookworm (apt-get install);
#   * apptainer and the three libraries it needs newer versions of (libc6,
#     libseccomp2, libsqlite3-0) are fetched from sid with `apt-get download`
#     through a *temporary* source list, lists dir and cache: the system's own apt
#     sources, lists and package cache are never touched;
#   * the apptainer .deb is unpacked into / (dpkg -x), the sid libraries into a
#     private folder ($PRIVATE/lib), and apptainer's ELF binaries are pointed at
#     that folder with patchelf (interpreter + DT_RPATH; nothing else on the system
#     sees sid's glibc). DT_RPATH, not the default DT_RUNPATH: apptainer re-executes
#     itself with LD_LIBRARY_PATH=/lib/<triplet> (to run unsquashfs when it unpacks a
#     SIF, e.g. for `Bootstrap: localimage`), and only DT_RPATH outranks that;
#   * /etc/apptainer/apptainer.conf gets `root default capabilities = file` (root in
#     a sandbox without the full capability set cannot exec otherwise), and
#     /etc/subuid, /etc/subgid get `root:100000:65536` for `apptainer build --fakeroot`.
#
# When `apptainer --version` already works (and this recipe's marker file is there)
# this only re-checks the two settings (a few milliseconds) and exits.
#
# Usage: containers/install-apptainer.sh [--force]
#   APPTAINER_PRIVATE   where the sid libraries go     (default /opt/apptainer-sid)
#   DEBIAN_MIRROR       the Debian registry             (default http://deb.debian.org/debian)
set -euo pipefail

PRIVATE=${APPTAINER_PRIVATE:-/opt/apptainer-sid}
MARKER_NAME=.installed-by-orchestrator-v2 # bump when the recipe changes: reinstalls once
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
CONF=/etc/apptainer/apptainer.conf
HOST_PACKAGES=(squashfs-tools uidmap patchelf debootstrap)
SID_LIBS=(libc6 libseccomp2 libsqlite3-0)
force=0
[ "${1:-}" = "--force" ] && force=1

say() { echo "install-apptainer: $*" >&2; }
die() { say "error: $*"; exit 1; }

settings() {
  # Idempotent: each line is added once; an existing capabilities line is replaced.
  if [ -f "$CONF" ] && ! grep -qx 'root default capabilities = file' "$CONF"; then
    sed -i -E 's/^[[:space:]]*root default capabilities[[:space:]]*=.*$/root default capabilities = file/' "$CONF"
    grep -qx 'root default capabilities = file' "$CONF" || echo 'root default capabilities = file' >>"$CONF"
    say "set 'root default capabilities = file' in $CONF"
  fi
  local f
  for f in /etc/subuid /etc/subgid; do
    if ! grep -qs '^root:' "$f"; then
      echo 'root:100000:65536' >>"$f"
      say "added root:100000:65536 to $f (for --fakeroot)"
    fi
  done
}

if [ "$(id -u)" != 0 ]; then
  if apptainer --version >/dev/null 2>&1; then
    say "$(apptainer --version) is installed (not root: settings not checked)"
    exit 0
  fi
  die "run as root (installs Debian packages into /)"
fi

if [ "$force" = 0 ] && version=$(apptainer --version 2>/dev/null) &&
  { [ -e "$PRIVATE/$MARKER_NAME" ] || [ ! -d "$PRIVATE" ]; }; then
  settings
  say "$version already installed"
  exit 0
fi

if ! command -v apt-get >/dev/null || ! command -v dpkg >/dev/null; then die "needs Debian's apt-get and dpkg"; fi
# shellcheck source=/dev/null
. /etc/os-release
[ "${VERSION_CODENAME:-}" = bookworm ] || say "warning: written for Debian bookworm, this is ${PRETTY_NAME:-unknown}"
case "$(dpkg --print-architecture)" in
  amd64) triplet=x86_64-linux-gnu loader=ld-linux-x86-64.so.2 ;;
  arm64) triplet=aarch64-linux-gnu loader=ld-linux-aarch64.so.1 ;;
  *) die "unsupported architecture $(dpkg --print-architecture)" ;;
esac

# 1. Host tools from bookworm (only the missing ones; apt-get update only if needed).
missing=()
for p in "${HOST_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  say "installing ${missing[*]} from $VERSION_CODENAME"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi

# 2. apptainer and its newer libraries from sid, through a throwaway apt configuration.
work=$(mktemp -d /tmp/install-apptainer.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs" "$work/x"
echo "deb [signed-by=$KEYRING] $MIRROR sid main" >"$work/sid.list"
apt_sid=(apt-get -q
  -o "Dir::Etc::SourceList=$work/sid.list" -o "Dir::Etc::SourceParts=/nonexistent"
  -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache"
  -o "Dir::Cache::pkgcache=" -o "Dir::Cache::srcpkgcache=" -o "APT::Get::List-Cleanup=false")
say "fetching the sid package lists (temporary, in $work)"
"${apt_sid[@]}" update >"$work/update.log" 2>&1 || { cat "$work/update.log" >&2; die "apt-get update of the temporary sid list failed"; }
(cd "$work/debs" && "${apt_sid[@]}" download apptainer "${SID_LIBS[@]}" >"$work/download.log" 2>&1) ||
  { cat "$work/download.log" >&2; die "apt-get download from sid failed"; }
ls "$work"/debs/*.deb >&2

# 3. Unpack: apptainer into /, the libraries into $PRIVATE/lib.
dpkg -x "$work"/debs/apptainer_*.deb /
lib="$PRIVATE/lib"
rm -rf "$PRIVATE.new" && mkdir -p "$PRIVATE.new/lib"
for p in "${SID_LIBS[@]}"; do
  dpkg -x "$work"/debs/"${p}"_*.deb "$work/x"
done
# Libraries sit in lib/<triplet> and usr/lib/<triplet>; the loader also in lib64 (a link).
for d in "$work/x/lib/$triplet" "$work/x/usr/lib/$triplet"; do
  [ -d "$d" ] && cp -a "$d"/. "$PRIVATE.new/lib/"
done
rm -rf "$PRIVATE.new/lib/gconv" "$PRIVATE.new/lib/audit"
[ -e "$PRIVATE.new/lib/$loader" ] || die "no $loader in the sid libc6 package"
rm -rf "$PRIVATE" && mv "$PRIVATE.new" "$PRIVATE"
# The private libraries find each other (libsqlite3 and libseccomp link against libc).
for f in "$lib"/libsqlite3.so.* "$lib"/libseccomp.so.*; do
  [ -L "$f" ] || patchelf --force-rpath --set-rpath "$lib" "$f"
done

# 4. Point every dynamically linked apptainer binary at the private loader and libraries.
patched=0
for f in /usr/bin/apptainer /usr/lib/"$triplet"/apptainer/bin/* /usr/libexec/apptainer/bin/*; do
  if [ ! -f "$f" ] || [ -L "$f" ]; then continue; fi
  head -c4 "$f" | grep -q 'ELF' || continue
  patchelf --print-interpreter "$f" >/dev/null 2>&1 || continue # static: nothing to do
  patchelf --set-interpreter "$lib/$loader" --force-rpath --set-rpath "$lib" "$f"
  patched=$((patched + 1))
done
((patched)) || die "found no apptainer binary to patch"

settings
version=$(apptainer --version) || die "apptainer was unpacked but does not run"
LD_LIBRARY_PATH=/lib/$triplet apptainer --version >/dev/null || die "apptainer does not run with LD_LIBRARY_PATH=/lib/$triplet"
touch "$PRIVATE/$MARKER_NAME"
say "$version installed ($patched binaries use $lib)"
