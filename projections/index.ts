// Every projection the projector runs. A new read model is added here.
import type { Projection } from './runner.ts';
import { streamCatalog } from './streams.ts';

export const projections: Projection[] = [streamCatalog];

export function projectionNamed(name: string): Projection | undefined {
  return projections.find((p) => p.name === name);
}
