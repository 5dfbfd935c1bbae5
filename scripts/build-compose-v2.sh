#!/usr/bin/env bash
# Build the Docker Compose v2 CLI plugin from its Go module, for machines whose package
# manager has only Compose v1 (Debian bookworm ships docker-compose 1.29.2), so that
# `make test-docker` checks the compose files with both. Usage:
#   scripts/build-compose-v2.sh VERSION
# Installs ~/.docker/cli-plugins/docker-compose; does nothing when `docker compose` works.
set -euo pipefail
version=${1:?usage: $0 VERSION (e.g. v2.29.7)}
module=github.com/docker/compose/v2
plugin_dir=${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins

if docker compose version >/dev/null 2>&1; then
    echo "build-compose-v2: $(docker compose version) is already installed"
    exit 0
fi
command -v go >/dev/null || {
    echo "build-compose-v2: error: building Compose v2 needs the Go toolchain" >&2
    exit 2
}
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}
echo "build-compose-v2: building $module@$version (a few minutes the first time)"
source_dir=$(go mod download -json "$module@$version" |
    python3 -c 'import json, sys; info = json.load(sys.stdin); print(info.get("Dir") or "")')
[[ -n $source_dir ]] || {
    echo "build-compose-v2: error: go mod download $module@$version failed" >&2
    exit 2
}
mkdir -p "$plugin_dir"
tmp=$(mktemp "$plugin_dir/.docker-compose.XXXXXX")
trap 'rm -f "$tmp"' EXIT
(cd "$source_dir" && CGO_ENABLED=0 go build -trimpath \
    -ldflags "-w -X $module/internal.Version=$version" -o "$tmp" ./cmd)
chmod 755 "$tmp"
mv "$tmp" "$plugin_dir/docker-compose"
echo "build-compose-v2: installed $plugin_dir/docker-compose"
