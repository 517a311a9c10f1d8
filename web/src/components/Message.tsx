// One message of the conversation. User text is shown as plain text; assistant text as markdown; every
// other part (reasoning, tool calls, images, suggestions, payloads) in order.
import { memo, type ReactNode } from 'react'
import type { ChatMessage, PayloadData, SuggestedAction, Suggestions, ToolProgress, Usage } from '../api'
import { CopyButton, MarkdownText } from './Markdown'
import { InspectIcon, RetryIcon, SparkIcon } from './icons'
import { Payload, isObject } from './Payload'
import { ElicitationCard } from './Elicitation'
import { ToolCard, type Decide, type ToolPartLike } from './ToolCard'

type Part = ChatMessage['parts'][number]

export type MessageProps = {
  message: ChatMessage
  streaming: boolean
  /** the chat is busy (sending or streaming): suggestions and regenerate wait */
  busy: boolean
  canRegenerate: boolean
  progress: Record<string, ToolProgress>
  onSend: (text: string) => void
  /** onAction runs a suggested action whose handler is the server */
  onAction: (a: SuggestedAction) => void
  onRegenerate: () => void
  onDiagnostics: (runId: string) => void
  /** decide answers the calls that wait for a person; only the last message's can be decided */
  decide?: Decide
}

function textOf(m: ChatMessage): string {
  return m.parts
    .filter((p): p is Extract<Part, { type: 'text' }> => p.type === 'text')
    .map((p) => p.text)
    .join('\n\n')
}

function isImage(mediaType: string | undefined) {
  return typeof mediaType === 'string' && mediaType.startsWith('image/')
}

/** localURL lets through the URLs an image may load from: data:, blob: and paths on chatd itself (stored
 * attachments are links to /v1/sessions/…/attachments/n). Nothing is fetched from another site. */
function localURL(url: unknown): string | undefined {
  if (typeof url !== 'string') return undefined
  return /^(data:|blob:|\/(?![/\\]))/i.test(url) ? url : undefined
}

function FilePart({ mediaType, url, filename }: { mediaType: string; url: string; filename?: string }) {
  const local = localURL(url)
  if (local && isImage(mediaType)) {
    return (
      <a className="message-image-link" href={local} target="_blank" rel="noopener noreferrer">
        <img className="message-image" data-testid="message-image" src={local} alt={filename || 'image'} loading="lazy" />
      </a>
    )
  }
  const href = local ?? (typeof url === 'string' && /^https?:/i.test(url) ? url : undefined)
  if (!href) return null
  return (
    <a className="file-chip" href={href} download={local ? filename || 'file' : undefined} target="_blank" rel="noopener noreferrer nofollow">
      📎 {filename || mediaType}
    </a>
  )
}

type Choice = { label: string; send: string }

function choice(v: unknown, keys: string[]): Choice | null {
  if (typeof v === 'string' || typeof v === 'number' || typeof v === 'boolean') {
    const s = String(v)
    return s ? { label: s, send: s } : null
  }
  if (!isObject(v)) return null
  const label = ['label', 'title', 'text', 'name', 'value'].map((k) => v[k]).find((x) => typeof x === 'string' || typeof x === 'number')
  const send = keys.map((k) => v[k]).find((x) => typeof x === 'string' || typeof x === 'number')
  if (label === undefined && send === undefined) return null
  return { label: String(label ?? send), send: String(send ?? label) }
}

function serverAction(v: unknown): SuggestedAction | null {
  if (!isObject(v) || v.handler !== 'server' || typeof v.action !== 'string' || !v.action) return null
  return { label: typeof v.label === 'string' && v.label ? v.label : v.action, action: v.action, handler: 'server', data: v.data }
}

function SuggestionsView(props: { data: Suggestions; disabled: boolean; onSend: (t: string) => void; onAction: (a: SuggestedAction) => void }) {
  const { data, disabled, onSend, onAction } = props
  const values = (Array.isArray(data?.values) ? data.values : []).map((v) => choice(v, ['value', 'label', 'text'])).filter((c): c is Choice => c !== null)
  const raw = Array.isArray(data?.actions) ? data.actions : []
  if (!values.length && !raw.length) return null
  return (
    <div className="suggestions" role="group" aria-label="Suggestions">
      {values.map((c, i) => (
        <button key={`v${i}`} type="button" className="suggestion" data-testid="suggestion" disabled={disabled} onClick={() => onSend(c.send)}>
          {c.label}
        </button>
      ))}
      {raw.map((v, i) => {
        const server = serverAction(v)
        if (server) {
          return (
            <button key={`a${i}`} type="button" className="suggestion action" data-testid="suggested-action" data-handler="server"
              data-tool={server.action} title={`Runs the tool ${server.action}`} disabled={disabled} onClick={() => onAction(server)}>
              <SparkIcon /> {server.label}
            </button>
          )
        }
        // A client action: this UI has no application to hand it to, so it asks for it in words — its
        // label (chatd keeps label, action, handler and data of an action, nothing else).
        const c = choice(v, ['label', 'action'])
        if (!c) return null
        return (
          <button key={`a${i}`} type="button" className="suggestion action" data-testid="suggested-action" data-handler="client"
            disabled={disabled} onClick={() => onSend(c.send)}>
            <SparkIcon /> {c.label}
          </button>
        )
      })}
    </div>
  )
}

function PayloadPart({ data }: { data: PayloadData | unknown }) {
  if (isObject(data) && 'data' in data && typeof data.summary === 'string') {
    const p = data as PayloadData
    return (
      <section className={`payload-part ${p.source}`} data-testid="payload-part" data-payload-id={p.id} data-source={p.source}>
        <Payload data={p.data} title={p.summary} />
      </section>
    )
  }
  return <Payload data={data} />
}

function usageText(u: Usage | undefined): string {
  if (!u) return ''
  const parts: string[] = []
  if (u.input_tokens) parts.push(`${u.input_tokens.toLocaleString()} in`)
  if (u.output_tokens) parts.push(`${u.output_tokens.toLocaleString()} out`)
  if (u.cache_read_tokens) parts.push(`${u.cache_read_tokens.toLocaleString()} cached`)
  return parts.join(' · ')
}

function UserMessage({ message }: { message: ChatMessage }) {
  const text = textOf(message)
  return (
    <article className="msg user" data-testid="message" data-role="user" data-message-id={message.id}>
      <div className="user-content">
        {message.parts.some((p) => p.type === 'file') ? (
          <div className="user-files">
            {message.parts.map((p, i) => (p.type === 'file' ? <FilePart key={i} mediaType={p.mediaType} url={p.url} filename={p.filename} /> : null))}
          </div>
        ) : null}
        {text ? <div className="bubble">{text}</div> : null}
      </div>
      {text ? (
        <div className="msg-actions">
          <CopyButton text={text} label="Copy message" />
        </div>
      ) : null}
    </article>
  )
}

function AssistantMessage(props: MessageProps) {
  const { message, streaming, busy, canRegenerate, progress, onSend, onAction, onRegenerate, onDiagnostics, decide } = props
  const meta = message.metadata
  const runId = meta?.run_id
  const text = textOf(message)
  const lastIndex = message.parts.length - 1
  const out: ReactNode[] = []
  message.parts.forEach((p, i) => {
    const key = `${i}`
    switch (p.type) {
      case 'text':
        if (p.text) out.push(<MarkdownText key={key} text={p.text} testId="message-text" className={streaming && i === lastIndex ? 'md caret' : 'md'} />)
        break
      case 'reasoning':
        if (p.text || (streaming && i === lastIndex)) {
          const thinking = streaming && p.state === 'streaming'
          out.push(
            <details key={key} className="reasoning" data-testid="reasoning" open={thinking || undefined}>
              <summary>{thinking ? <span className="shimmer">Thinking…</span> : 'Reasoning'}</summary>
              <MarkdownText text={p.text} className="md reasoning-text" />
            </details>,
          )
        }
        break
      case 'file':
        out.push(
          <div key={key} className="assistant-file">
            <FilePart mediaType={p.mediaType} url={p.url} filename={p.filename} />
          </div>,
        )
        break
      case 'data-suggestions':
        out.push(<SuggestionsView key={key} data={p.data} disabled={busy} onSend={onSend} onAction={onAction} />)
        break
      case 'data-payload':
        out.push(<PayloadPart key={key} data={p.data} />)
        break
      case 'data-elicitation':
        out.push(<ElicitationCard key={key} data={p.data} runId={runId} live={streaming} />)
        break
      default:
        if (p.type === 'dynamic-tool' || p.type.startsWith('tool-')) {
          const tp = p as unknown as ToolPartLike
          out.push(<ToolCard key={key} part={tp} streaming={streaming} progress={progress[tp.toolCallId]} decide={decide} busy={busy} />)
        }
    }
  })
  const usage = usageText(meta?.usage)
  return (
    <article
      className="msg assistant"
      data-testid="message"
      data-role="assistant"
      data-message-id={message.id}
      data-status={streaming ? 'streaming' : 'done'}
      aria-busy={streaming || undefined}
    >
      <div className="assistant-content">
        {out.length ? out : streaming ? <TypingDots /> : null}
        {streaming && out.length && message.parts[lastIndex]?.type !== 'text' ? <TypingDots /> : null}
      </div>
      {!streaming ? (
        <div className="msg-actions">
          {text ? <CopyButton text={text} label="Copy answer" /> : null}
          {canRegenerate ? (
            <button type="button" className="icon-btn" data-testid="regenerate" title="Regenerate" aria-label="Regenerate" disabled={busy} onClick={onRegenerate}>
              <RetryIcon />
            </button>
          ) : null}
          {runId ? (
            <button type="button" className="icon-btn" data-testid="diagnostics-button" title="Diagnostics" aria-label="Diagnostics" onClick={() => onDiagnostics(runId)}>
              <InspectIcon />
            </button>
          ) : null}
          {meta?.model || usage ? (
            <span className="msg-meta small muted">
              {meta?.model ?? ''}
              {meta?.model && usage ? ' · ' : ''}
              {usage}
            </span>
          ) : null}
        </div>
      ) : null}
    </article>
  )
}

export function TypingDots() {
  return (
    <span className="typing" role="status" aria-label="Working">
      <span />
      <span />
      <span />
    </span>
  )
}

export const Message = memo(function Message(props: MessageProps) {
  return props.message.role === 'user' ? <UserMessage message={props.message} /> : <AssistantMessage {...props} />
})
