// What a run sent the model, call by call: its model, system prompt, tools, the provider request and the
// model's raw answer, in a dialog.
import { useEffect, useRef, useState } from 'react'
import { api, errorText, type ApiError, type Diagnostics as Diag } from '../api'
import { CloseIcon, Spinner } from './icons'
import { CopyButton } from './Markdown'
import { pretty } from './Payload'

type State = { status: 'loading' } | { status: 'error'; message: string } | { status: 'ok'; d: Diag }

function Row({ label, value }: { label: string; value: unknown }) {
  if (value === undefined || value === null || value === '') return null
  return (
    <>
      <dt>{label}</dt>
      <dd>{typeof value === 'object' ? JSON.stringify(value) : String(value)}</dd>
    </>
  )
}

export function DiagnosticsDialog({ runId, onClose }: { runId: string; onClose: () => void }) {
  const ref = useRef<HTMLDialogElement>(null)
  const [state, setState] = useState<State>({ status: 'loading' })
  const [call, setCall] = useState(0) // 0: the latest

  useEffect(() => {
    const d = ref.current
    if (d && !d.open) d.showModal()
  }, [])

  useEffect(() => {
    const ac = new AbortController()
    setState({ status: 'loading' })
    api.diagnostics(runId, ac.signal, call || undefined).then(
      (d) => setState({ status: 'ok', d }),
      (e: unknown) => {
        if (ac.signal.aborted) return
        const err = e as ApiError
        let message = errorText(e)
        if (err?.code === 'diagnostics_unavailable') message = message || 'Diagnostics were not kept for this run.'
        else if (err?.status === 404 && err.code !== 'run_not_found') message = `Diagnostics are not available: ${message}`
        setState({ status: 'error', message })
      },
    )
    return () => ac.abort()
  }, [runId, call])

  return (
    <dialog
      ref={ref}
      className="dialog"
      data-testid="diagnostics-panel"
      aria-labelledby="diag-title"
      onClose={onClose}
      onCancel={(e) => {
        e.preventDefault()
        onClose()
      }}
      onClick={(e) => {
        if (e.target === ref.current) onClose() // the backdrop
      }}
    >
      <div className="dialog-inner">
        <header className="dialog-head">
          <h2 id="diag-title">Diagnostics</h2>
          <code className="small muted truncate">{runId}</code>
          <span className="spacer" />
          <button type="button" className="icon-btn" data-testid="diagnostics-close" aria-label="Close" title="Close" onClick={onClose}>
            <CloseIcon />
          </button>
        </header>
        <div className="dialog-body">
          {state.status === 'loading' ? (
            <p className="muted">
              <Spinner /> Loading…
            </p>
          ) : null}
          {state.status === 'error' ? (
            <p className="notice" role="alert" data-testid="diagnostics-error">
              {state.message}
            </p>
          ) : null}
          {state.status === 'ok' ? <DiagBody d={state.d} onCall={setCall} /> : null}
        </div>
      </div>
    </dialog>
  )
}

function DiagBody({ d, onCall }: { d: Diag; onCall: (n: number) => void }) {
  const tools = Array.isArray(d.tools) ? d.tools : []
  const calls = Array.isArray(d.calls) ? d.calls : []
  const hasContext = d.context !== undefined && d.context !== null && !(typeof d.context === 'object' && Object.keys(d.context as object).length === 0)
  return (
    <>
      {calls.length > 1 ? (
        <div className="diag-calls">
          <label htmlFor="diag-call">Model call</label>{' '}
          <select id="diag-call" data-testid="diagnostics-call" className="model-picker" value={d.call ?? calls.length} onChange={(e) => onCall(Number(e.target.value))}>
            {calls.map((c) => (
              <option key={c.call} value={c.call}>
                {c.call} of {calls.length}
                {c.output ? ' · answered' : ''}
              </option>
            ))}
          </select>
        </div>
      ) : null}
      <dl className="diag-grid">
        <Row label="Model" value={d.model} />
        <Row label="Agent" value={d.agent} />
        <Row label="Temperature" value={d.temperature} />
        <Row label="Max tokens" value={d.max_tokens} />
        <Row label="Max iterations" value={d.max_iterations} />
      </dl>
      <section className="diag-section">
        <div className="diag-section-head">
          <h3>System prompt</h3>
          {d.system_prompt ? <CopyButton text={d.system_prompt} label="Copy system prompt" /> : null}
        </div>
        {d.system_prompt ? <pre className="pre-wrap">{d.system_prompt}</pre> : <p className="muted small">None.</p>}
      </section>
      <section className="diag-section">
        <h3>Tools ({tools.length})</h3>
        {tools.length ? (
          <ul className="diag-tools">
            {tools.map((t) => (
              <li key={t}>
                <code>{t}</code>
              </li>
            ))}
          </ul>
        ) : (
          <p className="muted small">No tools were offered.</p>
        )}
      </section>
      {hasContext ? (
        <details className="diag-section">
          <summary>
            <h3>Context</h3>
          </summary>
          <pre className="json">{pretty(d.context, 600)}</pre>
        </details>
      ) : null}
      <details className="diag-section" open>
        <summary>
          <h3>Request sent to the provider</h3>
        </summary>
        {d.request !== undefined && d.request !== null ? (
          <>
            <div className="diag-copy">
              <CopyButton text={pretty(d.request)} label="Copy request" />
            </div>
            <pre className="json">{pretty(d.request, 600)}</pre>
          </>
        ) : (
          <p className="muted small">{d.request_omitted || 'The request was not kept.'}</p>
        )}
      </details>
      {d.output ? (
        <details className="diag-section" data-testid="diagnostics-output">
          <summary>
            <h3>Raw answer of the model</h3>
          </summary>
          {d.output.omitted ? <p className="muted small">{d.output.omitted}</p> : null}
          {d.output.reasoning ? <pre className="pre-wrap">{d.output.reasoning}</pre> : null}
          {d.output.text ? <pre className="pre-wrap">{d.output.text}</pre> : null}
          {d.output.tool_calls?.length ? <pre className="json">{pretty(d.output.tool_calls, 600)}</pre> : null}
        </details>
      ) : null}
    </>
  )
}
