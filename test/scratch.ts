// Each test run's scratch directory: every temporary directory the tests make (data directories,
// SQLite files, the hubs they spawn) goes under one directory of the run, removed when the run
// ends, so that runs do not pile up in the system's temporary directory. Loaded by mocha before
// the test files (`require` in .mocharc.json, `--require` where the config is not read).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const run = mkdtempSync(join(tmpdir(), 'hub-tests-'));
// os.tmpdir() reads TMPDIR at each call, and spawned processes inherit it.
process.env.TMPDIR = run;

export const mochaHooks = {
  afterAll() {
    rmSync(run, { recursive: true, force: true });
  },
};
