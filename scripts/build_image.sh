#!/usr/bin/env bash
# Build the project's own Dockerfile with podman, where Docker Hub cannot be reached, and print the
# image's name on stdout (everything else goes to stderr).
#
# Idempotent: installs podman, runc and debootstrap from Debian when missing; makes the base image
# once (Debian bookworm + Python 3.11, as in python:3.11-slim-bookworm, by debootstrap from the Debian
# mirror) and reuses it while the recipe and this machine's CA bundle are unchanged; then builds the
# Dockerfile on it (podman's layer cache makes a rebuild of unchanged sources take seconds).
# The base carries this machine's CA bundle and a pip.conf naming it, so pip inside the build reaches
# PyPI through the TLS proxy this machine uses; the image gets them from the base, nothing else of it.
#
# Usage: scripts/build_image.sh                   (as root: debootstrap and rootful podman)
#   IMAGE=name:tag     the image to build (default localhost/compacting-proxy:latest)
#   BASE_IMAGE=...     the base to build on (default localhost/pybase:3.11; made here if missing)
#   DEBIAN_MIRROR=...  for debootstrap (default: the Debian archive apt already uses on this machine,
#                      read from its sources lists, as a user's own mirror would be)
# Run it the way the script builds it (scripts/containers.conf: runc, no default ulimits):
#   CONTAINERS_CONF=scripts/containers.conf podman run --rm --network host \
#     -e COMPACT_UPSTREAM_URL=http://127.0.0.1:11434/v1 localhost/compacting-proxy:latest
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
    exec sudo --preserve-env=IMAGE,BASE_IMAGE,DEBIAN_MIRROR,CONTAINERS_CONF "$0" "$@"
fi

IMAGE=${IMAGE:-localhost/compacting-proxy:latest}
BASE_IMAGE=${BASE_IMAGE:-localhost/pybase:3.11}
# The archive apt uses here: the first `deb` source (one-line or deb822) for the main archive, not
# its -security or -updates companions.
apt_mirror() {
    {
        grep -hsE '^[[:space:]]*deb[[:space:]]' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
            | sed -E 's/^[[:space:]]*deb[[:space:]]+(\[[^]]*\][[:space:]]+)?([^[:space:]]+).*/\2/'
        grep -hsiE '^URIs:' /etc/apt/sources.list.d/*.sources | sed -E 's/^URIs:[[:space:]]*//I' | tr ' ' '\n'
    } | grep -E '^(https?|file)://' | grep -vE -- '-security/?$|/debian-security' | head -n1
}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-$(apt_mirror || true)}
if [ -z "$DEBIAN_MIRROR" ]; then
    echo "build_image: no Debian archive in apt's sources lists; set DEBIAN_MIRROR=<archive URL>" >&2
    exit 2
fi
CA_BUNDLE=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}
export CONTAINERS_CONF=${CONTAINERS_CONF:-$PWD/scripts/containers.conf}
say() { echo "build_image: $*" >&2; }

missing=()
for tool in podman runc debootstrap; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]} (Debian)"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc debootstrap >&2
fi

# One build at a time on this machine: concurrent runs would both make the base.
mkdir -p /var/lock
exec 9>/var/lock/compacting-proxy-build-image.lock
flock 9

# The base is remade when its recipe (this block) or the CA bundle changes.
RECIPE="bookworm minbase python3 python3-venv python3-pip; /usr/local/bin/python; CA; pip.conf cert"
FINGERPRINT=$({ echo "$RECIPE"; cat "$CA_BUNDLE"; } | sha256sum | cut -c1-16)
LABEL=org.compacting-proxy.base-fingerprint
have=$(podman image inspect --format "{{index .Labels \"$LABEL\"}}" "$BASE_IMAGE" 2>/dev/null || true)
if [ "$have" != "$FINGERPRINT" ]; then
    say "making $BASE_IMAGE with debootstrap (two or three minutes)"
    started=$SECONDS
    root=$(mktemp -d /var/tmp/pybase.XXXXXX)
    trap 'rm -rf "$root"' EXIT
    debootstrap --variant=minbase --include=python3,python3-venv,python3-pip \
        bookworm "$root" "$DEBIAN_MIRROR" >&2
    ln -sf /usr/bin/python3 "$root/usr/local/bin/python"
    cp "$CA_BUNDLE" "$root/etc/ssl/certs/ca-certificates.crt"
    printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >"$root/etc/pip.conf"
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    tar -C "$root" -c . | podman import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'CMD ["python3"]' \
        --change "LABEL $LABEL=$FINGERPRINT" \
        - "$BASE_IMAGE" >&2
    rm -rf "$root"
    trap - EXIT
    say "made $BASE_IMAGE in $((SECONDS - started)) s"
fi

started=$SECONDS
# --format docker keeps HEALTHCHECK (OCI images have no field for it); host network: no bridges here.
podman build --format docker --network host --build-arg "PYTHON_IMAGE=$BASE_IMAGE" \
    --tag "$IMAGE" --file Dockerfile . >&2
say "built $IMAGE in $((SECONDS - started)) s"
# Untagged leftovers of earlier builds on this base (layer cache of older sources), after a day.
podman image prune --force --filter "label=$LABEL" --filter until=24h >/dev/null
echo "$IMAGE"
