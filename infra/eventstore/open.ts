// Chooses the event store adapter from the configuration.
import { join } from 'node:path';
import type { Config } from '../config.ts';
import type { EventStore } from './port.ts';

export async function openEventStore(config: Config): Promise<EventStore> {
  switch (config.eventStoreKind) {
    case 'sqlite': {
      const { SqliteEventStore } = await import('./sqlite.ts');
      return new SqliteEventStore(join(config.dataDir, 'events.sqlite'), { synchronous: config.sqliteSync });
    }
    case 'postgres': {
      const { PostgresEventStore } = await import('./postgres.ts');
      return new PostgresEventStore({ url: config.postgresUrl });
    }
    case 'esdb': {
      const { EsdbEventStore } = await import('./esdb.ts');
      return new EsdbEventStore(config.esdbUrl);
    }
  }
}
