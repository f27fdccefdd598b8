export async function demoCommand(_argv: readonly string[]): Promise<number> { throw new Error("todo"); }
