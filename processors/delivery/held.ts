// The jobs a dispatcher holds (running, or waiting for their subscription's slot), and for the jobs
// handed off by the embedded processor, whether those of one hand-off are durable yet.
import type { Job } from './port.ts';

/** A job this process holds: running or waiting for its subscription's slot. */
export interface Held {
  job: Job;
  /** When it was due (claimed) or came (handed off), ms. */
  due: number;
  /** Handed off and not stored (yet): the hand-off it came with, told when it is. */
  fresh?: Durability;
  /** The write storing a fresh job that stayed too long, while it is under way. */
  spill?: Promise<void>;
  /** Its finish is being written: a fresh one is then not spilled (its finish stores it). */
  recording?: boolean;
}

/** Whether every fresh job of one hand-off is durable: finished (its attempt recorded) or stored. */
export class Durability {
  private left = 0;
  private sealed = false;
  private resolve!: () => void;
  private reject!: (err: Error) => void;
  readonly done = new Promise<void>((resolve, reject) => {
    this.resolve = resolve;
    this.reject = reject;
  });

  constructor() {
    // A hand-off that failed itself leaves nobody waiting on this: its failure must not be an
    // unhandled rejection (which ends the process). Those who wait still see it.
    this.done.catch(() => {});
  }

  add(): void {
    this.left++;
  }

  settle(): void {
    this.left--;
    if (this.sealed && this.left === 0) this.resolve();
  }

  fail(err: Error): void {
    this.reject(err);
  }

  /** No more jobs come: done once those added are settled. */
  seal(): void {
    this.sealed = true;
    if (this.left === 0) this.resolve();
  }
}
