import { LocalBackend } from "./local-backend.js";
const b = new LocalBackend();
const mode = process.argv[2];
if (mode === "badconfig") {
  try { await b.startNats({ extraConfig: "this is { not valid" }); } catch (e) { console.log("ERR:", (e as Error).message); }
  await b.cleanup();
} else if (mode === "outage") {
  const c = await b.startNatsCluster();
  let t = Date.now();
  await Promise.all(c.nodes.map((n) => n.kill()));
  for (const n of c.nodes) { await n.restart(); console.log("restarted", n.name, Date.now() - t); }
  await c.waitHealthy!(); console.log("healthy", Date.now() - t);
  await b.cleanup();
} else {
  const n = await b.startNats(); const r = await b.startRedis(); await n.pause();
  console.log(JSON.stringify({ pids: [n.pid, r.pid], dir: n.storeDir }));
  if (mode === "throw") throw new Error("boom");
  process.exit(0);
}
