#!/usr/bin/env bash
# Runs the Python tests under images/ (the trainer helper lifeboat.py and
# the example trainer) with the standard library's unittest, and prints one
# closing line: "python: N passed, N failed, N skipped".
#
#   scripts/python-test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
need_pkgs python3:python3

work=$(mktemp -d "${TMPDIR:-/tmp}/lifeboat-pytest.XXXXXX")
trap 'rm -rf "$work"' EXIT
out=$work/out
export PYTHONDONTWRITEBYTECODE=1 # no __pycache__ in the work tree
# The example trainer is also tested under the real binary; the tests skip
# that part when LIFEBOAT_BIN is unset (and fail in CI,
# LIFEBOAT_TEST_DISALLOW_SKIP=1).
if [ -z "${LIFEBOAT_BIN:-}" ] && command -v go >/dev/null 2>&1; then
	log "building lifeboat for the example trainer's tests"
	go build -ldflags "$LIFEBOAT_LDFLAGS" -o "$work/lifeboat" ./cmd/lifeboat
	export LIFEBOAT_BIN=$work/lifeboat
fi
set +e
python3 -m unittest discover -s images -p 'test_*.py' -v 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
set -e

# unittest's own summary: "Ran N tests", then "OK" or
# "FAILED (failures=F, errors=E, skipped=S)" / "OK (skipped=S)".
ran=$(sed -n 's/^Ran \([0-9]*\) tests\{0,1\} in .*/\1/p' "$out" | tail -n 1)
last=$(grep -E '^(OK|FAILED)' "$out" | tail -n 1 || true)
count() { sed -n "s/.*$1=\([0-9]*\).*/\1/p" <<<"$last"; }
failures=$(count failures) errors=$(count errors) skipped=$(count skipped)
failed=$((${failures:-0} + ${errors:-0}))
if [ -z "$ran" ]; then
	echo "unittest did not run (exit code $rc)"
	echo "python: 0 passed, 1 failed"
	exit 1
fi
passed=$((ran - failed - ${skipped:-0}))
if [ "$ran" = 0 ]; then
	echo "no tests found under images/"
	echo "python: 0 passed, 1 failed"
	exit 1
fi
echo "python: $passed passed, $failed failed, ${skipped:-0} skipped"
exit "$rc"
