// The web console at /console/: static files served by the hub itself (same origin), a client of
// the public JSON API with the signed-in user's token. No build step: the console's own ES modules
// (console/) and its UI library (Preact with htm, ES modules from node_modules) are read once at
// start, each kept with its gzip and Brotli forms, and served with an ETag (the console's files,
// revalidated) or under a versioned, immutable name (the library's).
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, extname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { brotliCompressSync, constants, gzipSync } from 'node:zlib';
import type { Context } from 'koa';
import { notFound } from './errors.ts';
import { pageHeaders, scriptHash } from './http.ts';
import type { Routes } from './routes.ts';

const CONSOLE_DIR = fileURLToPath(new URL('../console/', import.meta.url));
const TYPES: Record<string, string> = {
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.html': 'text/html; charset=utf-8',
};

/** One file as served: its bytes in each encoding, its type, and how long it may be cached. */
interface Asset {
  type: string;
  etag: string;
  cache: string;
  identity: Buffer;
  gzip: Buffer;
  br: Buffer;
}

function asset(body: Buffer, type: string, cache: string): Asset {
  const hash = createHash('sha256').update(body).digest('base64url').slice(0, 22);
  return {
    type,
    cache,
    etag: hash,
    identity: body,
    gzip: gzipSync(body, { level: 9 }),
    br: brotliCompressSync(body, { params: { [constants.BROTLI_PARAM_QUALITY]: 11 } }),
  };
}

/** The UI library's modules, by the bare name the console imports them by. */
const LIBRARY = [
  { specifier: 'preact', pkg: 'preact', name: 'preact' },
  { specifier: 'preact/hooks', pkg: 'preact', name: 'preact-hooks' },
  { specifier: 'htm', pkg: 'htm', name: 'htm' },
];

const REVALIDATE = 'no-cache'; // kept, but asked again each time: the ETag makes that a 304
const IMMUTABLE = 'public, max-age=31536000, immutable'; // the name changes with the version

/** Everything the console serves, by path under /console/ ('' is the page). */
export interface ConsoleAssets {
  files: Map<string, Asset>;
  /** The page's Content-Security-Policy and other headers. */
  headers: Record<string, string>;
  /** The bytes of JavaScript the page loads at once (every module, preloaded), in an encoding. */
  firstLoadBytes: (encoding: 'br' | 'gzip' | 'identity') => number;
}

export function consoleAssets(): ConsoleAssets {
  const files = new Map<string, Asset>();
  const imports: Record<string, string> = {};
  for (const lib of LIBRARY) {
    const path = fileURLToPath(import.meta.resolve(lib.specifier));
    const version = packageVersion(path, lib.pkg);
    const file = `lib/${lib.name}-${version}.js`;
    // The source map comment names a file we do not serve.
    const source = readFileSync(path, 'utf8').replace(/\n\/\/# sourceMappingURL=\S+\s*$/, '\n');
    files.set(file, asset(Buffer.from(source), TYPES['.js']!, IMMUTABLE));
    imports[lib.specifier] = `/console/${file}`;
  }
  const modules: string[] = [];
  for (const name of readdirSync(CONSOLE_DIR).sort()) {
    const type = TYPES[extname(name)];
    if (!type || name === 'index.html') continue;
    files.set(name, asset(readFileSync(join(CONSOLE_DIR, name)), type, REVALIDATE));
    if (name.endsWith('.js')) modules.push(`/console/${name}`);
  }
  // Bare names resolve through the import map; every module is preloaded, so that the page does
  // not wait for one module to learn of the next.
  const importMap = JSON.stringify({ imports });
  const preloads = [...Object.values(imports), ...modules]
    .map((href) => `<link rel="modulepreload" href="${href}">`)
    .join('\n');
  const html = readFileSync(join(CONSOLE_DIR, 'index.html'), 'utf8').replace(
    '<!-- importmap -->',
    `<script type="importmap">${importMap}</script>\n${preloads}`,
  );
  files.set('', asset(Buffer.from(html), TYPES['.html']!, REVALIDATE));
  const firstLoad = [...Object.values(imports), ...modules].map((href) => href.slice('/console/'.length));
  return {
    files,
    headers: pageHeaders(`'self' '${scriptHash(importMap)}'`, "'self'"),
    firstLoadBytes: (encoding) => firstLoad.reduce((sum, f) => sum + files.get(f)![encoding].length, 0),
  };
}

/** The version of the package `name` a file of it belongs to (its package.json may not be exported). */
function packageVersion(file: string, name: string): string {
  for (let dir = dirname(file); dir !== dirname(dir); dir = dirname(dir)) {
    try {
      const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
      if (pkg.name === name) return pkg.version;
    } catch {}
  }
  throw new Error(`no package.json of ${name} above ${file}`);
}

/** The encoding to answer in: Brotli, else gzip, else none (q=0 refuses one). */
export function chooseEncoding(acceptEncoding: string): 'br' | 'gzip' | 'identity' {
  const accepted = new Set<string>();
  for (const part of acceptEncoding.toLowerCase().split(',')) {
    const [name, ...params] = part.trim().split(';');
    if (params.some((p) => /^\s*q=0(\.0*)?\s*$/.test(p))) continue;
    if (name) accepted.add(name.trim());
  }
  if (accepted.has('br')) return 'br';
  if (accepted.has('gzip') || accepted.has('*')) return 'gzip';
  return 'identity';
}

export function consoleRoutes() {
  const assets = consoleAssets();
  const serve = (ctx: Context, path: string) => {
    const file = assets.files.get(path);
    if (!file) throw notFound(`No console file ${path}.`);
    const encoding = chooseEncoding(ctx.get('Accept-Encoding'));
    ctx.set({
      'Cache-Control': file.cache,
      Vary: 'Accept-Encoding',
      'X-Content-Type-Options': 'nosniff',
      ...(path === '' ? assets.headers : {}),
    });
    // One tag per encoding: the bytes differ (RFC 9110, 8.8.3.3).
    ctx.etag = encoding === 'identity' ? file.etag : `${file.etag}-${encoding}`;
    ctx.type = file.type;
    ctx.status = 200;
    if (ctx.fresh) {
      ctx.status = 304;
      return;
    }
    if (encoding !== 'identity') ctx.set('Content-Encoding', encoding);
    ctx.body = file[encoding];
  };
  return (routes: Routes) => {
    routes.add({
      method: 'get',
      path: '/console/',
      tag: 'console',
      summary: 'The web console (an HTML page; it uses this API with the signed-in user’s token).',
      description: 'docs/console.md says what each of its pages does and which routes it uses.',
      security: 'none',
      responses: { 200: { description: 'The console’s page.' } },
      handler: (ctx) => serve(ctx, ''),
    });
    routes.add({
      method: 'get',
      path: '/console/{file}',
      tag: 'console',
      summary: 'One of the console’s modules or its style sheet (revalidated by ETag).',
      security: 'none',
      responses: { 200: { description: 'The file, gzip or Brotli when accepted.' } },
      handler: (ctx) => serve(ctx, ctx.params.file!),
    });
    routes.add({
      method: 'get',
      path: '/console/lib/{file}',
      tag: 'console',
      summary: 'A module of the console’s UI library, under a versioned name (cached for good).',
      security: 'none',
      responses: { 200: { description: 'The file, gzip or Brotli when accepted.' } },
      handler: (ctx) => serve(ctx, `lib/${ctx.params.file!}`),
    });
  };
}
