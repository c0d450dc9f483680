#!/usr/bin/env -S node --max-semi-space-size=8
// `hub`. The flag above bounds each thread's young generation (V8's default, 16 MiB a semi-space,
// let the three heaps of `hub start` take about 0.4 GiB more under load; 8 about half that, at
// the same rate: docs/reliability.md). `npm start` and the benchmarks run this line as it is.
//
// Node compiles the hub's modules from its on-disk code cache (NODE_COMPILE_CACHE, else the temp
// dir), which saves about a third of a start; it is turned on here, before they load.
import { enableCompileCache } from 'node:module';

const cache = enableCompileCache();
// The API threads (and processes the hub starts) inherit it.
if (cache.directory) process.env.NODE_COMPILE_CACHE ??= cache.directory;
await import('./commands.ts');
