// Small helpers over hast (the HTML syntax tree react-markdown renders from).
import type { Element, ElementContent, Root, RootContent } from 'hast'

/** The language of a `<code>` element: its `language-*` class. */
export function codeLanguage(node: Element): string {
  const cls: unknown = node.properties?.className
  const list: unknown[] = Array.isArray(cls) ? cls : typeof cls === 'string' ? cls.split(/\s+/) : []
  for (const c of list) {
    if (typeof c === 'string' && c.startsWith('language-')) return c.slice('language-'.length)
  }
  return ''
}

/** The text of a hast node. */
export function hastText(node: Root | RootContent | ElementContent): string {
  if (node.type === 'text') return node.value
  if ('children' in node) return node.children.map((c) => hastText(c as RootContent)).join('')
  return ''
}
