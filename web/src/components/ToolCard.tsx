// One tool call: its name, arguments, state, live progress, result, payload and error.
import { memo, useState } from 'react'
import type { ToolProgress } from '../api'
import { AlertIcon, CheckIcon, Spinner, ToolIcon } from './icons'
import { Payload, isObject, pretty, prettyText } from './Payload'

/** The fields of a static (`tool-<name>`) or dynamic tool part that the card reads. */
export type ToolPartLike = {
  type: string
  toolCallId: string
  state: string
  toolName?: string
  input?: unknown
  output?: unknown
  errorText?: string
  /** set while the call waits for a person (approval-requested) and once decided */
  approval?: { id: string; approved?: boolean; reason?: string; requestReason?: string }
}

/** What a person can do with a call that waits: approve it (with edited arguments), deny it, or answer
 * an ask_user call's questions. */
export type Decide = {
  approve: (part: ToolPartLike, input?: unknown) => void
  deny: (part: ToolPartLike, reason: string) => void
  answer: (part: ToolPartLike, answers: string[]) => void
}

type Question = { question: string; choices?: string[] }

/** questionsOf reads an ask_user call's questions from its input. */
export function questionsOf(input: unknown): Question[] {
  const qs = isObject(input) ? input.questions : undefined
  if (!Array.isArray(qs)) return []
  return qs.filter((q): q is Question => isObject(q) && typeof q.question === 'string')
}

/** waiting reports whether the call waits for a person: an approval request, or an ask_user call whose
 * input has arrived and that has no answer yet in a message that is not streaming. */
export function waiting(part: ToolPartLike, streaming: boolean): boolean {
  if (part.state === 'approval-requested') return true
  return toolName(part) === 'ask_user' && part.state === 'input-available' && !streaming
}

function ApprovalForm({ part, decide, disabled }: { part: ToolPartLike; decide: Decide; disabled: boolean }) {
  const [editing, setEditing] = useState(false)
  const [denying, setDenying] = useState(false)
  const [args, setArgs] = useState(() => pretty(part.input ?? {}))
  const [reason, setReason] = useState('')
  const [bad, setBad] = useState('')
  const approveEdited = () => {
    try {
      const v: unknown = JSON.parse(args)
      if (!isObject(v)) throw new Error('the arguments must be a JSON object')
      decide.approve(part, v)
    } catch (e) {
      setBad(e instanceof Error ? e.message : String(e))
    }
  }
  return (
    <div className="approval" data-testid="approval" role="group" aria-label="Approval">
      <div className="approval-reason">{part.approval?.requestReason || 'This call needs your approval.'}</div>
      {editing ? (
        <div className="approval-edit">
          <label className="section-label" htmlFor={`args-${part.toolCallId}`}>
            Arguments
          </label>
          <textarea id={`args-${part.toolCallId}`} data-testid="approval-args" value={args} rows={6} onChange={(e) => setArgs(e.target.value)} />
          {bad ? <div className="approval-bad" role="alert">{bad}</div> : null}
        </div>
      ) : null}
      {denying ? (
        <input
          className="approval-deny-reason"
          data-testid="approval-deny-reason"
          placeholder="Why not? (the assistant is told)"
          value={reason}
          onChange={(e) => setReason(e.target.value)}
        />
      ) : null}
      <div className="approval-buttons">
        {editing ? (
          <button type="button" className="btn primary" data-testid="approve-edited" disabled={disabled} onClick={approveEdited}>
            Approve with these arguments
          </button>
        ) : (
          <button type="button" className="btn primary" data-testid="approve" disabled={disabled} onClick={() => decide.approve(part)}>
            Approve
          </button>
        )}
        {denying ? (
          <button type="button" className="btn" data-testid="deny-confirm" disabled={disabled} onClick={() => decide.deny(part, reason.trim())}>
            Deny
          </button>
        ) : (
          <button type="button" className="btn" data-testid="deny" disabled={disabled} onClick={() => setDenying(true)}>
            Deny
          </button>
        )}
        {!editing ? (
          <button type="button" className="btn" data-testid="edit" disabled={disabled} onClick={() => setEditing(true)}>
            Edit
          </button>
        ) : null}
      </div>
    </div>
  )
}

function QuestionForm({ part, decide, disabled }: { part: ToolPartLike; decide: Decide; disabled: boolean }) {
  const qs = questionsOf(part.input)
  const [answers, setAnswers] = useState<string[]>(() => qs.map(() => ''))
  const set = (i: number, v: string) => setAnswers((a) => a.map((x, j) => (j === i ? v : x)))
  const complete = answers.every((a) => a.trim() !== '')
  return (
    <form
      className="approval question"
      data-testid="question-form"
      onSubmit={(e) => {
        e.preventDefault()
        if (complete) decide.answer(part, answers)
      }}
    >
      {qs.map((q, i) => (
        <div key={i} className="question-item">
          <label className="question-text" htmlFor={`q-${part.toolCallId}-${i}`}>
            {q.question}
          </label>
          {q.choices?.length ? (
            <select id={`q-${part.toolCallId}-${i}`} value={answers[i]} onChange={(e) => set(i, e.target.value)}>
              <option value="">Choose…</option>
              {q.choices.map((c) => (
                <option key={c} value={c}>
                  {c}
                </option>
              ))}
            </select>
          ) : (
            <input id={`q-${part.toolCallId}-${i}`} value={answers[i]} onChange={(e) => set(i, e.target.value)} />
          )}
        </div>
      ))}
      <div className="approval-buttons">
        <button type="submit" className="btn primary" data-testid="answer" disabled={disabled || !complete}>
          Answer
        </button>
      </div>
    </form>
  )
}

export type CardState = 'running' | 'done' | 'error'

export function toolName(part: ToolPartLike): string {
  return part.type === 'dynamic-tool' ? (part.toolName ?? 'tool') : part.type.slice('tool-'.length)
}

/** cardState maps the part's state; a call with no result in a message that is no longer streaming was
 * cut off (stopped or failed), which is an error, not a call still running. */
export function cardState(part: ToolPartLike, streaming: boolean): CardState {
  if (part.state === 'output-available') return 'done'
  if (part.state === 'output-error' || part.state === 'output-denied') return 'error'
  return streaming ? 'running' : 'error'
}

function formatDuration(ms: unknown): string {
  if (typeof ms !== 'number' || !Number.isFinite(ms)) return ''
  if (ms < 1) return '<1 ms'
  if (ms < 1000) return `${Math.round(ms)} ms`
  if (ms < 60_000) return `${(ms / 1000).toFixed(ms < 10_000 ? 1 : 0)} s`
  return `${Math.floor(ms / 60_000)} min ${Math.round((ms % 60_000) / 1000)} s`
}

function argsPreview(input: unknown): string {
  if (input === undefined || input === null) return ''
  if (isObject(input)) {
    const parts = Object.entries(input).map(([k, v]) => `${k}: ${typeof v === 'string' ? v : JSON.stringify(v)}`)
    const s = parts.join(', ')
    return s.length > 80 ? `${s.slice(0, 79)}…` : s
  }
  const s = typeof input === 'string' ? input : JSON.stringify(input)
  return s.length > 80 ? `${s.slice(0, 79)}…` : s
}

/** canonical is JSON with object keys sorted, to compare values. */
function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`
  if (isObject(v)) {
    return `{${Object.keys(v)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical(v[k])}`)
      .join(',')}}`
  }
  return JSON.stringify(v) ?? 'null'
}

function samePayload(payload: unknown, content: unknown): boolean {
  if (payload === undefined || payload === null) return true
  if (typeof content !== 'string') return false
  try {
    return canonical(JSON.parse(content)) === canonical(payload)
  } catch {
    return false
  }
}

const longResult = 2000

function Result({ text }: { text: string }) {
  const shown = prettyText(text)
  const lines = shown.split('\n').length
  if (shown.length <= longResult && lines <= 30) {
    return (
      <div className="tool-section">
        <div className="section-label">Result</div>
        <pre className="tool-result" data-testid="tool-result">
          {shown}
        </pre>
      </div>
    )
  }
  const first = shown.split('\n', 1)[0]
  return (
    <details className="tool-section collapsible">
      <summary>
        <span className="section-label">Result</span>
        <span className="muted small truncate">
          {first.slice(0, 70)}
          {first.length > 70 ? '…' : ''} · {lines} lines
        </span>
      </summary>
      <pre className="tool-result" data-testid="tool-result">
        {shown}
      </pre>
    </details>
  )
}

function Progress({ p }: { p: ToolProgress }) {
  const total = typeof p.total === 'number' && p.total > 0 ? p.total : 0
  const value = typeof p.progress === 'number' ? p.progress : 0
  const pct = total ? Math.max(0, Math.min(100, (value / total) * 100)) : 0
  return (
    <div className="tool-progress" data-testid="tool-progress" role="status">
      <div className={total ? 'bar' : 'bar indeterminate'}>
        <span style={total ? { width: `${pct}%` } : undefined} />
      </div>
      <span className="small muted">
        {p.message ? `${p.message} ` : ''}
        {total ? `${value}/${total}` : value ? String(value) : ''}
      </span>
    </div>
  )
}

type Props = { part: ToolPartLike; streaming: boolean; progress?: ToolProgress; decide?: Decide; busy?: boolean }

export const ToolCard = memo(function ToolCard({ part, streaming, progress, decide, busy }: Props) {
  const name = toolName(part)
  const waits = waiting(part, streaming)
  const state = waits ? 'running' : cardState(part, streaming)
  const sep = name.indexOf('__')
  const server = sep > 0 ? name.slice(0, sep) : ''
  const short = sep > 0 ? name.slice(sep + 2) : name
  const out = part.output
  const outObj = isObject(out) ? out : null
  const content = outObj ? outObj.content : out
  const duration = formatDuration(outObj?.duration_ms)
  // A payload that only repeats the result (MCP structuredContent often mirrors the text) is not shown twice.
  const payload = samePayload(outObj?.payload, content) ? undefined : outObj?.payload
  const hasInput = part.input !== undefined && !(isObject(part.input) && Object.keys(part.input).length === 0)
  const cutOff = state === 'error' && part.state !== 'output-error' && part.state !== 'output-denied'
  const errorText = part.errorText || (cutOff ? 'Stopped before the tool returned.' : '')

  return (
    <div
      className={`tool-card ${state}`}
      data-testid="tool-card"
      data-tool-name={name}
      data-tool-call-id={part.toolCallId}
      data-state={state}
    >
      <div className="tool-head">
        <span className={`tool-status ${state}`} aria-hidden="true">
          {state === 'running' ? <Spinner /> : state === 'done' ? <CheckIcon /> : <AlertIcon />}
        </span>
        <ToolIcon />
        <span className="tool-name">
          {server ? <span className="tool-server">{server}</span> : null}
          {short}
        </span>
        <span className="tool-args-preview truncate">{argsPreview(part.input)}</span>
        <span className="tool-meta small">
          <span className="visually-hidden">State: </span>
          {waits ? (name === 'ask_user' ? 'asks you' : 'needs approval') : state === 'running' ? 'running' : state === 'done' ? duration || 'done' : 'failed'}
        </span>
      </div>
      <div className="tool-body">
        {hasInput ? (
          <details className="tool-section collapsible">
            <summary>
              <span className="section-label">Arguments</span>
            </summary>
            <pre className="json tool-args">{pretty(part.input)}</pre>
          </details>
        ) : null}
        {waits && decide && part.state === 'approval-requested' ? <ApprovalForm part={part} decide={decide} disabled={!!busy} /> : null}
        {waits && decide && name === 'ask_user' ? <QuestionForm part={part} decide={decide} disabled={!!busy} /> : null}
        {state === 'running' && progress ? <Progress p={progress} /> : null}
        {state === 'done' && content !== undefined && content !== null && content !== '' ? (
          <Result text={typeof content === 'string' ? content : pretty(content)} />
        ) : null}
        {payload !== undefined && payload !== null ? <Payload data={payload} label="Payload" /> : null}
        {state === 'error' && errorText ? (
          <pre className="tool-error" data-testid="tool-error">
            {errorText}
          </pre>
        ) : null}
      </div>
    </div>
  )
})
