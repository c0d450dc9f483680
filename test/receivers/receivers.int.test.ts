// The Python and Go receivers (receivers/python, receivers/go), each run by its own test tool
// against the shared vectors: every case passes with the file as the signer made it, and a copy
// with a tampered body and a flipped expectation fails exactly those two cases in each. The tools
// must be on the machine (.ci/run installs Debian's python3 and golang-go where they are missing):
// a missing one fails here, it is not skipped.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'mocha';
import { WEBHOOK_VECTORS_FILE, type WebhookVectors } from '../fixtures/webhook-vectors.ts';

const RECEIVERS = new URL('../../receivers/', import.meta.url).pathname;
/** Go where the project's machines have it when it is not on PATH (its official tarball's place). */
const GO = process.env.PATH?.split(':').some((dir) => existsSync(join(dir, 'go')))
  ? 'go'
  : '/usr/local/go/bin/go';

/** A tool's exit status and everything it printed. */
function run(command: string, args: string[], cwd: string, vectorsFile?: string) {
  return new Promise<{ status: number | null; output: string }>((resolve, reject) => {
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      PYTHONDONTWRITEBYTECODE: '1', // no __pycache__ left in the work tree
      GOTOOLCHAIN: 'local', // never download a Go toolchain
      GOFLAGS: '',
    };
    delete env.HUB_WEBHOOK_VECTORS;
    if (vectorsFile) env.HUB_WEBHOOK_VECTORS = vectorsFile;
    const child = spawn(command, args, { cwd, env });
    let output = '';
    child.stdout.on('data', (c) => (output += c));
    child.stderr.on('data', (c) => (output += c));
    child.on('error', (e) =>
      reject(new Error(`${command} could not start (is it installed?): ${e.message}`)),
    );
    child.on('close', (status) => resolve({ status, output }));
  });
}

const receivers = [
  {
    language: 'Python',
    run: (file?: string) => run('python3', ['-m', 'unittest', '-v'], join(RECEIVERS, 'python'), file),
    /** The cases the output reports passed, and failed. */
    passed: (out: string) => [...out.matchAll(/^test_\d+_(\w+) \(.*\) \.\.\. ok$/gm)].map((m) => m[1]),
    failed: (out: string) => [...out.matchAll(/^FAIL: test_\d+_(\w+) /gm)].map((m) => m[1]),
  },
  {
    language: 'Go',
    run: (file?: string) => run(GO, ['test', '-count=1', '-v', './...'], join(RECEIVERS, 'go'), file),
    passed: (out: string) => [...out.matchAll(/^\s*--- PASS: TestVectors\/(\w+) /gm)].map((m) => m[1]),
    failed: (out: string) => [...out.matchAll(/^\s*--- FAIL: TestVectors\/(\w+) /gm)].map((m) => m[1]),
  },
];

describe('receiver libraries against the shared vectors (int)', function () {
  this.timeout(120_000); // a first `go test` compiles
  const vectors: WebhookVectors = JSON.parse(readFileSync(WEBHOOK_VECTORS_FILE, 'utf8'));
  const names = vectors.cases.map((v) => v.name);

  for (const receiver of receivers) {
    it(`${receiver.language}: every vector passes`, async () => {
      const { status, output } = await receiver.run();
      assert.equal(status, 0, output);
      assert.deepEqual(receiver.passed(output), names, output);
    });

    it(`${receiver.language}: a tampered body and a flipped expectation fail, exactly those`, async () => {
      const dir = mkdtempSync(join(tmpdir(), 'hub-vectors-'));
      try {
        const altered: WebhookVectors = structuredClone(vectors);
        const valid = altered.cases.find((v) => v.name === 'valid')!;
        valid.body = valid.body.replace('"temp":"21.5"', '"temp":"21.6"'); // still expected accepted
        const tampered = altered.cases.find((v) => v.name === 'tampered_body')!;
        Object.assign(tampered, { expect: 'accepted', reason: null }); // a refusal turned into acceptance
        const file = join(dir, 'altered-vectors.json');
        writeFileSync(file, JSON.stringify(altered));
        const { status, output } = await receiver.run(file);
        assert.notEqual(status, 0, output);
        assert.deepEqual(receiver.failed(output).sort(), ['tampered_body', 'valid'], output);
        assert.equal(receiver.passed(output).length, names.length - 2, output);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  }
});
