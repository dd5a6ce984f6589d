#!/usr/bin/env bash
# Install Debian's PostgreSQL server binaries (initdb, pg_ctl, postgres) for the store's tests
# (tests/store/, tests/support/postgres.py starts a throwaway server from them, on 127.0.0.1).
# Idempotent: installs only when no initdb is found. The package's own cluster is not used.
set -euo pipefail

if compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || command -v initdb >/dev/null; then
    found=$(compgen -G "/usr/lib/postgresql/*/bin/initdb" | sort -V | tail -n1 || true)
    echo "PostgreSQL already installed: ${found:-$(command -v initdb)}"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
# The server and its binaries, without the docs and extra clients.
$SUDO apt-get install -y -q --no-install-recommends postgresql
compgen -G "/usr/lib/postgresql/*/bin/initdb" | sort -V | tail -n1
