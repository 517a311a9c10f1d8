import { defineConfig } from 'vite'
import react from '@vitejs/plugin-react'

// The build goes to ../internal/webui/dist, which the Go binary embeds; it is committed, and CI rebuilds it
// and fails on any difference, so the output must depend on the sources only (no sourcemaps, no dates).
export default defineConfig({
  plugins: [react()],
  base: '/',
  build: {
    outDir: '../internal/webui/dist',
    emptyOutDir: true,
    sourcemap: false,
    modulePreload: { polyfill: false },
    reportCompressedSize: true,
    // One app chunk of React, the AI SDK and the markdown pipeline; the highlighter is split off.
    chunkSizeWarningLimit: 700,
  },
  server: {
    proxy: {
      '/v1': { target: 'http://127.0.0.1:8080' },
      '/healthz': { target: 'http://127.0.0.1:8080' },
    },
  },
})
