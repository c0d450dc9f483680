// The scale-out benchmark's accounting (bench/scale.ts), kept apart from its processes so that it is
// unit-tested without them (test/bench/scale.unit.test.ts): who owned which partition in each
// sample of a consumer group, and what the receiver got against what the API accepted.

/** One look at a consumer group, as the broker describes it. */
export interface GroupSample {
  at: number;
  group: string;
  /** The broker's group state: Stable, PreparingRebalance, CompletingRebalance, Empty… */
  state: string;
  /** Each member (by its client id, `hub-<pid>`) and the partitions of the topic assigned to it. */
  members: { client: string; partitions: number[] }[];
}

export interface Ownership {
  samples: number;
  /** Samples in which the group was Stable: each of these must cover every partition once. */
  stable: number;
  /** Samples in which a partition had two or more owners, each with the partition and its owners. */
  overlaps: { at: number; partition: number; owners: string[] }[];
  /** Stable samples in which some partition had no owner. */
  uncovered: { at: number; partitions: number[] }[];
  /** Times a partition's owner changed from one sample to the next (an owner to none counts not). */
  handovers: number;
  /** The largest number of members seen at once. */
  mostMembers: number;
}

/** `partitions`: the topic's partition count. */
export function ownership(samples: GroupSample[], partitions: number): Ownership {
  const out: Ownership = {
    samples: samples.length,
    stable: 0,
    overlaps: [],
    uncovered: [],
    handovers: 0,
    mostMembers: 0,
  };
  const last = new Map<number, string>(); // partition → its last owner seen
  for (const s of [...samples].sort((a, b) => a.at - b.at)) {
    out.mostMembers = Math.max(out.mostMembers, s.members.length);
    const owners = new Map<number, string[]>();
    for (const m of s.members)
      for (const p of m.partitions) owners.set(p, [...(owners.get(p) ?? []), m.client]);
    for (const [partition, who] of owners) {
      if (who.length > 1) out.overlaps.push({ at: s.at, partition, owners: who });
      const before = last.get(partition);
      if (before !== undefined && before !== who[0]) out.handovers++;
      last.set(partition, who[0]!);
    }
    if (s.state === 'Stable') {
      out.stable++;
      const missing = Array.from({ length: partitions }, (_, p) => p).filter((p) => !owners.has(p));
      if (missing.length > 0) out.uncovered.push({ at: s.at, partitions: missing });
    }
  }
  return out;
}

/** One POST the receiver got: when, the webhook event's id, the write it came from (`n`, the
 * device-meta value written), and the attempt's id (its Webhook-Id header). */
export interface Arrival {
  at: number;
  event: string;
  n: string;
  attempt: string;
}

export interface Deliveries {
  accepted: number;
  /** Accepted writes whose event reached the receiver at least once. */
  delivered: number;
  /** Accepted writes the receiver never got. */
  lost: string[];
  /** Deliveries beyond the first of an event id. */
  duplicates: number;
  /** Of those, deliveries under an attempt id already seen (the same attempt sent twice), and
   * under a new one (the job attempted again: a retry, a lease taken over, the job made twice). */
  sameAttempt: number;
  newAttempt: number;
  /** Writes whose deliveries carried two or more event ids: the write derived twice (an error,
   * not a duplicate of at-least-once, since a receiver dedupes by event id). */
  derivedTwice: string[];
  /** Events delivered for writes not accepted: a write stored though its answer was lost. */
  unaccepted: number;
  /** Each accepted write's first arrival, in ms after its acceptance. */
  latencies: Map<string, number>;
}

/** Every accepted write (its `n`, and when its 200 came) against what the receiver got. */
export function deliveries(accepted: Map<string, number>, arrivals: Arrival[]): Deliveries {
  const first = new Map<string, number>(); // n → first arrival
  const eventsOf = new Map<string, Set<string>>(); // n → event ids delivered
  const attemptsOf = new Map<string, Set<string>>(); // event id → attempt ids seen
  let duplicates = 0;
  let sameAttempt = 0;
  let newAttempt = 0;
  let unaccepted = 0;
  for (const a of arrivals) {
    const attempts = attemptsOf.get(a.event);
    if (attempts) {
      duplicates++;
      if (attempts.has(a.attempt)) sameAttempt++;
      else newAttempt++;
      attempts.add(a.attempt);
    } else {
      attemptsOf.set(a.event, new Set([a.attempt]));
      if (!accepted.has(a.n)) unaccepted++;
    }
    const events = eventsOf.get(a.n) ?? new Set<string>();
    events.add(a.event);
    eventsOf.set(a.n, events);
    if (!first.has(a.n) || a.at < first.get(a.n)!) first.set(a.n, a.at);
  }
  const latencies = new Map<string, number>();
  const lost: string[] = [];
  for (const [n, at] of accepted) {
    const arrived = first.get(n);
    if (arrived === undefined) lost.push(n);
    else latencies.set(n, arrived - at);
  }
  return {
    accepted: accepted.size,
    delivered: accepted.size - lost.length,
    lost,
    duplicates,
    sameAttempt,
    newAttempt,
    derivedTwice: [...eventsOf].filter(([, events]) => events.size > 1).map(([n]) => n),
    unaccepted,
    latencies,
  };
}

/** The longest time without an arrival within [from, to), its edges included. */
export function longestGap(arrivalTimes: number[], from: number, to: number): { ms: number; at: number } {
  const inside = arrivalTimes.filter((t) => t >= from && t < to).sort((a, b) => a - b);
  let best = { ms: 0, at: from };
  let previous = from;
  for (const t of [...inside, to]) {
    if (t - previous > best.ms) best = { ms: t - previous, at: previous };
    previous = t;
  }
  return best;
}
