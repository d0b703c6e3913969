// Builds the dashboard into coordinator/ui/dist: index.html, app.js, app.css
// (or into the folder UI_OUT names: make ui-check builds beside the tree,
// never in it, as Go builds may be embedding dist meanwhile).
import { build } from 'esbuild';
import { copyFileSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const out = process.env.UI_OUT || join(here, '..', 'coordinator', 'ui', 'dist');

rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });

await build({
  absWorkingDir: here,
  entryPoints: { app: join(here, 'src', 'main.jsx') },
  outdir: out,
  bundle: true,
  minify: true,
  format: 'iife',
  target: ['es2020'],
  platform: 'browser',
  jsx: 'automatic',
  jsxImportSource: 'preact',
  sourcemap: false,
  legalComments: 'eof',
  charset: 'utf8',
  define: { 'process.env.NODE_ENV': '"production"' },
  logLevel: 'warning',
});

copyFileSync(join(here, 'index.html'), join(out, 'index.html'));

const want = ['app.css', 'app.js', 'index.html'];
const got = readdirSync(out).sort();
if (got.join() !== want.join()) {
  throw new Error(`unexpected build output: ${got.join(', ')}`);
}
