/**
 * The names of the relay logs a test run keeps (RELAY_TEST_LOG_DIR): each file starts with its test's
 * name made safe for a path, so scripts/failed-test-logs.ts finds the logs of the tests that failed.
 */
export function logStem(testName: string): string {
  return testName.replace(/[^A-Za-z0-9]+/g, "-").slice(0, 80);
}
