// Child process of the checkpoint-atomicity test: runs one projection runner over a SQLite
// event store into Redis and prints the checkpoint after every batch, until it is killed.
import { SqliteEventStore } from '../../infra/eventstore/sqlite.ts';
import { RedisReadStore } from '../../infra/readstore/redis.ts';
import { ProjectionRunner } from '../../projections/runner.ts';
import { memoryLogger } from '../harness.ts';
import { catalogNamed } from './contract.ts';

const [file, redisUrl, name] = process.argv.slice(2);
const runner = new ProjectionRunner({
  store: new SqliteEventStore(file!),
  readStore: new RedisReadStore(redisUrl!),
  projection: catalogNamed(name!),
  logger: memoryLogger('silent').logger,
  batchSize: 100,
  onBatch: (checkpoint) => process.stdout.write(`${checkpoint}\n`),
});
runner.start();
