#!/usr/bin/env bash
# Downloads the Debian packages scripts/gpu_machine.sh unpacks on a machine without a registry, and the
# nvidia-cutlass wheel it installs CUTLASS's headers from.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .debs
cd .debs
apt-get download libtomlplusplus-dev libtomlplusplus3 libxxhash-dev libsqlite3-dev
# the Redis job queue (kfab bench --redis, kfab worker): hiredis to build with, and a server to run
# there (.deps/root/usr/bin/redis-server, its libraries beside it)
apt-get download libhiredis0.14 libhiredis-dev redis-server redis-tools libjemalloc2 liblzf1
# an epoch in a name ("5%3a7.0.15") is a character the device tool may not carry
for f in *%3a*; do if [ -e "$f" ]; then mv "$f" "${f//%3a/_}"; fi; done
# CUTLASS's headers, as the PyPI wheel (scripts/gpu_machine.sh unpacks it; carry .whl, which git ignores
# through .git/info/exclude: echo /.whl/ >> .git/info/exclude)
cd ..
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: -d .whl nvidia-cutlass==4.2.0.0
