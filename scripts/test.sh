#!/usr/bin/env bash
# The whole test suite (`npm test`): Vitest (unit + GPU tests on Dawn/SwiftShader), then the browser
# end-to-end test (tests/e2e/run.ts). Both always run; the counts come from their JSON summaries
# (not from scraping logs). The LAST line is exactly `N passed, M failed` over both suites; the exit
# status is non-zero if anything failed or a suite could not report.
# Arguments go to Vitest (e.g. `npm test -- tests/state` runs those files, then the e2e test).
set -uo pipefail
cd "$(dirname "$0")/.."

# Chromium and Dawn want a runtime dir; CI shells and `su` sessions often have none.
if [ -z "${XDG_RUNTIME_DIR:-}" ]; then
  export XDG_RUNTIME_DIR="/tmp/xdg-runtime-$(id -u)"
  mkdir -p "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"
fi

RESULTS=test-results
mkdir -p "$RESULTS"
VITEST_JSON="$RESULTS/vitest.json"
E2E_JSON="$RESULTS/e2e/summary.json"
rm -f "$VITEST_JSON" "$E2E_JSON"

echo "== vitest =="
npx vitest run --reporter=default --reporter=json --outputFile.json="$VITEST_JSON" "$@"
vitest_rc=$?

echo
echo "== e2e (Chromium) =="
node --import tsx tests/e2e/run.ts
e2e_rc=$?

# Prints "passed failed" for one suite. A suite that exited non-zero but reports no failure (a crash,
# an unhandled error, a file that failed to load) counts as one failure, so nothing fails silently.
count() {
  node -e '
    const fs = require("fs");
    const [kind, file, rc] = process.argv.slice(1);
    let passed = 0, failed = 0;
    try {
      const j = JSON.parse(fs.readFileSync(file, "utf8"));
      if (kind === "vitest") {
        passed = j.numPassedTests ?? 0;
        failed = j.numFailedTests ?? 0;
        // Files that failed before any test ran (import/syntax errors) have no test results.
        for (const f of j.testResults ?? []) if (f.status === "failed" && !(f.assertionResults ?? []).some((a) => a.status === "failed")) failed++;
      } else {
        passed = j.passed ?? 0;
        failed = j.failed ?? 0;
      }
    } catch (e) {
      console.error(`${kind}: no readable summary at ${file} (${e.message})`);
    }
    if (Number(rc) !== 0 && failed === 0) failed = 1;
    console.log(`${passed} ${failed}`);
  ' "$1" "$2" "$3"
}

read -r vp vf < <(count vitest "$VITEST_JSON" "$vitest_rc")
read -r ep ef < <(count e2e "$E2E_JSON" "$e2e_rc")
echo
echo "vitest: $vp passed, $vf failed (exit $vitest_rc)"
echo "e2e:    $ep passed, $ef failed (exit $e2e_rc)"
passed=$((vp + ep))
failed=$((vf + ef))
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
