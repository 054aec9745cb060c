#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs what the tests need (Debian
# and PyPI packages; idempotent and quick when present), then runs pytest.
# Extra arguments go to pytest, e.g. `bash tests/run.sh -k render`; `--fast` first runs only
# what needs no root daemon (no Slurm testbed, Apptainer or sshd).
#
# The tests run in parallel (pytest-xdist, --dist loadgroup, the longest chains handed out
# first: tests/scheduling.py): the fast tier on one worker per core and one more (its tests wait
# for their processes at times: 7.5 instead of 8.2 minutes on 2 cores); the whole suite on six
# more than cores, one for each group of daemon tests (the testbed's four, Apptainer's, sshd's),
# which mostly wait for Slurm, a build or a login while the other workers use the cores.
# `-n 0` among the extra arguments runs everything in this one process instead.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1
# Compiled bytecode goes to one cache folder outside the tree, and is written even where the
# environment says not to (PYTHONDONTWRITEBYTECODE): else each worker rewrites the tests' asserts
# and every process compiles this package from source again (~10 s of CPU per worker for the
# collection alone). Outside the tree, so no __pycache__ lands in a folder DVC hashes.
export PYTHONPYCACHEPREFIX="${PYTHONPYCACHEPREFIX:-${XDG_CACHE_HOME:-$HOME/.cache}/orchestrator-tests/pycache}"
unset PYTHONDONTWRITEBYTECODE
# The scripts folder of the Python that runs the tests first on PATH, as an activated venv has it:
# `dvc`, `orchestrator` and `python` in the tests' subprocesses and their Slurm jobs are then this
# Python's. Under pyenv they were its shims, each a bash script that spent ~40 processes and ~0.1 s
# of CPU finding the interpreter (about a thousand times a run), and that could pick another Python
# in a folder with a .python-version.
PATH="$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"
export PATH

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
workers="$((cores + 6))"
if [ "${1:-}" = --fast ]; then
  shift
  selection=(-m "not slurm and not apptainer and not ssh")
  workers="$((cores + 1))"
fi

# pip install (editable, with the extras) unless this tree is what Python imports already, with
# this pyproject.toml's dependencies: pip's resolver alone takes ~25 s on 2 cores when nothing is
# missing. The stamp is the installed tree's path and pyproject.toml's hash. Another clone of the
# same pyproject.toml (a worktree, a clean clone) into the same Python needs no resolver: its
# dependencies are there, so only the editable install moves to this tree (~1 s instead of ~25).
stamp_dir="${XDG_CACHE_HOME:-$HOME/.cache}/orchestrator-tests"
stamp="$stamp_dir/installed-$(printf '%s' "$PWD" | sha256sum | cut -c1-16)"
wanted="$(sha256sum pyproject.toml | cut -d' ' -f1)"
here="$(cd / && python3 -c 'import orchestrator, os; print(os.path.dirname(os.path.dirname(orchestrator.__file__)))' 2>/dev/null)" || here=""
if [ "$here" != "$PWD" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
  deps_stamp="$stamp_dir/dependencies-$(python3 -c 'import sys; print(sys.prefix)' | sha256sum | cut -c1-16)"
  if [ "$(cat "$deps_stamp" 2>/dev/null)" = "$wanted" ]; then
    # The test extra brings the build backend (hatchling, editables), so the move needs no isolated
    # build environment: pip would otherwise install them into a fresh one each time (~12 s of ~13).
    isolation=()
    python3 -c 'import hatchling, editables' 2>/dev/null && isolation=(--no-build-isolation)
    python3 -m pip install -q --no-deps "${isolation[@]}" -e .
  else
    python3 -m pip install -q -e '.[train,test,docs]'
  fi
  # A home that cannot be written to only costs the next run its install again.
  { mkdir -p "$stamp_dir" && printf '%s\n' "$wanted" >"$stamp" && printf '%s\n' "$wanted" >"$deps_stamp"; } 2>/dev/null || true
fi
# A tree new to the cache (a fresh clone) has no compiled tests: every worker would rewrite
# the asserts of all ~170 test modules itself (~7 s of CPU each, 8 workers at once). Two
# collections beforehand, half the tree each, compile them once (~5 s on 2 cores).
if [ ! -d "$PYTHONPYCACHEPREFIX$PWD/tests" ]; then
  python3 -m pytest -q --collect-only -p no:cacheprovider tests/unit >/dev/null 2>&1 &
  python3 -m pytest -q --collect-only -p no:cacheprovider tests/integration >/dev/null 2>&1 || true
  wait || true
fi
exec python3 -m pytest -n "$workers" --dist loadgroup --no-loadscope-reorder "${selection[@]}" "$@"
