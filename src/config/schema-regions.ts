/**
 * The `regions` section of the config schema: region names, NATS server URLs, and each region's
 * `auth` and `tls` (the TLS block is shared with the guard's Redis connection).
 */
import { z } from "zod";
import { quote } from "./problems.js";
import {
  expectString,
  fail,
  field,
  filePath,
  list,
  natsName,
  nonEmptyString,
  obj,
  secretString,
} from "./schema-fields.js";

const REGION_NAME = /^[a-z0-9][a-z0-9-]*$/;
const REGION_NAME_RULE = 'use lowercase letters, digits and "-", starting with a letter or digit';

const HOST = /^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)(?::(\d{1,5}))?\/?$/;

/** `nats://[user[:password]@]host[:port]`, `tls://...` or `host:port`. */
const serverUrl = field((v) => {
  const s = expectString(v);
  const bad = (): never =>
    fail(`invalid server ${quote(s)}: use nats://host:port, tls://host:port or host:port`);
  const scheme = /^([A-Za-z][A-Za-z0-9+.-]*):\/\//.exec(s);
  if (scheme !== null && scheme[1] !== "nats" && scheme[1] !== "tls") return bad();
  let rest = scheme === null ? s : s.slice(scheme[0].length);
  const at = rest.lastIndexOf("@");
  if (at >= 0) {
    if (rest.slice(0, at).includes("/")) return bad();
    rest = rest.slice(at + 1);
  }
  const m = HOST.exec(rest);
  if (m === null) return bad();
  const port = m[2];
  if (scheme === null && port === undefined) return bad(); // a bare host needs a scheme or a port
  if (port !== undefined && (Number(port) < 1 || Number(port) > 65535)) return bad();
  return s;
}).meta({ valueType: "server URL", allowed: "`nats://host[:port]`, `tls://host[:port]` or `host:port`" });

export const TlsSchema = obj({
  ca: filePath.optional().meta({
    description:
      "CA certificate(s) (PEM) used to verify the server. Without it, the system's trusted CAs are used.",
  }),
  cert: filePath.optional().meta({
    description: "Client certificate (PEM), for servers that require mutual TLS. Goes with `key`.",
  }),
  key: filePath
    .optional()
    .meta({ description: "Private key (PEM) of the client certificate. Goes with `cert`." }),
});

const AuthSchema = obj({
  token: secretString.optional().meta({ description: "A NATS authorization token: the form on its own." }),
  user: nonEmptyString
    .optional()
    .meta({ description: "A user name; needs `password` (the user-and-password form)." }),
  password: secretString.optional().meta({ description: "The password of `user`; needs `user`." }),
  creds: filePath.optional().meta({
    description: "A `.creds` file (JWT and NKey seed), as issued by `nsc`: the form on its own.",
  }),
  nkey: filePath
    .optional()
    .meta({ description: "A file holding an NKey user seed (`SU...`): the form on its own." }),
});

const RegionSchema = obj({
  servers: list(serverUrl, "must list at least one server").meta({
    description:
      "The region's NATS servers. Give several so the relay can reconnect to another server of the cluster. An address may carry credentials (`nats://user:password@host:4222`, `nats://token@host:4222`); prefer `auth`, which keeps the secret out of the address. Credentials in an address are redacted in logs and errors all the same.",
  }),
  auth: AuthSchema.optional().meta({
    description:
      "How the relay authenticates: exactly one form (see [below](#regionsnameauth)). Omit it for a server without authentication.",
  }),
  tls: TlsSchema.optional().meta({
    description: "TLS settings; see [below](#regionsnametls-and-guardredistls).",
  }),
  domain: natsName("JetStream domain").optional().meta({
    description:
      "The region's JetStream domain, when it has one (the JetStream API is then `$JS.<domain>.API`).",
  }),
});

/** `regions`: a mapping from region name to region. */
export const RegionsSchema = z
  .record(z.string().regex(REGION_NAME, { error: `invalid region name: ${REGION_NAME_RULE}` }), RegionSchema)
  .meta({ valueType: "mapping: [region name](#names) → region" });
