#!/usr/bin/env node
// `hub`'s program. bin/hub starts it with the Node flags of the configured profile (each thread's
// young generation: docs/reliability.md); `npm start`, the `hub` command and the benchmarks go
// through it.
//
// Node compiles the hub's modules from its on-disk code cache (NODE_COMPILE_CACHE, else the temp
// dir), which saves about a third of a start; it is turned on here, before they load.
import { enableCompileCache } from 'node:module';

const cache = enableCompileCache();
// The API threads (and processes the hub starts) inherit it.
if (cache.directory) process.env.NODE_COMPILE_CACHE ??= cache.directory;
await import('./commands.ts');
