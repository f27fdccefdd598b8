import { test } from "node:test";
import assert from "node:assert/strict";
import { boundHeapGrowth } from "../../src/lifecycle/heap-growth.js";

test("the relay sets V8's heap growing factor unless node was given one (the operator's stays)", () => {
  assert.equal(boundHeapGrowth(["--heap-growing-percent=20"]), false, "given on the command line: kept");
  assert.equal(boundHeapGrowth(["--heap_growing_percent", "20"]), false, "either spelling");
  assert.equal(boundHeapGrowth(["--max-old-space-size=384"]), true, "another flag: set");
});
