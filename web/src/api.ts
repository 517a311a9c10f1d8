// chatd's HTTP API as the UI uses it. Everything is same-origin; errors are {"error":{"code","message"}}.
import type { UIMessage } from 'ai'

export type Usage = {
  input_tokens?: number
  output_tokens?: number
  cache_read_tokens?: number
  cache_write_tokens?: number
  reasoning_tokens?: number
}

/** The metadata chatd puts on an assistant message: `start` carries the ids, `finish` the run's usage. */
export type MessageMeta = {
  run_id?: string
  session_id?: string
  model?: string
  agent?: string
  /** action marks a server action's run: it ran a tool, and cannot be regenerated */
  action?: boolean
  usage?: Usage
  step_usage?: Usage
}

export type ToolProgress = { tool_call_id?: string; progress?: number; total?: number; message?: string }

export type Suggestions = { values?: unknown[] | null; actions?: unknown[] | null }

/** SuggestedAction is a button an answer offers: the client acts on a "client" one; a "server" one
 * names a tool chatd runs (POST /v1/sessions/{id}/actions). */
export type SuggestedAction = { label: string; action: string; handler?: string; data?: unknown }

/** PayloadData is a data-payload part's data: a tool's payload or an answer's marked block. */
export type PayloadData = { id: string; type: string; source: 'tool' | 'marker'; summary: string; data: unknown }

/** ElicitationField is one value an MCP server's question asks for (a property of its schema). */
export type ElicitationField = {
  name: string
  title?: string
  description?: string
  type: 'string' | 'number' | 'integer' | 'boolean' | 'array'
  format?: string
  required?: boolean
  default?: unknown
  choices?: { value: string; label: string }[]
  multiple?: boolean
  minimum?: number
  maximum?: number
  min_length?: number
  max_length?: number
  min_items?: number
  max_items?: number
}

/** ElicitationData is a data-elicitation part: a question an MCP server asks while its tool runs,
 * answered with POST /v1/runs/{id}/approvals; state decided once answered, declined or cancelled. */
export type ElicitationData = {
  tool_call_id: string
  name?: string
  message?: string
  fields?: ElicitationField[] | null
  expires_at?: string
  state: 'waiting' | 'decided'
  decision?: 'answer' | 'deny' | 'cancel'
  content?: Record<string, unknown>
  reason?: string
}

export type DataParts = {
  'tool-progress': ToolProgress
  suggestions: Suggestions
  payload: PayloadData
  elicitation: ElicitationData
}

export type ChatMessage = UIMessage<MessageMeta, DataParts>

export type Session = {
  id: string
  title: string
  agent: string
  metadata?: unknown
  created_at: string
  updated_at: string
}

export type Model = { id: string; provider?: string }
export type ModelList = { data: Model[]; default: string }

export type Tool = {
  name: string
  description?: string
  input_schema?: unknown
  source?: string
  read_only?: boolean
}

/** An agent the caller may use (GET /v1/agents): a session belongs to the agent it started with. */
export type Agent = {
  name: string
  description?: string
  model?: string
  tools?: string[] | null
}

export type StoredChat = {
  id: string
  title: string
  active_run_id: string
  messages: ChatMessage[]
}

export type Diagnostics = {
  run_id: string
  agent?: string
  model?: string
  system_prompt?: string
  tools?: string[] | null
  temperature?: number | null
  max_tokens?: number | null
  max_iterations?: number | null
  context?: unknown
  model_calls?: number
  /** the call shown (1 …) */
  call?: number
  request?: unknown
  request_omitted?: string
  /** the model's raw answer of the turn the call ended */
  output?: { text?: string; reasoning?: string; tool_calls?: unknown[]; finish_reason?: string; omitted?: string } | null
  calls?: { call: number; model?: string; created_at?: string; request_omitted?: string; output?: boolean }[] | null
}

/** An error chatd answered, with its code and status. */
export class ApiError extends Error {
  readonly status: number
  readonly code: string
  constructor(status: number, code: string, message: string) {
    super(message)
    this.status = status
    this.code = code
  }
}

/** errorText turns what a failed request or stream left into a sentence: chatd's JSON error bodies
 * become their message, never a raw JSON blob. */
export function errorText(err: unknown): string {
  if (err == null) return ''
  const raw = err instanceof Error ? err.message : String(err)
  const parsed = parseErrorBody(raw)
  if (parsed) return parsed.message
  if (/failed to fetch|networkerror|load failed/i.test(raw)) return 'Could not reach chatd. Is the server running?'
  return raw || 'Something went wrong.'
}

/** sentence starts a message of chatd's ("no such API key") with a capital, as a line of its own. */
export function sentence(s: string): string {
  return s ? s[0].toUpperCase() + s.slice(1) : s
}

function parseErrorBody(text: string): { code: string; message: string } | null {
  const t = text.trim()
  if (!t.startsWith('{')) return null
  try {
    const v = JSON.parse(t) as { error?: { code?: unknown; message?: unknown } | string; message?: unknown }
    if (v && typeof v.error === 'object' && v.error) {
      const message = typeof v.error.message === 'string' ? v.error.message : JSON.stringify(v.error)
      return { code: typeof v.error.code === 'string' ? v.error.code : '', message }
    }
    if (v && typeof v.error === 'string') return { code: '', message: v.error }
    if (v && typeof v.message === 'string') return { code: '', message: v.message }
  } catch {
    // not JSON after all
  }
  return null
}

/** Who the server says the caller is (GET /v1/auth/session). `local`: a chatd without authentication. */
export type Whoami = {
  user: string
  admin?: boolean
  method: 'cookie' | 'bearer' | 'trusted_header' | 'local' | (string & {})
  key_id?: string
  expires_at?: string
}

// A 401 from any API call means the sign-in lapsed: the app shows the sign-in page again. Each sign-in
// and sign-out starts a new epoch, so that a request sent before it cannot end the session after it.
type UnauthorizedListener = (err: ApiError) => void
const unauthorizedListeners = new Set<UnauthorizedListener>()
let authEpoch = 0

/** onUnauthorized calls listener when an API call answers 401; it returns the unsubscribe. */
export function onUnauthorized(listener: UnauthorizedListener): () => void {
  unauthorizedListeners.add(listener)
  return () => unauthorizedListeners.delete(listener)
}

function unauthorized(err: ApiError, epoch: number) {
  if (epoch !== authEpoch) return
  for (const l of unauthorizedListeners) l(err)
}

/** apiFetch is fetch for chatd's API (useChat's transport uses it too): a 401 answer is reported to
 * the onUnauthorized listeners before it is returned. */
export async function apiFetch(input: RequestInfo | URL, init?: RequestInit): Promise<Response> {
  const epoch = authEpoch
  const res = await fetch(input, init)
  if (res.status === 401) {
    const e = parseErrorBody(await res.clone().text().catch(() => ''))
    unauthorized(new ApiError(401, e?.code || 'auth_required', e?.message || 'Sign in to continue.'), epoch)
  }
  return res
}

async function request<T>(method: string, path: string, body?: unknown, signal?: AbortSignal, raw = false): Promise<T> {
  const init: RequestInit = { method, signal, headers: { Accept: 'application/json' } }
  if (body !== undefined) {
    init.headers = { Accept: 'application/json', 'Content-Type': 'application/json' }
    init.body = JSON.stringify(body)
  }
  const res = await (raw ? fetch : apiFetch)(path, init)
  const text = await res.text()
  if (!res.ok) {
    const e = parseErrorBody(text)
    throw new ApiError(res.status, e?.code ?? '', e?.message ?? (text.trim().slice(0, 200) || `${res.status} ${res.statusText}`))
  }
  if (!text) return undefined as T
  if (!(res.headers.get('Content-Type') ?? '').includes('json')) {
    // Not chatd's API answering (a route it does not have yet, served as a page): treat as missing.
    throw new ApiError(404, 'not_found', `no API route ${method} ${path}`)
  }
  return JSON.parse(text) as T
}

const enc = encodeURIComponent

/** auth is the session: its own 401s (no session yet, a wrong key) are answers, not a lapsed sign-in. */
export const auth = {
  session: () => request<Whoami>('GET', '/v1/auth/session', undefined, undefined, true),
  /** signIn trades an API key for a session cookie (HttpOnly: this code never sees it). */
  signIn: async (key: string) => {
    const who = await request<Whoami>('POST', '/v1/auth/session', { key }, undefined, true)
    authEpoch++
    return who
  },
  signOut: async () => {
    authEpoch++
    await request<void>('DELETE', '/v1/auth/session', undefined, undefined, true)
  },
}

export const api = {
  sessions: (cursor?: string, limit = 50) =>
    request<{ sessions: Session[] | null; next_cursor?: string }>(
      'GET',
      `/v1/sessions?limit=${limit}${cursor ? `&cursor=${enc(cursor)}` : ''}`,
    ),
  session: (id: string) => request<Session>('GET', `/v1/sessions/${enc(id)}`),
  renameSession: (id: string, title: string) => request<Session>('PATCH', `/v1/sessions/${enc(id)}`, { title }),
  deleteSession: (id: string) => request<void>('DELETE', `/v1/sessions/${enc(id)}`),
  models: () => request<ModelList>('GET', '/v1/models'),
  agents: () => request<{ agents: Agent[] | null }>('GET', '/v1/agents'),
  tools: (agent?: string) =>
    request<{ tools: Tool[] | null }>('GET', `/v1/tools${agent ? `?agent=${enc(agent)}` : ''}`),
  chat: (id: string, signal?: AbortSignal) => request<StoredChat>('GET', `/v1/ui/chat/${enc(id)}`, undefined, signal),
  cancelRun: (runId: string) => request<unknown>('POST', `/v1/runs/${enc(runId)}/cancel`, {}),
  /** elicit answers (or, with content undefined, declines) a question an MCP server asks while the
   * run's call waits. */
  elicit: (runId: string, toolCallId: string, content?: Record<string, unknown>) =>
    request<unknown>(
      'POST',
      `/v1/runs/${enc(runId)}/approvals`,
      content === undefined
        ? { tool_call_id: toolCallId, decision: 'deny' }
        : { tool_call_id: toolCallId, decision: 'answer', content },
    ),
  /** runAction starts a server action's run and returns its id once chatd has started it; the run's
   * events come by the chat's resume stream, so this answer's own stream is not read. The tools the
   * user left on (selectedTools, when not all) bound the tool it may run, as they bound a message's. */
  runAction: async (sessionId: string, a: SuggestedAction, selectedTools?: string[]): Promise<string> => {
    const body: Record<string, unknown> = { label: a.label, action: a.action, handler: 'server', data: a.data ?? {} }
    if (selectedTools) body.selected_tools = selectedTools
    const res = await apiFetch(`/v1/sessions/${enc(sessionId)}/actions`, {
      method: 'POST',
      headers: { Accept: 'text/event-stream', 'Content-Type': 'application/json' },
      body: JSON.stringify(body),
    })
    if (!res.ok) {
      const text = await res.text()
      const e = parseErrorBody(text)
      throw new ApiError(res.status, e?.code ?? '', e?.message ?? `${res.status} ${res.statusText}`)
    }
    const id = res.headers.get('X-Run-Id') ?? ''
    void res.body?.cancel().catch(() => undefined) // the run goes on without this reader
    return id
  },
  diagnostics: (runId: string, signal?: AbortSignal, call?: number) =>
    request<Diagnostics>('GET', `/v1/runs/${enc(runId)}/diagnostics${call ? `?call=${call}` : ''}`, undefined, signal),
}

/** newChatId makes a chat id; crypto.randomUUID needs a secure context, which a reverse proxy over plain
 * HTTP is not, so there is a fallback on getRandomValues. */
export function newChatId(): string {
  if (typeof crypto.randomUUID === 'function') return crypto.randomUUID()
  const b = crypto.getRandomValues(new Uint8Array(16))
  b[6] = (b[6] & 0x0f) | 0x40
  b[8] = (b[8] & 0x3f) | 0x80
  const h = Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('')
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`
}
