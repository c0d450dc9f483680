// Follows the event store from a durable checkpoint and hands each batch to a handler with side
// effects (send an email, carry a flag): at least once, in order, resuming after crashes. A
// failing batch is retried from the checkpoint with backoff. A handler may take a batch and make
// it durable later (the relay's hand-off): the checkpoint moves only past batches made durable,
// in order, and one that is not is read again from the last that was.
import type { Handled } from '../../infra/bus/port.ts';
import type { CheckpointStore } from '../../infra/checkpoints.ts';
import type { EventStore, RecordedEvent, SubscribeOptions } from '../../infra/eventstore/port.ts';
import type { Logger } from '../../infra/telemetry.ts';

/** `batchSize` defaults to 100; `lingerMs` to 0 (see SubscribeOptions). */
export interface FollowerOptions extends SubscribeOptions {
  name: string;
  store: EventStore;
  checkpoints: CheckpointStore;
  logger: Logger;
  /** Handles a batch, or takes it and answers `{ durable }`, which resolves once it is durable. */
  // biome-ignore lint/suspicious/noConfusingVoidType: most handlers answer nothing (their batch is done)
  handle: (batch: RecordedEvent[]) => Promise<void | Handled>;
  /** Asked before following: false waits a second and asks again (a standby without a lease). */
  ready?: () => Promise<boolean>;
  /** Called once the loop has ended. */
  stopped?: () => Promise<void>;
}

export class EventFollower {
  private readonly o: FollowerOptions;
  private readonly controller = new AbortController();
  private running: Promise<void> | undefined;

  constructor(options: FollowerOptions) {
    this.o = options;
  }

  start(): void {
    this.running ??= this.loop();
  }

  async stop(): Promise<void> {
    this.controller.abort();
    await this.running;
  }

  private async loop(): Promise<void> {
    const signal = this.controller.signal;
    let backoffMs = 200;
    // Checkpoints are saved at most once a second (and at stop): after a crash at most a second
    // of events is handled again, which at-least-once handlers accept.
    let durableAt = 0; // the last position handled and durable, in order
    let saved = 0;
    let savedAt = 0;
    const save = async () => {
      if (durableAt <= saved) return;
      const at = durableAt;
      await this.o.checkpoints.set(this.o.name, at);
      saved = at;
      savedAt = Date.now();
    };
    /** Batches taken and not yet durable, chained in order; counts the subscriptions, so a batch
     * of an earlier one (read again since) moves nothing. */
    let durables: Promise<void> = Promise.resolve();
    let pending = 0;
    let round = 0;
    while (!signal.aborted) {
      let from = 0;
      try {
        from = Math.max(await this.o.checkpoints.get(this.o.name), durableAt);
      } catch (err) {
        this.o.logger.warn(
          { follower: this.o.name, err: (err as Error).message },
          'checkpoint unreadable; retrying',
        );
        await new Promise((r) => setTimeout(r, backoffMs));
        continue;
      }
      if (signal.aborted) break;
      if (this.o.ready && !(await this.o.ready().catch(() => false))) {
        await new Promise((r) => setTimeout(r, 1000));
        continue;
      }
      const subscription = this.o.store.subscribe(from, {
        batchSize: this.o.batchSize ?? 100,
        lingerMs: this.o.lingerMs,
      });
      const stop = () => subscription.close();
      signal.addEventListener('abort', stop, { once: true });
      const thisRound = ++round;
      let failed: Error | undefined;
      try {
        for await (const batch of subscription) {
          // Batches taken and not yet durable are held in memory (the processor's states not yet
          // saved): a bounded number of them.
          while (pending >= MAX_PENDING) await durables;
          const taken = await this.o.handle(batch);
          const position = batch[batch.length - 1]!.position;
          if (!taken && pending === 0) durableAt = position;
          else {
            pending++;
            durables = durables
              .then(() => taken?.durable)
              .then(
                () => {
                  if (round === thisRound && !failed) durableAt = position;
                },
                (err: Error) => {
                  if (round !== thisRound || failed) return;
                  // Read again from the last durable batch: this one and those after it.
                  failed = err;
                  subscription.close();
                },
              )
              .finally(() => pending--);
          }
          if (failed) break;
          if (Date.now() - savedAt >= 1000) await save();
          backoffMs = 200;
        }
        if (failed) throw failed;
      } catch (err) {
        round++; // what is still pending of this subscription moves nothing
        if (signal.aborted) break;
        this.o.logger.warn(
          { follower: this.o.name, err: (err as Error).message },
          'follower failed; retrying from its checkpoint',
        );
        await new Promise((r) => setTimeout(r, backoffMs));
        backoffMs = Math.min(backoffMs * 2, 10_000);
      } finally {
        signal.removeEventListener('abort', stop);
        subscription.close();
      }
    }
    // Batches taken still becoming durable move the checkpoint if they are within a bound.
    let bounded: NodeJS.Timeout | undefined;
    await Promise.race([durables, new Promise((r) => (bounded = setTimeout(r, STOP_WAIT_MS)))]);
    clearTimeout(bounded);
    await save().catch(() => {});
    await this.o.stopped?.();
  }
}

/** Batches taken and not yet durable before the next read waits for them. */
const MAX_PENDING = 64;
/** At a stop, the longest wait for batches taken to be durable (what is not is read again). */
const STOP_WAIT_MS = 5000;
