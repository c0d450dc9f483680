// A thread appending straight to a SqliteEventStore's writer thread (connectAppender), as an API
// thread does (api/threads.ts): sqlite.int.test.ts asks it to append (`append`), and it answers
// each with the outcome and when it heard it, in `answeredAt` as well (readable while the asking
// thread is blocked); the news of the other appenders' appends it passes on (`appended`).
import { type MessagePort, parentPort, workerData } from 'node:worker_threads';
import { type ExpectedRevision, serialise, WrongExpectedRevisionError } from '../../infra/eventstore/port.ts';
import { errorsCrossThreads, ThreadChannel } from '../../infra/threads.ts';

const { port, answeredAt } = workerData as { port: MessagePort; answeredAt: Float64Array };
errorsCrossThreads(WrongExpectedRevisionError);
const writer = new ThreadChannel(port);
writer.serve(
  'appended',
  { apply: (stream: string, events: unknown[]) => parentPort!.postMessage({ appended: { stream, events } }) },
  ['apply'],
);

parentPort!.on('message', async (m: { stream: string; types: string[]; expected: ExpectedRevision }) => {
  const events = serialise(m.types.map((type) => ({ id: crypto.randomUUID(), type, data: { type } })));
  try {
    const result = await writer.call('writer', 'append', [m.stream, events, m.expected]);
    answeredAt[0] = Date.now();
    parentPort!.postMessage({ result, at: answeredAt[0] });
  } catch (err) {
    parentPort!.postMessage({
      error: (err as Error).message,
      wrong: err instanceof WrongExpectedRevisionError,
    });
  }
});
port.on('close', () => parentPort!.postMessage({ closed: true }));
