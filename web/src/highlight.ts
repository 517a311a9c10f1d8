// Code highlighting for fenced code blocks with a small, explicit set of highlight.js grammars (the whole
// highlight.js would be most of the bundle). A block in another language, or none, stays plain text.
// Loaded on demand (a chunk of its own) when a message first holds a fenced code block.
import type { Element, ElementContent, Root } from 'hast'
import type { LanguageFn } from 'highlight.js'
import { createLowlight } from 'lowlight'
import { codeLanguage, hastText } from './hast'
import bash from 'highlight.js/lib/languages/bash'
import css from 'highlight.js/lib/languages/css'
import diff from 'highlight.js/lib/languages/diff'
import go from 'highlight.js/lib/languages/go'
import javascript from 'highlight.js/lib/languages/javascript'
import json from 'highlight.js/lib/languages/json'
import markdown from 'highlight.js/lib/languages/markdown'
import python from 'highlight.js/lib/languages/python'
import sql from 'highlight.js/lib/languages/sql'
import typescript from 'highlight.js/lib/languages/typescript'
import xml from 'highlight.js/lib/languages/xml'
import yaml from 'highlight.js/lib/languages/yaml'

const grammars: Record<string, LanguageFn> = {
  bash,
  css,
  diff,
  go,
  javascript,
  json,
  markdown,
  python,
  sql,
  typescript,
  xml,
  yaml,
}

const lowlight = createLowlight(grammars)
// The grammars bring their usual aliases (js, ts, py, sh, html, yml, md, golang …); a few more that
// models write.
lowlight.registerAlias({
  bash: ['shell', 'console', 'shellsession', 'zsh'],
  javascript: ['node', 'javascriptreact'],
  typescript: ['typescriptreact'],
  json: ['jsonc', 'json5'],
  xml: ['svg', 'vue'],
  diff: ['patch'],
  sql: ['postgresql', 'postgres', 'sqlite', 'mysql'],
})

function highlightCode(code: Element) {
  const lang = codeLanguage(code).toLowerCase()
  if (!lang || !lowlight.registered(lang)) return
  const text = hastText(code)
  try {
    const result = lowlight.highlight(lang, text)
    code.children = result.children as ElementContent[]
    const cls = code.properties.className
    code.properties.className = [...(Array.isArray(cls) ? cls : []), 'hljs']
  } catch {
    // leave the block as text
  }
}

function walk(node: Root | Element) {
  for (const child of node.children) {
    if (child.type !== 'element') continue
    if (child.tagName === 'pre') {
      for (const c of child.children) {
        if (c.type === 'element' && c.tagName === 'code') highlightCode(c)
      }
      continue
    }
    walk(child)
  }
}

/** rehypeHighlight is a rehype plugin: it highlights `pre > code` blocks in place. */
export function rehypeHighlight() {
  return (tree: Root) => walk(tree)
}
