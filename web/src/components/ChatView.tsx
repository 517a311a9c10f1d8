// One chat: its stored history is loaded first (GET /v1/ui/chat/{id}), then useChat takes over, resuming
// the answer of a run that is still going.
import { useCallback, useEffect, useMemo, useRef, useState, type DragEvent } from 'react'
import { useChat } from '@ai-sdk/react'
import { DefaultChatTransport, lastAssistantMessageIsCompleteWithApprovalResponses, type FileUIPart } from 'ai'
import { api, apiFetch, errorText, type Agent, type ApiError, type ChatMessage, type Model, type SuggestedAction, type Tool, type ToolProgress } from '../api'
import { Composer, type ComposerHandle } from './Composer'
import { DiagnosticsDialog } from './Diagnostics'
import { AlertIcon, CloseIcon, RetryIcon, SendIcon, Spinner } from './icons'
import { Message, TypingDots } from './Message'
import { waiting, type Decide, type ToolPartLike } from './ToolCard'

export type ChatSettings = {
  model: string
  /** the agent a new chat starts with ('' for a stored chat: it keeps its own) */
  agent: string
  /** the agents to pick from for a new chat; empty: no picker */
  agents: Agent[]
  onAgent: (name: string) => void
  selectedTools: string[] | undefined
  models: Model[]
  onModel: (id: string) => void
  tools: Tool[] | null
  disabledTools: ReadonlySet<string>
  onDisabledTools: (s: Set<string>) => void
}

type Props = ChatSettings & {
  chatId: string
  /** made on the client: nothing to load */
  fresh: boolean
  /** the first message of a fresh chat is being sent */
  onStarted: (id: string) => void
  /** a run started or ended: the session list may have changed */
  onActivity: () => void
  /** the first answer of a chat made here has ended: chatd titles the session from it */
  onFirstAnswer: (id: string) => void
  onTitle: (title: string) => void
}

/** activeRun is the run the history said was running: its answer is not in messages, and the resume
 * asks for it by id, so that it comes even when the run ended between the two requests. */
type Loaded = { messages: ChatMessage[]; resume: boolean; activeRun?: string }

export function ChatView(props: Props) {
  const { chatId, fresh, onTitle } = props
  // Fresh is read once: a fresh chat that has been sent stays mounted as it is.
  const [loaded, setLoaded] = useState<Loaded | null>(() => (fresh ? { messages: [], resume: false } : null))
  const [loadError, setLoadError] = useState('')
  const [attempt, setAttempt] = useState(0)

  useEffect(() => {
    if (loaded) return
    const ac = new AbortController()
    setLoadError('')
    api.chat(chatId, ac.signal).then(
      (c) => {
        if (c.title) onTitle(c.title)
        setLoaded({
          messages: Array.isArray(c.messages) ? c.messages : [],
          resume: !!c.active_run_id,
          activeRun: c.active_run_id || undefined,
        })
      },
      (e: unknown) => {
        if (ac.signal.aborted) return
        const err = e as ApiError
        if (err?.status === 404 || err?.status === 405) {
          // No such session (a fresh chat under this id), or a chatd without the route: start empty and
          // ask the resume endpoint whether something runs.
          setLoaded({ messages: [], resume: err.code !== 'session_not_found' })
          return
        }
        setLoadError(errorText(e))
      },
    )
    return () => ac.abort()
  }, [chatId, attempt])

  if (!loaded) {
    return (
      <div className="chat">
        <div className="chat-scroll">
          <div className="center-note">
            {loadError ? (
              <div className="chat-error" role="alert" data-testid="chat-error">
                <AlertIcon />
                <span>{loadError}</span>
                <button type="button" className="btn" onClick={() => setAttempt((n) => n + 1)}>
                  Retry
                </button>
              </div>
            ) : (
              <span className="muted">
                <Spinner /> Loading chat…
              </span>
            )}
          </div>
        </div>
      </div>
    )
  }
  return <Chat {...props} initial={loaded.messages} resume={loaded.resume} activeRun={loaded.activeRun} />
}

const noProgress: Record<string, ToolProgress> = {}

/** settle lets a promise of the chat end without an unhandled rejection: useChat reports its errors
 * through `error`, and what else may throw (a message that is gone) is not worth a page error. */
function settle(p: Promise<unknown>) {
  p.catch((e: unknown) => console.warn('chatd:', e))
}

function Chat(props: Props & { initial: ChatMessage[]; resume: boolean; activeRun?: string }) {
  const { chatId, fresh, initial, resume, activeRun, onStarted, onActivity } = props
  const settings = useRef(props)
  settings.current = props
  const runId = useRef('')
  const started = useRef(!fresh)
  // resumeRun is the run a resume streams: the one the history left out, or a server action's.
  const resumeRun = useRef(activeRun ?? '')
  const firstAnswer = useRef(fresh)
  // The agent the chat started with, sent with each of its messages (a session keeps its agent).
  const agent = useRef('')

  const transport = useMemo(
    () =>
      new DefaultChatTransport<ChatMessage>({
        api: '/v1/ui/chat',
        body: () => {
          const s = settings.current
          const b: Record<string, unknown> = {}
          if (s.model) b.model = s.model
          if (agent.current) b.agent = agent.current
          if (s.selectedTools) b.selected_tools = s.selectedTools
          return b
        },
        // chatd keeps the conversation and takes only the newest user message: only that one is
        // sent, so that a chat with many images does not outgrow the body limit.
        // A post that answers calls the run waits on (approvals, ask_user answers) sends the assistant
        // message that holds them instead.
        prepareSendMessagesRequest: ({ id, messages, body, trigger, messageId }) => {
          const tail = messages[messages.length - 1]
          if (trigger === 'submit-message' && tail?.role === 'assistant') {
            return { body: { ...body, id, trigger, messageId: messageId ?? tail.id, messages: [tail] } }
          }
          const last = [...messages].reverse().find((m) => m.role === 'user')
          return { body: { ...body, id, trigger, messageId, messages: last ? [last] : [] } }
        },
        // The resume on mount names the run the history left out: chatd streams it from its start
        // whether it still runs or has just ended (without a run, only a running one, else 204).
        prepareReconnectToStreamRequest: ({ id, api }) =>
          resumeRun.current
            ? { api: `${api}/${encodeURIComponent(id)}/stream?run=${encodeURIComponent(resumeRun.current)}` }
            : {},
        // The run's id comes in a header before any chunk: stop can cancel a run that has not said
        // `start` yet. A 401 (the sign-in lapsed) goes back to the sign-in page.
        fetch: async (input, init) => {
          const res = await apiFetch(input, init)
          const id = res.headers.get('X-Run-Id')
          if (id) runId.current = id
          return res
        },
      }),
    [],
  )

  const [progress, setProgress] = useState<Record<string, ToolProgress>>({})
  // Follow the answer while the view is at the bottom; a user who scrolled up is left alone.
  const stick = useRef(true)
  // answered is set when the user answers an ask_user call: its output then goes back to chatd, which
  // takes the answers and resumes the run (an approval goes back by addToolApprovalResponse).
  const answered = useRef(false)
  const { messages, status, error, sendMessage, regenerate, stop, clearError, resumeStream, addToolApprovalResponse, addToolOutput, setMessages } = useChat<ChatMessage>({
    id: chatId,
    messages: initial,
    transport,
    resume,
    throttle: 40,
    sendAutomaticallyWhen: ({ messages }) => {
      if (answered.current) {
        answered.current = false
        return true
      }
      return lastAssistantMessageIsCompleteWithApprovalResponses({ messages })
    },
    onData: (part) => {
      if (part.type === 'data-tool-progress') {
        const id = part.id ?? (part.data as ToolProgress)?.tool_call_id
        if (id) setProgress((p) => ({ ...p, [id]: part.data as ToolProgress }))
      }
    },
    onFinish: ({ isError, isAbort }) => {
      settings.current.onActivity()
      if (firstAnswer.current && !isError && !isAbort) {
        firstAnswer.current = false
        settings.current.onFirstAnswer(chatId)
      }
    },
  })

  const busy = status === 'submitted' || status === 'streaming'
  const last = messages[messages.length - 1]
  const streamingId = busy && last?.role === 'assistant' ? last.id : ''

  // A run has begun streaming: its session exists now (and has a title).
  useEffect(() => {
    if (status === 'streaming') onActivity()
  }, [status === 'streaming'])

  const send = useCallback(
    (text: string, files: FileUIPart[] = []) => {
      if (!started.current) {
        started.current = true
        agent.current = settings.current.agent
        onStarted(chatId)
      }
      runId.current = ''
      resumeRun.current = '' // a resume now is of this send's run: the session's running one
      setProgress({})
      stick.current = true
      if (files.length) settle(sendMessage(text.trim() ? { text, files } : { files }))
      else settle(sendMessage({ text }))
    },
    [chatId, onStarted, sendMessage],
  )

  const lastRef = useRef(last)
  lastRef.current = last
  const onStop = useCallback(() => {
    const m = lastRef.current
    const id = (m?.role === 'assistant' && m.metadata?.run_id) || runId.current
    settle(stop())
    const cancel = (rid: string) =>
      api
        .cancelRun(rid)
        .catch(() => undefined)
        .finally(() => settings.current.onActivity())
    if (id) {
      settle(cancel(id))
    } else {
      // Stopped before chatd answered: find the run it started, if it did.
      window.setTimeout(() => {
        api.chat(chatId).then(
          (c) => (c.active_run_id ? cancel(c.active_run_id) : undefined),
          () => undefined,
        )
      }, 300)
    }
  }, [chatId, stop])

  const onRegenerate = useCallback(() => {
    const m = lastRef.current
    // A server action's run is not regenerated: its tool has run (chatd refuses it).
    if (m?.role !== 'assistant' || m.metadata?.action) return
    runId.current = ''
    resumeRun.current = ''
    setProgress({})
    settle(regenerate({ messageId: m.id }))
  }, [regenerate])

  const retry = () => {
    const m = lastRef.current
    clearError()
    if (m?.role === 'assistant') onRegenerate()
    else if (m?.role === 'user') {
      runId.current = ''
      settle(sendMessage())
    }
  }

  const onSend = useCallback((text: string) => send(text), [send])

  // decide answers the calls a run waits on. Edited arguments replace the part's input before the
  // approval goes back: chatd runs the call with the input the message carries.
  const decide = useMemo<Decide>(
    () => ({
      approve: (part: ToolPartLike, input?: unknown) => {
        const id = part.approval?.id ?? part.toolCallId
        if (input !== undefined) {
          setMessages((ms) =>
            ms.map((m) =>
              m.role !== 'assistant'
                ? m
                : { ...m, parts: m.parts.map((p) => ((p as unknown as ToolPartLike).toolCallId === part.toolCallId ? ({ ...p, input } as typeof p) : p)) },
            ),
          )
        }
        stick.current = true
        void Promise.resolve(addToolApprovalResponse({ id, approved: true })).catch(() => undefined)
      },
      deny: (part: ToolPartLike, reason: string) => {
        stick.current = true
        void Promise.resolve(addToolApprovalResponse({ id: part.approval?.id ?? part.toolCallId, approved: false, reason: reason || undefined })).catch(() => undefined)
      },
      answer: (part: ToolPartLike, answers: string[]) => {
        answered.current = true
        stick.current = true
        void Promise.resolve(addToolOutput({ tool: 'ask_user' as never, toolCallId: part.toolCallId, output: { answers } as never })).catch(() => undefined)
      },
    }),
    [addToolApprovalResponse, addToolOutput, setMessages],
  )
  // A server action runs its tool as a run of the session: once chatd has started it, the chat follows
  // it as it follows any run, by the resume stream of that run, which brings it as a new message.
  const [actionError, setActionError] = useState('')
  const onAction = useCallback(
    (a: SuggestedAction) => {
      setActionError('')
      setProgress({})
      stick.current = true
      api.runAction(chatId, a, settings.current.selectedTools).then(
        (id) => {
          if (!id) return
          runId.current = id
          resumeRun.current = id
          settle(resumeStream())
        },
        (e: unknown) => setActionError(errorText(e)),
      )
    },
    [chatId, resumeStream],
  )
  const [diagRun, setDiagRun] = useState('')
  const onDiagnostics = useCallback((id: string) => setDiagRun(id), [])

  // Esc stops a streaming answer wherever the focus is (the composer handles its own).
  useEffect(() => {
    if (!busy) return
    const onKey = (e: KeyboardEvent) => {
      if (e.key !== 'Escape' || e.defaultPrevented || document.querySelector('dialog[open]')) return
      const t = e.target as HTMLElement | null
      if (t?.closest('textarea, input, select')) return
      onStop()
    }
    document.addEventListener('keydown', onKey)
    return () => document.removeEventListener('keydown', onKey)
  }, [busy, onStop])

  const scroller = useRef<HTMLDivElement>(null)
  const [atBottom, setAtBottom] = useState(true)
  useEffect(() => {
    const el = scroller.current
    if (el && stick.current) el.scrollTop = el.scrollHeight
  }, [messages, status, error])
  const onScroll = () => {
    const el = scroller.current
    if (!el) return
    const bottom = el.scrollHeight - el.scrollTop - el.clientHeight < 80
    stick.current = bottom
    if (bottom !== atBottom) setAtBottom(bottom)
  }
  const toBottom = () => {
    const el = scroller.current
    if (!el) return
    stick.current = true
    el.scrollTo({ top: el.scrollHeight, behavior: 'smooth' })
  }

  const composer = useRef<ComposerHandle>(null)
  useEffect(() => {
    if (window.matchMedia('(pointer: fine)').matches) composer.current?.focus()
  }, [chatId])
  const [dragging, setDragging] = useState(false)
  const onDrop = (e: DragEvent) => {
    e.preventDefault()
    setDragging(false)
    composer.current?.addFiles(Array.from(e.dataTransfer.files))
  }

  const lastAssistantId = last?.role === 'assistant' ? last.id : ''
  const empty = messages.length === 0

  return (
    <div
      className={`chat${dragging ? ' dragging' : ''}`}
      onDragOver={(e) => {
        if (Array.from(e.dataTransfer.types).includes('Files')) {
          e.preventDefault()
          if (!dragging) setDragging(true)
        }
      }}
      onDragLeave={(e) => {
        if (e.currentTarget === e.target) setDragging(false)
      }}
      onDrop={onDrop}
    >
      <div className="chat-scroll" ref={scroller} onScroll={onScroll}>
        <div className="thread">
          {empty ? (
            <div className="empty">
              <div className="empty-mark" aria-hidden="true" />
              <h1>How can I help?</h1>
              <p className="muted">Ask anything. Answers stream in as they are written; tools run as the model calls them.</p>
            </div>
          ) : null}
          {messages.map((m) => (
            <Message
              key={m.id}
              message={m}
              streaming={m.id === streamingId}
              busy={busy}
              canRegenerate={m.id === lastAssistantId && !busy && !m.metadata?.action && !waitsForPerson(m)}
              progress={m.id === streamingId ? progress : noProgress}
              onSend={onSend}
              onAction={onAction}
              onRegenerate={onRegenerate}
              onDiagnostics={onDiagnostics}
              decide={m.id === lastAssistantId ? decide : undefined}
            />
          ))}
          {status === 'submitted' && last?.role !== 'assistant' ? (
            <div className="msg assistant pending">
              <TypingDots />
            </div>
          ) : null}
          {actionError ? (
            <div className="chat-error" data-testid="action-error" role="alert">
              <AlertIcon />
              <span className="chat-error-text">{actionError}</span>
              <span className="spacer" />
              <button type="button" className="icon-btn" aria-label="Dismiss" title="Dismiss" onClick={() => setActionError('')}>
                <CloseIcon />
              </button>
            </div>
          ) : null}
          {error ? (
            <div className="chat-error" data-testid="chat-error" role="alert">
              <AlertIcon />
              <span className="chat-error-text">{errorText(error)}</span>
              <span className="spacer" />
              {last ? (
                <button type="button" className="btn" onClick={retry}>
                  <RetryIcon /> Retry
                </button>
              ) : null}
              <button type="button" className="icon-btn" aria-label="Dismiss" title="Dismiss" onClick={clearError}>
                <CloseIcon />
              </button>
            </div>
          ) : null}
        </div>
      </div>
      <div className="visually-hidden" role="status">
        {status === 'submitted' ? 'Sending…' : status === 'streaming' ? 'Answering…' : status === 'error' ? 'The answer failed.' : ''}
      </div>
      {!atBottom ? (
        <button type="button" className="to-bottom" onClick={toBottom} aria-label="Scroll to the newest message">
          <SendIcon />
        </button>
      ) : null}
      <div className="composer-wrap">
        <Composer
          ref={composer}
          busy={busy}
          onSend={send}
          onStop={onStop}
          models={props.models}
          model={props.model}
          onModel={props.onModel}
          agents={props.agents}
          agent={props.agent}
          onAgent={props.onAgent}
          tools={props.tools}
          disabledTools={props.disabledTools}
          onDisabledTools={props.onDisabledTools}
        />
        <p className="composer-hint small muted">Enter to send · Shift+Enter for a new line · Esc to stop</p>
      </div>
      {diagRun ? <DiagnosticsDialog runId={diagRun} onClose={() => setDiagRun('')} /> : null}
    </div>
  )
}

/** waitsForPerson reports whether an answer's run waits for a person (an approval, or ask_user's
 * questions): it is not regenerated, since chatd would refuse it while the run waits (session_busy). */
function waitsForPerson(m: ChatMessage): boolean {
  return m.parts.some((p) => (p.type === 'dynamic-tool' || p.type.startsWith('tool-')) && waiting(p as unknown as ToolPartLike, false))
}
