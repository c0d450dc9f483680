// Shared by the benchmarks: percentiles, the machine line, and writing one section of
// docs/benchmarks.md between markers, so each benchmark updates its own table only.

import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { Redis } from 'ioredis';
import { loadConfig } from '../infra/config.ts';

export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

export function machine(): string {
  const cpu = cpus();
  return `${cpu.length} × ${cpu[0]?.model.trim() ?? 'unknown CPU'}, ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}, ${new Date().toISOString().slice(0, 10)}`;
}

const DOC = new URL('../docs/benchmarks.md', import.meta.url);

export function writeSection(name: string, body: string): void {
  let doc: string;
  try {
    doc = readFileSync(DOC, 'utf8');
  } catch {
    doc =
      '# Benchmarks\n\nFigures measured by the scripts in `bench/`; each section is rewritten by its own script.\n';
  }
  const start = `<!-- bench:${name} -->`;
  const end = `<!-- /bench:${name} -->`;
  const section = `${start}\n${body.trim()}\n${end}`;
  const from = doc.indexOf(start);
  const to = doc.indexOf(end);
  doc =
    from >= 0 && to > from
      ? doc.slice(0, from) + section + doc.slice(to + end.length)
      : `${doc.trimEnd()}\n\n${section}\n`;
  writeFileSync(DOC, doc);
}

export const fmt = (n: number, digits = 0) =>
  n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });

/** A distributed hub of its own: a fresh PostgreSQL schema and Kafka prefix, and a Redis
 * database emptied for it (read models, checkpoints and schedules of earlier runs would mislead). */
export async function isolatedDistributed(redisDb: number): Promise<Record<string, string>> {
  const config = loadConfig();
  const tag = `bench_${Date.now()}`;
  const redisUrl = `${config.redisUrl.replace(/\/\d*$/, '')}/${redisDb}`;
  const redis = new Redis(redisUrl);
  await redis.flushdb();
  redis.disconnect();
  return {
    HUB_PROFILE: 'distributed',
    HUB_POSTGRES_URL: `${config.postgresUrl}${config.postgresUrl.includes('?') ? '&' : '?'}schema=${tag}`,
    HUB_REDIS_URL: redisUrl,
    HUB_KAFKA_PREFIX: `${tag}-`,
  };
}

const ROOT = new URL('..', import.meta.url).pathname;

/** A Node process (a hub, a receiver, a bare server) resolved once it prints "listening on <url>". */
export async function startListening(
  args: string[],
  env: Record<string, string>,
): Promise<{ child: ChildProcess; url: string }> {
  const child = spawn(process.execPath, args, {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (d) => {
      out += d;
      const m = /listening on (http:\/\/[\d.]+:\d+)/.exec(out);
      if (m) resolve(m[1]!);
    });
    child.once('exit', (code) => reject(new Error(`exited with ${code}`)));
  });
  return { child, url };
}
