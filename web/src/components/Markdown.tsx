// Markdown as React elements. Raw HTML in the text is shown as text (react-markdown's default without
// rehype-raw): nothing the model, a tool or the user wrote is ever parsed as HTML.
import { memo, useEffect, useReducer, useState, type ComponentProps } from 'react'
import Markdown, { type Components, type ExtraProps } from 'react-markdown'
import { remarkGfm } from '../gfm'
import type { Root } from 'hast'
import { codeLanguage, hastText } from '../hast'
import { CheckIcon, CopyIcon } from './icons'

const remarkPlugins = [remarkGfm]
const noPlugins: [] = []

// The highlighter is a chunk of its own, loaded when a message first holds a fenced code block; until
// then (a moment) code shows plain.
type Plugin = () => (tree: Root) => void
let highlighter: Plugin[] | null = null
let loading: Promise<void> | null = null
const waiting = new Set<() => void>()

function loadHighlighter() {
  loading ??= import('../highlight').then(
    (m) => {
      highlighter = [m.rehypeHighlight]
      for (const f of waiting) f()
    },
    () => {
      loading = null // try again with the next block
    },
  )
}

// Fetched once the page is idle as well, so that the first code block is highlighted as it streams.
if (typeof window !== 'undefined') {
  const idle = window.requestIdleCallback ?? ((f: () => void) => window.setTimeout(f, 1500))
  idle(() => loadHighlighter())
}

function useHighlighter(needed: boolean): Plugin[] {
  const [, rerender] = useReducer((n: number) => n + 1, 0)
  useEffect(() => {
    if (!needed || highlighter) return
    waiting.add(rerender)
    loadHighlighter()
    return () => {
      waiting.delete(rerender)
    }
  }, [needed])
  return highlighter ?? noPlugins
}

const fence = /(^|\n)\s{0,3}(```|~~~)/

export function CopyButton({ text, label = 'Copy', className = 'icon-btn' }: { text: string; label?: string; className?: string }) {
  const [copied, setCopied] = useState(false)
  return (
    <button
      type="button"
      className={className}
      title={copied ? 'Copied' : label}
      aria-label={copied ? 'Copied' : label}
      onClick={() => {
        navigator.clipboard?.writeText(text).then(
          () => {
            setCopied(true)
            window.setTimeout(() => setCopied(false), 1500)
          },
          () => undefined, // no clipboard permission: nothing to say
        )
      }}
    >
      {copied ? <CheckIcon /> : <CopyIcon />}
    </button>
  )
}

function Pre({ node, children, ...rest }: ComponentProps<'pre'> & ExtraProps) {
  const code = node?.children.find((c) => c.type === 'element' && c.tagName === 'code')
  const lang = code && code.type === 'element' ? codeLanguage(code) : ''
  const text = node ? hastText(node) : ''
  return (
    <div className="code-block">
      <div className="code-head">
        <span className="code-lang">{lang || 'text'}</span>
        <CopyButton text={text.replace(/\n$/, '')} label="Copy code" />
      </div>
      <pre {...rest}>{children}</pre>
    </div>
  )
}

function Link({ node: _node, href, children, ...rest }: ComponentProps<'a'> & ExtraProps) {
  return (
    <a {...rest} href={href} target="_blank" rel="noopener noreferrer nofollow">
      {children}
    </a>
  )
}

// Images in a model's markdown are not loaded (a remote image can carry data out in its URL): a link.
function Img({ src, alt }: ComponentProps<'img'> & ExtraProps) {
  if (!src || typeof src !== 'string') return <span>{alt}</span>
  return (
    <a href={src} target="_blank" rel="noopener noreferrer nofollow" className="md-img-link">
      🖼 {alt || src}
    </a>
  )
}

function Table({ node: _node, children, ...rest }: ComponentProps<'table'> & ExtraProps) {
  return (
    <div className="table-wrap">
      <table {...rest}>{children}</table>
    </div>
  )
}

const components: Components = { pre: Pre, a: Link, img: Img, table: Table }

type Props = { text: string; className?: string; testId?: string }

/** MarkdownText renders one text part; memoized so that a streaming message re-renders only the part
 * that grows. */
export const MarkdownText = memo(function MarkdownText({ text, className = 'md', testId }: Props) {
  const rehypePlugins = useHighlighter(fence.test(text))
  return (
    <div className={className} data-testid={testId}>
      <Markdown remarkPlugins={remarkPlugins} rehypePlugins={rehypePlugins} components={components}>
        {text}
      </Markdown>
    </div>
  )
})
