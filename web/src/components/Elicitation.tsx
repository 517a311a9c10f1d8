// A question an MCP server asks while its tool runs (a data-elicitation part): its fields as a small
// form, answered or declined with POST /v1/runs/{id}/approvals. The run goes on once the server has
// the answer; the part comes again, decided.
import { useState, type FormEvent } from 'react'
import { api, errorText, sentence, type ElicitationData, type ElicitationField } from '../api'

// Values are keyed by field name in a Map: a server names its fields, and a name such as __proto__
// or constructor must be a field like any other, never a key of Object.prototype.
type Values = Map<string, unknown>

function initial(fields: ElicitationField[]): Values {
  const v: Values = new Map()
  for (const f of fields) {
    if (f.default !== undefined && f.default !== null) v.set(f.name, f.default)
    else if (f.type === 'boolean') v.set(f.name, false)
    else if (f.multiple) v.set(f.name, [])
    else v.set(f.name, '')
  }
  return v
}

/** contentOf turns the form's values into the answer's content: empty optional fields are left out,
 * numbers are numbers, a date-time is RFC 3339. */
function contentOf(fields: ElicitationField[], values: Values): Record<string, unknown> {
  // No prototype: out['__proto__'] = v is then an own property, which JSON.stringify sends.
  const out: Record<string, unknown> = Object.create(null)
  for (const f of fields) {
    const v = values.get(f.name)
    if (f.type === 'boolean') {
      out[f.name] = v === true
    } else if (f.multiple) {
      const list = Array.isArray(v) ? v : []
      if (list.length || f.required) out[f.name] = list
    } else if (typeof v === 'number') {
      out[f.name] = v
    } else if (typeof v === 'string' && v !== '') {
      if (f.type === 'number' || f.type === 'integer') out[f.name] = Number(v)
      else if (f.format === 'date-time' && !Number.isNaN(Date.parse(v))) out[f.name] = new Date(v).toISOString()
      else out[f.name] = v
    }
  }
  return out
}

const inputTypes: Record<string, string> = { email: 'email', uri: 'url', date: 'date', 'date-time': 'datetime-local' }

/** inputType is the input's type for a string of format: one of inputTypes' own keys, else text. */
function inputType(format: string | undefined): string {
  return format !== undefined && Object.hasOwn(inputTypes, format) ? inputTypes[format] : 'text'
}

function FieldInput({ f, id, value, set }: { f: ElicitationField; id: string; value: unknown; set: (v: unknown) => void }) {
  if (f.type === 'boolean') {
    return <input id={id} type="checkbox" checked={value === true} onChange={(e) => set(e.target.checked)} />
  }
  if (f.multiple) {
    const list = Array.isArray(value) ? (value as string[]) : []
    return (
      <div className="elicit-choices" role="group" aria-labelledby={`${id}-label`}>
        {(f.choices ?? []).map((c) => (
          <label key={c.value} className="elicit-choice">
            <input
              type="checkbox"
              checked={list.includes(c.value)}
              onChange={(e) => set(e.target.checked ? [...list, c.value] : list.filter((x) => x !== c.value))}
            />
            {c.label}
          </label>
        ))}
      </div>
    )
  }
  if (f.choices?.length) {
    return (
      <select id={id} value={String(value ?? '')} required={f.required} onChange={(e) => set(e.target.value)}>
        <option value="">Choose…</option>
        {f.choices.map((c) => (
          <option key={c.value} value={c.value}>
            {c.label}
          </option>
        ))}
      </select>
    )
  }
  const numeric = f.type === 'number' || f.type === 'integer'
  return (
    <input
      id={id}
      type={numeric ? 'number' : inputType(f.format)}
      step={f.type === 'integer' ? 1 : numeric ? 'any' : undefined}
      min={f.minimum}
      max={f.maximum}
      minLength={f.min_length}
      maxLength={f.max_length}
      required={f.required}
      value={String(value ?? '')}
      onChange={(e) => set(e.target.value)}
    />
  )
}

function decidedText(d: ElicitationData): string {
  switch (d.decision) {
    case 'answer':
      return 'You answered.'
    case 'deny':
      return 'You declined.'
    default:
      return d.reason || 'Nobody answered.'
  }
}

export function ElicitationCard({ data, runId, live }: { data: ElicitationData; runId?: string; live: boolean }) {
  const fields = data.fields ?? []
  const [values, setValues] = useState<Values>(() => initial(fields))
  const [sending, setSending] = useState(false)
  const [error, setError] = useState('')
  const title = data.name ? `${data.name} asks` : 'A tool asks'
  if (data.state === 'decided' || !live || !runId) {
    return (
      <div className="approval elicitation" data-testid="elicitation" data-state="decided">
        <div className="small muted">
          {title}: {data.message}
        </div>
        <div className="small">{data.state === 'decided' ? decidedText(data) : 'The question is no longer open.'}</div>
      </div>
    )
  }
  const send = async (content?: Record<string, unknown>) => {
    setSending(true)
    setError('')
    try {
      await api.elicit(runId, data.tool_call_id, content)
    } catch (err) {
      setError(sentence(errorText(err)))
      setSending(false)
    }
  }
  const submit = (e: FormEvent) => {
    e.preventDefault()
    void send(contentOf(fields, values))
  }
  return (
    <form className="approval elicitation" data-testid="elicitation" data-state="waiting" onSubmit={submit}>
      <div>
        <strong>{title}</strong>: {data.message}
      </div>
      {fields.map((f) => {
        const id = `el-${data.tool_call_id}-${f.name}`
        return (
          <div key={f.name} className={`question-item${f.type === 'boolean' ? ' elicit-bool' : ''}`}>
            <label id={`${id}-label`} className="question-text" htmlFor={id}>
              {f.title || f.name}
              {f.required ? ' *' : ''}
            </label>
            <FieldInput f={f} id={id} value={values.get(f.name)} set={(v) => setValues((old) => new Map(old).set(f.name, v))} />
            {f.description ? <span className="small muted">{f.description}</span> : null}
          </div>
        )
      })}
      {error ? (
        <div className="approval-bad small" role="alert" data-testid="elicitation-error">
          {error}
        </div>
      ) : null}
      <div className="approval-buttons">
        <button type="submit" className="btn primary" data-testid="elicitation-submit" disabled={sending}>
          Submit
        </button>
        <button type="button" className="btn" data-testid="elicitation-decline" disabled={sending} onClick={() => void send()}>
          Decline
        </button>
      </div>
    </form>
  )
}
