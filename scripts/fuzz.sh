#!/usr/bin/env bash
# Run every fuzz test of the module (make fuzz), one after the other, each
# for FUZZTIME. `make test` runs only their seed corpora; this explores.
#
# Temporary directories go to a tmpfs (/dev/shm) when there is one: the
# snapshot fuzzers create and delete directories on every execution, and on
# ext4 that churn makes each inode allocation scan past the recently deleted
# ones; on one 2-core host FuzzReceiveSnapshot ran 74 executions in 21 s on
# ext4 and 88,189 in 15 s on tmpfs. Fuzzing tests parsing, not durability.
set -euo pipefail

usage() {
  cat <<USAGE
Usage: scripts/fuzz.sh [-l|--list] [NAME_REGEXP]

Runs each fuzz test whose name matches NAME_REGEXP (default: all) for
FUZZTIME (default 30s) with go test -fuzz. Stops at the first failure; Go
saves the failing input under the package's testdata/fuzz/ and prints the
command that replays it.

  -l, --list   print the fuzz tests, one "package name" per line, and exit

Environment: FUZZTIME (default 30s), FUZZ_PARALLEL (default: the number of
CPUs), TMPDIR (default /dev/shm when it is a tmpfs).
USAGE
}

list=false
pattern='.'
case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  -l|--list) list=true; pattern="${2:-.}" ;;
  -*) echo "fuzz: unknown flag $1" >&2; usage >&2; exit 2 ;;
  '') ;;
  *) pattern="$1" ;;
esac

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
fuzztime="${FUZZTIME:-30s}"
parallel="${FUZZ_PARALLEL:-$(nproc)}"
if [ -z "${TMPDIR:-}" ] && [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ]; then
  export TMPDIR=/dev/shm
fi

# "package name" for every func FuzzXxx(f *testing.F) in a _test.go file.
targets=$(git ls-files '*_test.go' | xargs grep -H '^func Fuzz[A-Za-z0-9_]*(f \*testing.F)' |
  sed -E 's|^(.*)/[^/]*_test\.go:func (Fuzz[A-Za-z0-9_]*)\(.*|./\1 \2|' | grep -E " ($pattern)" || true)
if [ -z "$targets" ]; then
  echo "fuzz: no fuzz test matches $pattern" >&2
  exit 2
fi
if $list; then
  echo "$targets"
  exit 0
fi

# fuzz_one runs one target. Go's fuzzing coordinator sometimes ends a run
# with "context deadline exceeded" and no failing input (seen on two
# targets of 27 in one sweep; neither came back in five reruns between
# them): that is the engine stopping, not a finding, so such a run is
# repeated once. A real failure writes its input under testdata/fuzz/ and
# says so.
fuzz_one() {
  local pkg=$1 name=$2 out
  out=$(mktemp)
  if go test -run '^$' -fuzz "^$name\$" -fuzztime "$fuzztime" -parallel "$parallel" "$pkg" 2>&1 | tee "$out"; then
    rm -f "$out"
    return 0
  fi
  if grep -q 'context deadline exceeded' "$out" && ! grep -q 'Failing input written' "$out"; then
    rm -f "$out"
    echo "fuzz: $name: the fuzzing engine stopped without a failing input; running it once more"
    go test -run '^$' -fuzz "^$name\$" -fuzztime "$fuzztime" -parallel "$parallel" "$pkg"
    return
  fi
  rm -f "$out"
  return 1
}

n=$(echo "$targets" | wc -l)
i=0
while read -r pkg name; do
  i=$((i + 1))
  echo "fuzz: [$i/$n] $pkg $name for $fuzztime"
  fuzz_one "$pkg" "$name"
done <<<"$targets"
echo "fuzz: all $n fuzz tests ran $fuzztime each without a failure"
