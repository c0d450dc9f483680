// Follows the event store from a durable checkpoint and hands each batch to a handler with side
// effects (send an email, carry a flag): at least once, in order, resuming after crashes. A
// failing batch is retried from the checkpoint with backoff.
import type { CheckpointStore } from '../../infra/checkpoints.ts';
import type { EventStore, RecordedEvent, SubscribeOptions } from '../../infra/eventstore/port.ts';
import type { Logger } from '../../infra/telemetry.ts';

/** `batchSize` defaults to 100; `lingerMs` to 0 (see SubscribeOptions). */
export interface FollowerOptions extends SubscribeOptions {
  name: string;
  store: EventStore;
  checkpoints: CheckpointStore;
  logger: Logger;
  handle: (batch: RecordedEvent[]) => Promise<void>;
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
    let handled = 0;
    let saved = 0;
    let savedAt = 0;
    const save = async () => {
      if (handled <= saved) return;
      await this.o.checkpoints.set(this.o.name, handled);
      saved = handled;
      savedAt = Date.now();
    };
    while (!signal.aborted) {
      let from = 0;
      try {
        from = Math.max(await this.o.checkpoints.get(this.o.name), handled);
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
      try {
        for await (const batch of subscription) {
          await this.o.handle(batch);
          handled = batch[batch.length - 1]!.position;
          if (Date.now() - savedAt >= 1000) await save();
          backoffMs = 200;
        }
      } catch (err) {
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
    await save().catch(() => {});
    await this.o.stopped?.();
  }
}
