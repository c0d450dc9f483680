// A promise bounded in time: readiness checks, scrapes and best-effort writes must not hang on a
// dependency that does not answer.

/** `p`, or a rejection naming `what` once `ms` have passed without its answer. */
export function withTimeout<T>(p: Promise<T>, ms: number, what = 'no answer'): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} within ${ms} ms`)), ms);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}
