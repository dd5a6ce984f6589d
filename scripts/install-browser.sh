#!/usr/bin/env bash
# Install Debian's chromium and the fonts the report's pages need for the headless-browser
# tests (tests/report/test_*_browser.py): Noto CJK and Noto Color Emoji, without which
# Japanese and emoji tokens are drawn as empty boxes. Idempotent: installs only what is missing.
set -euo pipefail

PACKAGES=(chromium fonts-dejavu-core fonts-noto-cjk fonts-noto-color-emoji)
missing=()
for package in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$package")
    fi
done
if [ "${#missing[@]}" -eq 0 ]; then
    echo "chromium and fonts already installed: $(/usr/bin/chromium --version 2>/dev/null || echo /usr/bin/chromium)"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
/usr/bin/chromium --version
