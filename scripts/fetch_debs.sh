#!/usr/bin/env bash
# Downloads the Debian packages scripts/gpu_machine.sh unpacks on a machine without a registry.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .debs
cd .debs
apt-get download libtomlplusplus-dev libtomlplusplus3 libxxhash-dev libsqlite3-dev
