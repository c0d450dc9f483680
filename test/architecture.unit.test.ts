import assert from 'node:assert/strict';
import { join } from 'node:path';
import { check, checkRepository, importsOf, PENDING, readRules } from './architecture.ts';

// A small tree and its table: the check's fixture, in memory.
const TABLE = `# Architecture

## What each folder owns

| Folder | Owns | May import |
|---|---|---|
| \`domain/\` | decisions | \`domain/\` |
| \`infra/\` | adapters | \`infra/\`, \`domain/\` |
| \`api/\` | HTTP | \`api/\`, \`domain/\`, \`infra/*/port.ts\` |
| \`test/\` | tests | (any) |

## Next section
`;

describe('the import rule (unit)', () => {
  it('reads each folder row of the table, "(any)" included', () => {
    assert.deepEqual(readRules(TABLE), [
      { folder: 'domain/', may: ['domain/'] },
      { folder: 'infra/', may: ['infra/', 'domain/'] },
      { folder: 'api/', may: ['api/', 'domain/', 'infra/*/port.ts'] },
      { folder: 'test/', may: 'any' },
    ]);
  });

  it('finds static, dynamic, re-exported, multi-line and worker imports, not packages or comments', () => {
    const source = [
      "import { a } from '../domain/a.ts';",
      'import {',
      '  b,',
      "} from './b.ts';",
      "import type { C } from '../infra/c.ts';",
      "export { d } from './d.ts';",
      "import './side-effect.ts';",
      "const e = await import('../api/e.ts');",
      "new Worker(new URL('./worker.ts', import.meta.url));",
      "import { Redis } from 'ioredis';",
      "// import { x } from '../api/commented.ts';",
      "/* import { y } from '../api/commented.ts'; */",
    ].join('\n');
    assert.deepEqual(importsOf(source).sort(), [
      '../api/e.ts',
      '../domain/a.ts',
      '../infra/c.ts',
      './b.ts',
      './d.ts',
      './side-effect.ts',
      './worker.ts',
    ]);
  });

  it('refuses a deliberate violation: domain/ importing infra/, api/ importing an adapter', () => {
    const files = new Map([
      [
        'domain/devices.ts',
        "import { refuse } from './errors.ts';\nimport { handle } from '../infra/eventstore/aggregate.ts';",
      ],
      ['domain/errors.ts', ''],
      [
        'api/routes.ts',
        "import type { EventStore } from '../infra/eventstore/port.ts';\nimport { SqliteStore } from '../infra/eventstore/sqlite.ts';",
      ],
      ['infra/eventstore/sqlite.ts', "import { decide } from '../../domain/devices.ts';"],
      ['test/anything.ts', "import { SqliteStore } from '../infra/eventstore/sqlite.ts';"],
    ]);
    assert.deepEqual(check(readRules(TABLE), files).violations, [
      { file: 'domain/devices.ts', imports: 'infra/eventstore/aggregate.ts', folder: 'domain/' },
      { file: 'api/routes.ts', imports: 'infra/eventstore/sqlite.ts', folder: 'api/' },
    ]);
  });

  it('a pending entry excuses the import it names, and is reported once nothing uses it', () => {
    const files = new Map([
      ['domain/devices.ts', "import { handle } from '../infra/eventstore/aggregate.ts';"],
    ]);
    const pending = [
      { from: 'domain/', to: 'infra/eventstore/aggregate.ts', until: 'a move' },
      { from: 'api/', to: 'infra/', until: 'another move, landed' },
    ];
    const { violations, unused } = check(readRules(TABLE), files, pending);
    assert.deepEqual(violations, []);
    assert.deepEqual(unused, [pending[1]]);
  });

  it('the repository keeps docs/ARCHITECTURE.md’s table, with its pending imports each still in use', () => {
    assert.ok(PENDING.every((e) => e.until.length > 0));
    assert.deepEqual(checkRepository(join(import.meta.dirname, '..')), []);
  });
});
