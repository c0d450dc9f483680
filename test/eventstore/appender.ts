// Child process of the crash test: appends as fast as it can with 32 appenders and prints the
// id of every acknowledged event on its own line, until it is killed.
import { randomUUID } from 'node:crypto';
import { PostgresEventStore } from '../../infra/eventstore/postgres.ts';
import { SqliteEventStore } from '../../infra/eventstore/sqlite.ts';

const [kind, location, schema] = process.argv.slice(2);
const store =
  kind === 'sqlite'
    ? new SqliteEventStore(location!, { writerThread: true }) // as the hub runs it
    : new PostgresEventStore({ url: location!, schema: schema! });

async function appender(n: number): Promise<never> {
  for (let i = 0; ; i++) {
    const id = randomUUID();
    await store.append(`crash-${n % 8}`, [{ id, type: 'Tested', data: { n, i } }]);
    process.stdout.write(`${id}\n`);
  }
}
for (let n = 0; n < 32; n++) void appender(n);
