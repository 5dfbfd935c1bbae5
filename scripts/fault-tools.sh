#!/usr/bin/env bash
# Make sure the fault suite (tests/faults) has its tools: ip and tc (iproute2), iptables.
#
# As root on Debian/Ubuntu, the missing packages are installed with apt; elsewhere a line
# says what is missing and the suite's rounds skip (or fail, with $CI set) saying the same.
set -euo pipefail

missing=()
command -v ip >/dev/null || missing+=(iproute2)
command -v tc >/dev/null || missing+=(iproute2)
command -v iptables >/dev/null || missing+=(iptables)
[[ ${#missing[@]} -eq 0 ]] && exit 0
read -r -a packages <<<"$(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')"
if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    echo "fault-tools: installing ${packages[*]} with apt"
    apt-get install -y -q "${packages[@]}" >/dev/null ||
        { apt-get update -q >/dev/null && apt-get install -y -q "${packages[@]}" >/dev/null; }
else
    echo "fault-tools: ${packages[*]} missing (not root with apt): the fault suite will skip" >&2
fi
