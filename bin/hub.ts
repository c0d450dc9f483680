#!/usr/bin/env node
// `hub`'s program. bin/hub (what `npm start` and the `hub` command run) starts it with the Node
// flags of the configured profile (each thread's young generation: docs/reliability.md); the
// benchmarks start their hubs with the same flags.
//
// Node compiles the hub's modules from its on-disk code cache (NODE_COMPILE_CACHE, else the temp
// dir), which saves about a third of a start; it is turned on here, before they load.
import { enableCompileCache } from 'node:module';

const cache = enableCompileCache();
// The API threads (and processes the hub starts) inherit it.
if (cache.directory) process.env.NODE_COMPILE_CACHE ??= cache.directory;
await import('./commands.ts');
