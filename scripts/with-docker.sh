#!/usr/bin/env bash
# Run a command with a docker daemon: `scripts/with-docker.sh CMD ARGS...`.
#
# - A daemon that answers `docker info` is used as it is.
# - Otherwise, as root on Debian/Ubuntu, docker.io (and docker-compose, Compose v1) are
#   installed with apt when missing, and `dockerd --bridge=none --iptables=false` (no bridge
#   network, no firewall changes: containers use the host network) is started for the run
#   and stopped by its pid afterwards, whatever the command's outcome.
# - Anywhere else without a daemon it fails with a message saying what is missing.
set -euo pipefail

log() { echo "with-docker: $*" >&2; }
fail() {
    echo "with-docker: error: $*" >&2
    exit 2
}

[[ $# -gt 0 ]] || fail "usage: $0 COMMAND [ARGS...]"

dockerd_pid=""
dockerd_log=""
stop_dockerd() {
    [[ -n $dockerd_pid ]] || return 0
    log "stopping dockerd (pid $dockerd_pid)"
    kill -TERM "$dockerd_pid" 2>/dev/null || true
    for _ in $(seq 1 60); do
        kill -0 "$dockerd_pid" 2>/dev/null || break
        sleep 0.5
    done
    if kill -0 "$dockerd_pid" 2>/dev/null; then
        log "dockerd did not stop in 30 s: SIGKILL"
        kill -KILL "$dockerd_pid" 2>/dev/null || true
    fi
    wait "$dockerd_pid" 2>/dev/null || true
    rm -f "$dockerd_log"
}
trap stop_dockerd EXIT

daemon_answers() { command -v docker >/dev/null && docker info >/dev/null 2>&1; }

can_apt() { [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; }

apt_install() {
    log "installing $* with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null || fail "apt-get update failed"
    apt-get install -y -qq "$@" >/dev/null || fail "apt-get install $* failed"
}

if daemon_answers; then
    log "using the running docker daemon ($(docker version --format '{{.Server.Version}}'))"
else
    if ! command -v dockerd >/dev/null || ! command -v docker >/dev/null; then
        can_apt || fail "no docker daemon answers and docker is not installed; install docker" \
            "(or run as root on Debian/Ubuntu, where this script installs docker.io)"
        apt_install docker.io
    fi
    if pgrep -x dockerd >/dev/null; then
        fail "a dockerd process runs but \`docker info\` fails (permissions? DOCKER_HOST?):" \
            "$(docker info 2>&1 | tail -3)"
    fi
    [[ $(id -u) -eq 0 ]] || fail "no docker daemon answers, and starting dockerd needs root"
    dockerd_log=$(mktemp /tmp/with-docker-dockerd.XXXXXX.log)
    log "starting dockerd --bridge=none --iptables=false (log: $dockerd_log)"
    dockerd --bridge=none --iptables=false >"$dockerd_log" 2>&1 &
    dockerd_pid=$!
    for _ in $(seq 1 120); do
        daemon_answers && break
        if ! kill -0 "$dockerd_pid" 2>/dev/null; then
            tail -20 "$dockerd_log" >&2
            dockerd_pid=""
            fail "dockerd exited during start (its log is above)"
        fi
        sleep 0.5
    done
    daemon_answers || {
        tail -20 "$dockerd_log" >&2
        fail "dockerd did not answer within 60 s (its log is above)"
    }
    log "dockerd $(docker version --format '{{.Server.Version}}') ready (pid $dockerd_pid)"
fi

if ! command -v docker-compose >/dev/null && can_apt; then
    apt_install docker-compose
fi
if ! command -v docker-compose >/dev/null && ! docker compose version >/dev/null 2>&1; then
    fail "no compose implementation: install docker-compose or the Compose v2 plugin"
fi

status=0
"$@" || status=$?
exit "$status"
