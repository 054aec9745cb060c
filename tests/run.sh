#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs what the tests need (Debian
# and PyPI packages; idempotent and quick when present), then runs pytest.
# Extra arguments go to pytest, e.g. `bash tests/run.sh -k render`; `--fast` first runs only
# what needs no root daemon (no Slurm testbed, Apptainer or sshd).
#
# The tests run in parallel (pytest-xdist, --dist loadgroup): the fast tier on one worker per
# core; the whole suite on two more, because the tests of each daemon (one group each,
# tests/conftest.py) mostly wait for Slurm or a build while the others use the cores.
# `-n 0` among the extra arguments runs everything in this one process instead.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1

missing=()
command -v shellcheck >/dev/null || missing+=(shellcheck)
command -v rsync >/dev/null || missing+=(rsync)  # staged scripts run in the fuzz tests
if ((${#missing[@]})); then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "not installed: ${missing[*]}; the tests that need them will skip (fail under CI=true)" >&2
  fi
fi

cores="$(nproc)"
selection=()
workers="$((cores + 2))"
if [ "${1:-}" = --fast ]; then
  shift
  selection=(-m "not slurm and not apptainer and not ssh")
  workers="$cores"
fi

python3 -m pip install -q -e '.[train,test,docs]'
exec python3 -m pytest -n "$workers" --dist loadgroup "${selection[@]}" "$@"
