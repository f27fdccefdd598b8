// Loaded into the profiled relay (`node --import`) when PROFILE_ALLOC=1: V8's sampling heap profiler,
// counting objects the garbage collector already freed too, so the profile is what the relay
// allocated, not what it kept. Written to ALLOC_PROBE_OUT (.heapprofile) when the process exits.
import { Session } from "node:inspector";
import { writeFileSync } from "node:fs";

const out = process.env.ALLOC_PROBE_OUT;
if (out) {
  const session = new Session();
  session.connect();
  session.post("HeapProfiler.startSampling", {
    samplingInterval: 1024,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: true,
  });
  process.on("exit", () => {
    session.post("HeapProfiler.stopSampling", (err, result) => {
      if (!err) writeFileSync(out, JSON.stringify(result.profile));
    });
  });
}
