// Structured data from tools and the model: an array of objects (or an object holding one) as a table,
// anything else as pretty JSON. Values are always text; nothing here is HTML.

type Obj = Record<string, unknown>

export function isObject(v: unknown): v is Obj {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

export function pretty(v: unknown, maxString = 0): string {
  if (typeof v === 'string') return v
  const cap =
    maxString > 0
      ? (_k: string, x: unknown) =>
          typeof x === 'string' && x.length > maxString ? `${x.slice(0, maxString)}… (${(x.length - maxString).toLocaleString()} more characters)` : x
      : undefined
  try {
    return JSON.stringify(v, cap, 2) ?? String(v)
  } catch {
    return String(v)
  }
}

/** prettyText pretty-prints a string that holds JSON, and returns any other text as it is. */
export function prettyText(s: string): string {
  const t = s.trim()
  if ((t.startsWith('{') && t.endsWith('}')) || (t.startsWith('[') && t.endsWith(']'))) {
    try {
      return JSON.stringify(JSON.parse(t), null, 2)
    } catch {
      // not JSON
    }
  }
  return s
}

function rowsOf(v: unknown): Obj[] | null {
  return Array.isArray(v) && v.length > 0 && v.every(isObject) ? (v as Obj[]) : null
}

/** tableOf finds rows to show as a table: the value itself, or the one array of objects in an object
 * (`{"items":[…]}`, `{"title":…,"data":[…]}`), with the object's title. */
function tableOf(v: unknown): { rows: Obj[]; caption?: string } | null {
  const rows = rowsOf(v)
  if (rows) return { rows }
  if (!isObject(v)) return null
  const arrays = Object.entries(v).filter(([, x]) => rowsOf(x))
  if (arrays.length !== 1) return null
  const [key, arr] = arrays[0]
  const rest = Object.entries(v).filter(([k]) => k !== key)
  if (rest.some(([, x]) => typeof x === 'object' && x !== null)) return null
  const named = ['title', 'summary', 'name', 'label', 'description'].map((k) => v[k]).find((x) => typeof x === 'string')
  return { rows: arr as Obj[], caption: (named as string | undefined) ?? key }
}

function cell(v: unknown): string {
  if (v === null || v === undefined) return ''
  if (typeof v === 'object') return JSON.stringify(v)
  return String(v)
}

const maxRows = 200

function Table({ rows, caption }: { rows: Obj[]; caption?: string }) {
  const cols: string[] = []
  for (const r of rows.slice(0, maxRows)) for (const k of Object.keys(r)) if (!cols.includes(k)) cols.push(k)
  return (
    <div className="table-wrap">
      <table className="payload-table">
        {caption ? <caption>{caption}</caption> : null}
        <thead>
          <tr>
            {cols.map((c) => (
              <th key={c} scope="col">
                {c}
              </th>
            ))}
          </tr>
        </thead>
        <tbody>
          {rows.slice(0, maxRows).map((r, i) => (
            <tr key={i}>
              {cols.map((c) => (
                <td key={c}>{cell(r[c])}</td>
              ))}
            </tr>
          ))}
        </tbody>
      </table>
      {rows.length > maxRows ? <p className="muted small">{rows.length - maxRows} more rows not shown</p> : null}
    </div>
  )
}

/** Card shows an object whose values are plain (text, numbers, booleans, or short lists of them) as
 * key/value rows. */
function cardRows(v: unknown): [string, string][] | null {
  if (!isObject(v)) return null
  const entries = Object.entries(v)
  if (entries.length === 0 || entries.length > 50) return null
  const plain = (x: unknown) => x === null || ['string', 'number', 'boolean'].includes(typeof x)
  if (!entries.every(([, x]) => plain(x) || (Array.isArray(x) && x.length <= 20 && x.every(plain)))) return null
  return entries.map(([k, x]) => [k, Array.isArray(x) ? x.map(cell).join(', ') : cell(x)])
}

function Card({ rows }: { rows: [string, string][] }) {
  return (
    <dl className="payload-card" data-testid="payload-card">
      {rows.map(([k, v]) => (
        <div key={k} className="payload-card-row">
          <dt>{k}</dt>
          <dd>{v}</dd>
        </div>
      ))}
    </dl>
  )
}

/** Payload renders structured data: a table for an array of objects, a key/value card for an object,
 * JSON otherwise. */
export function Payload({ data, label, title }: { data: unknown; label?: string; title?: string }) {
  const table = tableOf(data)
  const card = table ? null : cardRows(data)
  return (
    <div className="payload" data-testid="payload">
      {label ? <div className="section-label">{label}</div> : null}
      {title ? (
        <div className="payload-title" data-testid="payload-title">
          {title}
        </div>
      ) : null}
      {table ? <Table rows={table.rows} caption={table.caption} /> : card ? <Card rows={card} /> : <pre className="json">{pretty(data)}</pre>}
    </div>
  )
}
