# Sourced by the scripts that run the relay, the tests and the bench: puts a Node.js of at least the
# major version the image ships (and the NATS client packages require) first on PATH. A machine whose
# `node` is older gets that runtime from the npm registry (the node-linux-<arch> package, the official
# build) unpacked into .tools/node; nothing is installed system-wide.
NODE_RUNTIME_MAJOR=22
NODE_RUNTIME_VERSION=22.23.5
_runtime_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_runtime_major() { "$1" -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0; }
if [ -x "$_runtime_root/.tools/node/bin/node" ]; then
  export PATH="$_runtime_root/.tools/node/bin:$PATH"
elif [ "$(_runtime_major node)" -lt "$NODE_RUNTIME_MAJOR" ]; then
  case "$(uname -m)" in
    x86_64) _runtime_arch=x64 ;;
    aarch64 | arm64) _runtime_arch=arm64 ;;
    *) echo "runtime: no Node.js $NODE_RUNTIME_MAJOR build for $(uname -m) on the npm registry; install Node.js >= $NODE_RUNTIME_MAJOR" >&2; return 1 ;;
  esac
  echo "runtime: node $(node -v 2>/dev/null || echo missing) is older than $NODE_RUNTIME_MAJOR: fetching Node.js $NODE_RUNTIME_VERSION into .tools/node from the npm registry (node-linux-$_runtime_arch)" >&2
  _runtime_tmp="$(mktemp -d)"
  (cd "$_runtime_tmp" && npm pack --silent "node-linux-$_runtime_arch@$NODE_RUNTIME_VERSION" >/dev/null) || { rm -rf "$_runtime_tmp"; echo "runtime: could not fetch node-linux-$_runtime_arch@$NODE_RUNTIME_VERSION" >&2; return 1; }
  mkdir -p "$_runtime_root/.tools/node.tmp"
  tar -xzf "$_runtime_tmp"/node-linux-*.tgz -C "$_runtime_root/.tools/node.tmp" --strip-components=1 package/bin package/LICENSE
  rm -rf "$_runtime_tmp" "$_runtime_root/.tools/node"
  mv "$_runtime_root/.tools/node.tmp" "$_runtime_root/.tools/node"
  export PATH="$_runtime_root/.tools/node/bin:$PATH"
fi
unset -f _runtime_major
unset _runtime_root _runtime_arch _runtime_tmp
