// The subscriptions as the dispatcher calls them: each one's state, a signer with the secrets in
// force and its URL checked against the egress rules, kept for the subscriptions most in use.
import { LRUCache } from 'lru-cache';
import { type Subscription, subscriptions, webhookStream } from '../../domain/subscriptions.ts';
import { load, loadedNow } from '../../infra/eventstore/aggregate.ts';
import type { EventStore } from '../../infra/eventstore/port.ts';
import { unseal } from '../../infra/secrets.ts';
import { type Egress, EgressError } from './egress.ts';
import { WebhookSigner } from './signing.ts';
import type { Target } from './webhook-http.ts';

/** A subscription as the dispatcher calls it. */
export interface Endpoint {
  sub: Subscription;
  /** Signs with the secrets in force: the current one, and the previous while its window lasts. */
  signer: WebhookSigner;
  /** How many secrets the signer has (the previous one drops out when its window ends). */
  sealed: number;
  /** The URL checked against the egress rules as undici takes it, or why it may not be called. */
  target: Target | EgressError;
  /** When it was read, ms. */
  at: number;
}

export interface EndpointsOptions {
  store: EventStore;
  sealKey: Buffer;
  egress: Egress;
  /** How long after a rotation the previous secret still signs, ms (0: until the next rotation). */
  rotationWindowMs: number;
  /** Subscriptions whose signer and target are kept (HUB_STATE_CACHE_ENTRIES). */
  cacheEntries?: number;
}

export class Endpoints {
  private readonly o: EndpointsOptions;
  private readonly cache: LRUCache<string, Endpoint>;

  constructor(options: EndpointsOptions) {
    this.o = options;
    this.cache = new LRUCache({ max: options.cacheEntries ?? 10_000 });
  }

  /** The subscription as this dispatcher uses it. The embedded store's aggregate cache is
   * authoritative and cheap, so a deletion, a pause or a new URL holds from the next attempt on,
   * answered without a promise when no API thread shares the store, and by a read of the stream's
   * tail that the store answers from memory when one does. Elsewhere a view at most a second old
   * spares the store a round trip per attempt. */
  get(id: string): Endpoint | undefined | Promise<Endpoint | undefined> {
    const now = Date.now();
    const hit = this.cache.get(id);
    const { store } = this.o;
    if (hit && !store.exclusiveWriter && !store.localReads && now - hit.at < 1000) return hit;
    const stream = webhookStream(id);
    const loaded = loadedNow(store, stream, subscriptions);
    if (loaded) return this.cached(id, loaded.state, hit, now);
    return load(store, stream, subscriptions).then(({ state }) => this.cached(id, state, hit, now));
  }

  private cached(
    id: string,
    state: Subscription,
    hit: Endpoint | undefined,
    now: number,
  ): Endpoint | undefined {
    if (!state.id) return undefined;
    // The previous secret signs beside the new one until the window ends or the next rotation.
    const overlapEnds =
      this.o.rotationWindowMs === 0 ? Number.POSITIVE_INFINITY : state.rotated + this.o.rotationWindowMs;
    const sealed = [state.secretSealed];
    if (state.previousSealed && now < overlapEnds) sealed.push(state.previousSealed);
    const same = hit && hit.sealed === sealed.length && hit.sub.secretSealed === state.secretSealed;
    if (same && hit.sub === state) {
      hit.at = now; // the very state read before: nothing to work out again
      return hit;
    }
    const signer = same ? hit.signer : new WebhookSigner(sealed.map((s) => unseal(this.o.sealKey, s)));
    const entry = { sub: state, signer, sealed: sealed.length, target: this.checked(state.url), at: now };
    this.cache.set(id, entry);
    return entry;
  }

  /** A subscription's URL by the egress rules that need no lookup (the connector's lookup checks
   * a name's addresses at every connection). */
  private checked(raw: string): Target | EgressError {
    try {
      const { url } = this.o.egress.checkTarget(raw);
      return { origin: url.origin, path: `${url.pathname}${url.search}` };
    } catch (err) {
      if (err instanceof EgressError) return err;
      throw err;
    }
  }
}
