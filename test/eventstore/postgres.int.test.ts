import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { PostgresEventStore } from '../../infra/eventstore/postgres.ts';
import { testConfig } from '../harness.ts';
import { eventStoreContract } from './contract.ts';

const { postgresUrl } = testConfig();

eventStoreContract(
  'PostgreSQL',
  async () => {
    const schema = `test_${randomBytes(6).toString('hex')}`;
    return {
      open: async () => new PostgresEventStore({ url: postgresUrl, schema }),
      cleanup: async () => {
        const client = new pg.Client({ connectionString: postgresUrl });
        await client.connect();
        await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
        await client.end();
      },
    };
  },
  { sharedWriters: true },
);
