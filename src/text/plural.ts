/** `1 link`, `2 links`: a count with its noun, for messages and reports. */
export function plural(count: number, noun: string): string {
  return `${count} ${noun}${count === 1 ? "" : "s"}`;
}
