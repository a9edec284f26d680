// The console is served by `burrow serve` under /ui/ (its files embedded
// from dist/). JSX is compiled for Preact by Vite's own transform: no
// plugin needed.
import { defineConfig } from 'vite';

// Node's, without pulling in @types/node for one variable.
declare const process: { env: Record<string, string | undefined> };

export default defineConfig({
  base: '/ui/',
  oxc: {
    jsx: { runtime: 'automatic', importSource: 'preact' },
  },
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    target: 'es2022',
    // The server's CSP allows no inline script: keep the module preload
    // helper in the bundle rather than inline.
    modulePreload: { polyfill: false },
    assetsInlineLimit: 0,
  },
  server: {
    // `npm run dev` against a local `burrow serve` (BURROW_URL, default
    // http://127.0.0.1:7878).
    proxy: Object.fromEntries(
      ['/v1', '/ui/api'].map((p) => [
        p,
        { target: process.env.BURROW_URL ?? 'http://127.0.0.1:7878', ws: true },
      ]),
    ),
  },
});
