#!/usr/bin/env bash
# Install Debian's Chromium for the dashboard's browser test (tests/dashboard/test_browser.py).
# Playwright drives it via executable_path; we never run `playwright install`, so no browser
# is downloaded from anywhere but the distribution's own package repository.
# Idempotent: does nothing when /usr/bin/chromium already exists.
set -euo pipefail

if [ -x /usr/bin/chromium ]; then
    echo "chromium already installed: $(/usr/bin/chromium --version 2>/dev/null || echo /usr/bin/chromium)"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO="sudo"
    else
        echo "error: installing chromium needs root (apt-get); run this script as root or install sudo" >&2
        exit 1
    fi
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends chromium fonts-dejavu-core
/usr/bin/chromium --version
