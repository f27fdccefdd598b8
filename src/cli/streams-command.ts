import { loadConfig } from "../config/load.js";
import { scrubSecrets, secretsOf } from "../config/redact.js";
import { ErrorCodes, RelayError } from "../errors.js";
import { Progress } from "../observability/progress.js";
import { applyExitCode, applyPlan } from "../streams/apply.js";
import { applyJson, formatApply, formatPlan, planJson } from "../streams/format.js";
import { planStreams, selectRegions } from "../streams/plan.js";
import { closeSessions } from "../nats/region-session.js";
import type { CommandSpec } from "./args.js";
import { helpText, parseCommandArgs, requireString } from "./args.js";

export const streamsSpec: CommandSpec = {
  name: "streams",
  summary:
    "plan: show, per region, the destination streams, dead-letter stream and lease bucket the links need against what exists; apply: create or update them (never deletes; narrowing only with --force). See docs/streams.md",
  usage: "jetstream-relay streams plan|apply --config FILE [--region NAME] [--force] [--json]",
  options: {
    config: { type: "string", short: "c", description: "config file (YAML)" },
    region: {
      type: "string",
      description: "only this region (default: every region that is a link's destination)",
    },
    force: {
      type: "boolean",
      description:
        "also make changes that narrow or rewrite a stream (retention, subjects no link needs, max age)",
    },
    json: { type: "boolean", description: "print JSON instead of the table" },
  },
};

const ACTIONS = ["plan", "apply"] as const;
type Action = (typeof ACTIONS)[number];

/**
 * Exit codes: plan 0 when it could plan every region (whatever it found), 1 when a region could not
 * be reached or read; apply 0 when everything the relay needs is in place afterwards, 1 when a change
 * was refused, blocked or failed, or a region could not be reached; 2 bad usage or config.
 */
export async function streamsCommand(argv: readonly string[]): Promise<number> {
  const [first, ...rest] = argv;
  const action = ACTIONS.find((a) => a === first);
  const values = parseCommandArgs(streamsSpec, action ? rest : argv);
  if (values.help) {
    console.log(helpText(streamsSpec));
    return 0;
  }
  if (!action) {
    const got = first === undefined || first.startsWith("-") ? "no action" : `"${first}"`;
    throw new RelayError(
      ErrorCodes.USAGE,
      `streams: expected plan or apply, got ${got}\n\n${helpText(streamsSpec)}`,
    );
  }
  return run(action, values);
}

async function run(action: Action, values: Record<string, string | boolean | undefined>): Promise<number> {
  const path = requireString(streamsSpec, values, "config");
  const region = typeof values.region === "string" ? values.region : undefined;
  const force = values.force === true;
  const json = values.json === true;
  const config = await loadConfig(path);
  selectRegions(config, region); // a USAGE error for an unknown --region, before connecting
  const secrets = secretsOf(config);
  const print = (text: string): void => console.log(scrubSecrets(text, secrets));
  const ctx = { config: path, ...(region !== undefined ? { region } : {}) };

  const { plan, sessions } = await planStreams(config, {
    ...(region !== undefined ? { region } : {}),
    force,
  });
  try {
    const regionFailed = plan.regions.some((r) => r.error !== undefined);
    if (action === "plan") {
      const failed = regionFailed || plan.regions.some((r) => r.items.some((i) => i.status === "failed"));
      print(json ? JSON.stringify(planJson(plan), null, 2) : formatPlan(plan, ctx));
      return failed ? 1 : 0;
    }
    const progress = new Progress({ label: "streams apply", unit: "streams" });
    const results = await applyPlan(plan, sessions, {
      force,
      onProgress: (done, total) => progress.update(done, total),
    });
    progress.finish();
    const code = applyExitCode(results);
    print(json ? JSON.stringify(applyJson(results, force, code), null, 2) : formatApply(results, force, ctx));
    return code;
  } finally {
    await closeSessions(sessions.values());
  }
}
