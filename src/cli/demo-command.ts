import { ErrorCodes, RelayError } from "../errors.js";
import { runDemo } from "../demo/demo.js";
import { natsServerAvailable } from "../demo/local-server.js";
import type { CommandSpec } from "./args.js";
import { helpText, parseCommandArgs } from "./args.js";

export const demoSpec: CommandSpec = {
  name: "demo",
  summary: "two local regions, a relay each way, traffic, a region cut mid-transfer, and the numbers",
  usage: "jetstream-relay demo [--messages N]",
  options: {
    messages: { type: "string", short: "n", description: "messages published in each region (default 20000)" },
  },
};

export async function demoCommand(argv: readonly string[]): Promise<number> {
  const values = parseCommandArgs(demoSpec, argv);
  if (values.help) {
    console.log(helpText(demoSpec));
    return 0;
  }
  if (!natsServerAvailable()) {
    console.error(
      "demo: nats-server is not on PATH. Install it with `sudo apt-get install -y nats-server` (Debian/Ubuntu),\n" +
        "or run `npm run demo`, which installs it for you.",
    );
    return 1;
  }
  const messages = Number(values.messages ?? 20_000);
  if (!Number.isInteger(messages) || messages < 100) {
    throw new RelayError(ErrorCodes.USAGE, `demo: --messages must be a whole number >= 100 (got ${String(values.messages)})`);
  }
  const ok = await runDemo({ messages, out: (line) => console.log(line) });
  return ok ? 0 : 1;
}
