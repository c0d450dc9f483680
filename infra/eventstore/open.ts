// Chooses the event store adapter from the configuration.
import { join } from 'node:path';
import type { Config } from '../config.ts';
import type { EventStore } from './port.ts';

export async function openEventStore(config: Config): Promise<EventStore> {
  switch (config.eventStoreKind) {
    case 'sqlite': {
      const { SqliteEventStore } = await import('./sqlite.ts');
      return new SqliteEventStore(join(config.dataDir, 'events.sqlite'), {
        synchronous: config.sqliteSync,
        writerThread: true,
        sharedWithThreads: config.apiThreads > 0,
        snapshotEvery: config.snapshotEvery,
        newsLingerMs: config.deriveLingerMs,
      });
    }
    case 'postgres': {
      const { PostgresEventStore } = await import('./postgres.ts');
      // `?schema=<name>` keeps the events in a schema other than public (several hubs, benchmarks).
      const url = new URL(config.postgresUrl);
      const schema = url.searchParams.get('schema') ?? undefined;
      url.searchParams.delete('schema');
      return new PostgresEventStore({ url: url.href, schema, snapshotEvery: config.snapshotEvery });
    }
    case 'esdb': {
      const { EsdbEventStore } = await import('./esdb.ts');
      return new EsdbEventStore(config.esdbUrl, { snapshotEvery: config.snapshotEvery });
    }
  }
}
