import { MemoryReadStore } from '../../infra/readstore/memory.ts';
import { readStoreContract } from './contract.ts';

readStoreContract('embedded (memory)', async () => ({
  open: async () => new MemoryReadStore(),
  cleanup: async () => {},
}));
