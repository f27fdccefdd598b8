import { readFile } from "node:fs/promises";
import { parseDocument, stringify } from "yaml";
import { loadConfig } from "../config/load.js";
import { expandMeshes } from "../config/mesh.js";
import { ErrorCodes, RelayError } from "../errors.js";
import type { CommandSpec } from "./args.js";
import { helpText, parseCommandArgs, requireString } from "./args.js";

export const configSpec: CommandSpec = {
  name: "config",
  summary:
    "expand: print the links section a config's meshes expand to (the hand-written links, then each mesh's), as YAML to paste",
  usage: "jetstream-relay config expand --config FILE",
  options: {
    config: { type: "string", short: "c", description: "config file (YAML)" },
  },
};

/**
 * `config expand`: validates the file as `run` would, then prints its `links` with every mesh expanded.
 * Values are printed as written (`${VAR}` stays), so no secret from the environment is printed.
 */
export async function configCommand(argv: readonly string[]): Promise<number> {
  const [sub, ...rest] = argv;
  const values = parseCommandArgs(configSpec, sub === "expand" ? rest : argv);
  if (values.help) {
    console.log(helpText(configSpec));
    return 0;
  }
  if (sub !== "expand") {
    throw new RelayError(
      ErrorCodes.USAGE,
      `config: unknown subcommand ${JSON.stringify(sub ?? "")}\n\n${helpText(configSpec)}`,
    );
  }
  const path = requireString(configSpec, values, "config");
  const config = await loadConfig(path); // every problem reported as `run` would, before anything is printed
  const tree = parseDocument(await readFile(path, "utf8"), { merge: true }).toJS({
    maxAliasCount: 1000,
  }) as unknown;
  const expansion = expandMeshes(tree);
  const handWritten = config.links.length - expansion.links.length;
  const lines = [
    `# ${path}: ${config.links.length} links: ${handWritten} written under links, ${(config.meshes ?? []).map((m) => `${m.links.length} from mesh ${m.name}`).join(", ") || "no meshes"}`,
    stringify({ links: (expansion.tree as { links: unknown[] }).links }, { lineWidth: 0 }).trimEnd(),
  ];
  console.log(lines.join("\n"));
  return 0;
}
