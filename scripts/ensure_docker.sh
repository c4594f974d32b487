#!/usr/bin/env bash
# Make a Docker engine answer on this machine, idempotently.
#
#   scripts/ensure_docker.sh          install docker.io if missing (root + apt-get only), start
#                                     dockerd in the background if nothing answers, wait for it
#   scripts/ensure_docker.sh stop     stop the dockerd THIS script started (and nothing else)
#
# Why a script: CI machines and dev VMs have no engine running and no image registry; the
# sandbox tests must run against a real engine. The pid of a dockerd we start is written to
# $STATE_DIR/dockerd.pid, so "stop" only ever stops what "start" started.
set -euo pipefail

STATE_DIR="${MTE_DOCKER_STATE_DIR:-/tmp/multiturn-envs-docker}"
PID_FILE="$STATE_DIR/dockerd.pid"
LOG_FILE="$STATE_DIR/dockerd.log"
WAIT_S="${MTE_DOCKER_WAIT_S:-60}"

answers() { docker info >/dev/null 2>&1; }

start() {
    if answers; then
        echo "ensure_docker: engine already answers; nothing to do"
        return 0
    fi
    if ! command -v dockerd >/dev/null 2>&1; then
        if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
            echo "ensure_docker: no dockerd and cannot install it (needs root and apt-get)" >&2
            return 1
        fi
        echo "ensure_docker: installing docker.io with apt-get"
        if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io >/dev/null; then
            apt-get update -q >/dev/null
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io >/dev/null
        fi
    fi
    if [ "$(id -u)" -ne 0 ]; then
        echo "ensure_docker: dockerd is installed but not answering, and starting it needs root" >&2
        return 1
    fi
    mkdir -p "$STATE_DIR"
    echo "ensure_docker: starting dockerd in the background (log: $LOG_FILE)"
    nohup dockerd >"$LOG_FILE" 2>&1 &
    echo $! >"$PID_FILE"
    for _ in $(seq "$WAIT_S"); do
        if answers; then
            echo "ensure_docker: engine answers (dockerd pid $(cat "$PID_FILE"))"
            return 0
        fi
        if ! kill -0 "$(cat "$PID_FILE")" 2>/dev/null; then
            echo "ensure_docker: dockerd exited; last log lines:" >&2
            tail -n 20 "$LOG_FILE" >&2
            rm -f "$PID_FILE"
            return 1
        fi
        sleep 1
    done
    echo "ensure_docker: engine did not answer within ${WAIT_S}s" >&2
    return 1
}

stop() {
    if [ ! -f "$PID_FILE" ]; then
        echo "ensure_docker: no dockerd started by this script; nothing to stop"
        return 0
    fi
    pid="$(cat "$PID_FILE")"
    if kill -0 "$pid" 2>/dev/null; then
        echo "ensure_docker: stopping dockerd pid $pid"
        kill -TERM "$pid"
        for _ in $(seq 30); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 1
        done
    fi
    rm -f "$PID_FILE"
}

case "${1:-start}" in
    start) start ;;
    stop) stop ;;
    *) echo "usage: $0 [start|stop]" >&2; exit 2 ;;
esac
