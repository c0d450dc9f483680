// Every projection the projector runs. A new read model is added here.
import { accountList } from './accounts.ts';
import { appList } from './apps.ts';
import { deviceList } from './devices.ts';
import type { Projection } from './runner.ts';
import { streamCatalog } from './streams.ts';
import { webhookList } from './webhooks.ts';

export const projections: Projection[] = [streamCatalog, accountList, appList, deviceList, webhookList];

export function projectionNamed(name: string): Projection | undefined {
  return projections.find((p) => p.name === name);
}
