// Killing the process during appends loses no acknowledged event (SIGKILL, no shutdown path).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { EventStore } from '../../infra/eventstore/port.ts';
import { PostgresEventStore } from '../../infra/eventstore/postgres.ts';
import { SqliteEventStore } from '../../infra/eventstore/sqlite.ts';
import { dropSchema, testConfig } from '../harness.ts';
import { readEverything } from './contract.ts';

const APPENDER = new URL('./appender.ts', import.meta.url).pathname;

/** Runs the appender until it has acknowledged `acks` events, then SIGKILLs it. */
async function killDuringAppends(args: string[], acks: number): Promise<string[]> {
  const child = spawn(process.execPath, [APPENDER, ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
  const acked: string[] = [];
  let partial = '';
  await new Promise<void>((resolve, reject) => {
    child.stdout.on('data', (chunk: Buffer) => {
      const lines = (partial + chunk.toString()).split('\n');
      partial = lines.pop()!;
      acked.push(...lines);
      if (acked.length >= acks && !child.killed) {
        child.kill('SIGKILL');
      }
    });
    child.once('exit', (_code, signal) =>
      signal === 'SIGKILL' ? resolve() : reject(new Error(`appender exited on its own (${signal})`)),
    );
  });
  return acked;
}

async function assertAllStored(store: EventStore, acked: string[]) {
  const stored = new Set((await readEverything(store)).map((e) => e.id));
  const lost = acked.filter((id) => !stored.has(id));
  assert.equal(lost.length, 0, `${lost.length} acknowledged events lost`);
  assert.ok(acked.length >= 2000);
  // Per-stream revisions stay contiguous after the crash.
  for (let s = 0; s < 8; s++) {
    const revisions = (await store.readStream(`crash-${s}`, 0, 100_000)).map((e) => e.revision);
    assert.deepEqual(revisions, [...revisions.keys()]);
  }
}

describe('event store: SIGKILL during appends (int)', function () {
  this.timeout(60_000);

  it('SQLite loses no acknowledged event', async () => {
    const file = join(mkdtempSync(join(tmpdir(), 'hub-crash-')), 'events.sqlite');
    const acked = await killDuringAppends(['sqlite', file], 3000);
    const store = new SqliteEventStore(file);
    try {
      await assertAllStored(store, acked);
    } finally {
      await store.close();
    }
  });

  it('PostgreSQL loses no acknowledged event', async () => {
    const { postgresUrl } = testConfig();
    const schema = `test_${randomBytes(6).toString('hex')}`;
    const acked = await killDuringAppends(['postgres', postgresUrl, schema], 3000);
    const store = new PostgresEventStore({ url: postgresUrl, schema });
    try {
      await assertAllStored(store, acked);
    } finally {
      await store.close();
      await dropSchema(postgresUrl, schema);
    }
  });
});
