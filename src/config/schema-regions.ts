/**
 * The `regions` section of the config schema: region names, NATS server URLs, and each region's
 * `auth` and `tls` (the TLS block is shared with the guard's Redis connection).
 */
import { z } from "zod";
import { quote } from "./problems.js";
import { expectString, fail, field, filePath, list, natsName, nonEmptyString, obj, secretString } from "./schema-fields.js";

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
});

export const TlsSchema = obj({ ca: filePath.optional(), cert: filePath.optional(), key: filePath.optional() });

const AuthSchema = obj({
  token: secretString.optional(),
  user: nonEmptyString.optional(),
  password: secretString.optional(),
  creds: filePath.optional(),
  nkey: filePath.optional(),
});

const RegionSchema = obj({
  servers: list(serverUrl, "must list at least one server"),
  auth: AuthSchema.optional(),
  tls: TlsSchema.optional(),
  domain: natsName("JetStream domain").optional(),
});

/** `regions`: a mapping from region name to region. */
export const RegionsSchema = z.record(
  z.string().regex(REGION_NAME, { error: `invalid region name: ${REGION_NAME_RULE}` }),
  RegionSchema,
);
