// The import rule: docs/ARCHITECTURE.md's table "What each folder owns" says, per folder, what its
// files may import; this reads every relative import of the repository's .ts files and reports
// those the table does not allow. The table is the rule (one declaration, read by people and by
// this check). `npm run lint` runs it (`node test/architecture.ts`); so does the unit tier
// (test/architecture.unit.test.ts, which also shows that a deliberate violation fails).
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, posix, relative } from 'node:path';

/** A folder's row: what its files may import, as folder prefixes (`api/`) or file patterns
 * (`infra/*\/port.ts`, `*` within one path segment); `any` when the row says "(any)". */
export interface FolderRule {
  folder: string;
  may: string[] | 'any';
}

export interface Violation {
  file: string;
  imports: string;
  /** The row that refused it. */
  folder: string;
}

/**
 * Imports that break the table today because an issue-42 move has not landed yet, each naming the
 * move that removes it. From and to are folder prefixes or files. The check fails on an entry no
 * import uses any more, so that each goes once its move lands.
 */
export const PENDING: Array<{ from: string; to: string; until: string }> = [];

/** Reads the table's rows: | `folder/` | owns | may import |. */
export function readRules(markdown: string): FolderRule[] {
  const start = markdown.indexOf('## What each folder owns');
  if (start < 0) throw new Error('docs/ARCHITECTURE.md has no "What each folder owns" table');
  const rules: FolderRule[] = [];
  for (const line of markdown.slice(start).split('\n').slice(1)) {
    if (line.startsWith('## ')) break;
    const cells = line.split('|').map((c) => c.trim());
    // ['', folder, owns, may import, '']
    const folder = /^`([^`]+\/)`$/.exec(cells[1] ?? '')?.[1];
    if (!folder) continue;
    const cell = cells[3] ?? '';
    const may = cell === '(any)' ? 'any' : [...cell.matchAll(/`([^`]+)`/g)].map((m) => m[1] as string);
    if (may !== 'any' && may.length === 0) throw new Error(`the row of ${folder} says nothing it may import`);
    rules.push({ folder, may });
  }
  if (rules.length === 0) throw new Error('the "What each folder owns" table has no rows');
  return rules;
}

/** The relative specifiers a source imports: static and dynamic imports, re-exports, and the
 * `new URL('./x.ts', import.meta.url)` of a worker's file. Comments are skipped. */
export function importsOf(source: string): string[] {
  const code = source.replace(/\/\*[\s\S]*?\*\//g, '').replace(/^\s*\/\/.*$/gm, '');
  const found: string[] = [];
  const patterns = [
    /^\s*(?:import|export)\b[^;'"]*?\bfrom\s*['"]([^'"]+)['"]/gm,
    /^\s*import\s*['"]([^'"]+)['"]/gm,
    /\bimport\(\s*['"]([^'"]+)['"]\s*\)/g,
    /\bnew URL\(\s*['"]([^'"]+\.ts)['"]\s*,\s*import\.meta\.url/g,
  ];
  for (const pattern of patterns)
    for (const m of code.matchAll(pattern)) if (m[1]?.startsWith('.')) found.push(m[1]);
  return found;
}

const matches = (pattern: string, path: string): boolean => {
  if (pattern.endsWith('/')) return path.startsWith(pattern);
  const re = new RegExp(`^${pattern.replace(/[.+?^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '[^/]*')}$`);
  return re.test(path);
};

/**
 * What breaks the rules among `files` (repository-relative path → source). A file is ruled by the
 * row of its longest folder; a file under no row is not checked, and a folder no row allows is
 * refused to everyone. `pending` entries excuse the imports they name; `unused` lists the entries
 * that excused nothing.
 */
export function check(
  rules: FolderRule[],
  files: Map<string, string>,
  pending: typeof PENDING = [],
): { violations: Violation[]; unused: typeof PENDING } {
  const byLength = [...rules].sort((a, b) => b.folder.length - a.folder.length);
  const used = new Set<(typeof PENDING)[number]>();
  const violations: Violation[] = [];
  for (const [file, source] of files) {
    const rule = byLength.find((r) => file.startsWith(r.folder));
    if (!rule || rule.may === 'any') continue;
    for (const spec of importsOf(source)) {
      const target = posix.normalize(posix.join(posix.dirname(file), spec));
      if (rule.may.some((p) => matches(p, target))) continue;
      const excuse = pending.find((e) => matches(e.from, file) && matches(e.to, target));
      if (excuse) used.add(excuse);
      else violations.push({ file, imports: target, folder: rule.folder });
    }
  }
  return { violations, unused: pending.filter((e) => !used.has(e)) };
}

/** The repository's .ts files outside node_modules, by repository-relative path. */
export function sourcesUnder(root: string): Map<string, string> {
  const files = new Map<string, string>();
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      if (entry.name.startsWith('.') || entry.name === 'node_modules') continue;
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (entry.name.endsWith('.ts'))
        files.set(relative(root, path).split('\\').join('/'), readFileSync(path, 'utf8'));
    }
  };
  walk(root);
  return files;
}

/** The check of the repository at `root`, as lines to print; empty when it passes. */
export function checkRepository(root: string): string[] {
  const rules = readRules(readFileSync(join(root, 'docs', 'ARCHITECTURE.md'), 'utf8'));
  const { violations, unused } = check(rules, sourcesUnder(root), PENDING);
  return [
    ...violations.map(
      (v) =>
        `${v.file} imports ${v.imports}, which the row of ${v.folder} in docs/ARCHITECTURE.md does not allow`,
    ),
    ...unused.map(
      (e) =>
        `the pending import ${e.from} → ${e.to} (${e.until}) is gone: remove it from test/architecture.ts`,
    ),
  ];
}

if (import.meta.main) {
  const problems = checkRepository(join(dirname(new URL(import.meta.url).pathname), '..'));
  for (const line of problems) console.error(line);
  if (problems.length > 0) process.exit(1);
}
