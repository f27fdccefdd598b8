import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);

export interface TlsCerts {
  /** CA certificate that signed the server certificate; clients trust this. */
  caFile: string;
  /** Server certificate for 127.0.0.1 / localhost. */
  certFile: string;
  keyFile: string;
}

/**
 * Creates a throw-away CA and a server certificate signed by it in `dir`, using the openssl CLI
 * (no npm dependency). EC P-256 keys because they generate in milliseconds, unlike RSA.
 * The SAN covers IP 127.0.0.1 and DNS localhost since both Go (nats-server) and Node check SANs,
 * not the CN.
 */
export async function makeTlsCerts(dir: string): Promise<TlsCerts> {
  const caKey = join(dir, "ca-key.pem");
  const caFile = join(dir, "ca.pem");
  const keyFile = join(dir, "server-key.pem");
  const csr = join(dir, "server.csr");
  const certFile = join(dir, "server.pem");
  const ext = join(dir, "server-ext.cnf");
  const ecKey = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];

  // prettier-ignore
  await openssl([
    "req", "-x509", ...ecKey, "-keyout", caKey, "-out", caFile, "-days", "7",
    "-subj", "/CN=jetstream-relay test CA",
    "-addext", "basicConstraints=critical,CA:TRUE",
    "-addext", "keyUsage=critical,keyCertSign,cRLSign",
  ]);
  await openssl(["req", ...ecKey, "-keyout", keyFile, "-out", csr, "-subj", "/CN=localhost"]);
  await writeFile(
    ext,
    [
      "subjectAltName=IP:127.0.0.1,DNS:localhost",
      "basicConstraints=CA:FALSE",
      "keyUsage=critical,digitalSignature,keyEncipherment",
      "extendedKeyUsage=serverAuth,clientAuth",
      "",
    ].join("\n"),
  );
  // prettier-ignore
  await openssl([
    "x509", "-req", "-in", csr, "-CA", caFile, "-CAkey", caKey,
    // An explicit random serial avoids the ca.srl bookkeeping file of -CAcreateserial.
    "-set_serial", `0x${randomBytes(8).toString("hex")}`,
    "-days", "7", "-out", certFile, "-extfile", ext,
  ]);
  return { caFile, certFile, keyFile };
}

async function openssl(args: string[]): Promise<void> {
  try {
    await run("openssl", args, { timeout: 30_000 });
  } catch (err) {
    const stderr = (err as { stderr?: string }).stderr ?? "";
    throw new Error(`openssl ${args[0] ?? ""} failed: ${stderr.trim() || String(err)}`, {
      cause: err,
    });
  }
}
