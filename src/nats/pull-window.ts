/**
 * What a window allows: one window per round trip, in messages per second (undefined without a round
 * trip). The window itself sizes to the round trip (src/link/link-window.ts).
 */
export function windowPerSecond(window: number, rttMs: number | undefined): number | undefined {
  return rttMs !== undefined && rttMs > 0 ? Math.round((window * 1000) / rttMs) : undefined;
}
