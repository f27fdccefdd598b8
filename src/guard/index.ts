export { createGuard } from "./create-guard.js";
export type { GuardDeps } from "./create-guard.js";
export { MemoryGuard, MemoryGuardStore } from "./memory-guard.js";
export { NoneGuard } from "./none-guard.js";
export { RedisGuard } from "./redis-guard.js";
export type { GuardPersistence } from "./redis-connection.js";
export type * from "./types.js";
