// The app: routes (`/` a new chat, `/c/<id>` a session), the sessions sidebar, the model and tool
// choices, and the theme.
import { useCallback, useEffect, useMemo, useRef, useState } from 'react'
import { api, errorText, newChatId, type Agent, type Model, type Session, type Tool, type Whoami } from './api'
import { ChatView } from './components/ChatView'
import { MenuIcon, PlusIcon } from './components/icons'
import { Sidebar } from './components/Sidebar'

type Route = { id: string; fresh: boolean }

function parseRoute(): Route {
  const m = /^\/c\/([^/]+)\/?$/.exec(window.location.pathname)
  if (m) {
    try {
      return { id: decodeURIComponent(m[1]), fresh: false }
    } catch {
      // a malformed escape: a new chat
    }
  }
  return { id: newChatId(), fresh: true }
}

const chatPath = (id: string) => `/c/${encodeURIComponent(id)}`

function read(key: string): string | null {
  try {
    return localStorage.getItem(key)
  } catch {
    return null
  }
}
function write(key: string, value: string) {
  try {
    localStorage.setItem(key, value)
  } catch {
    // storage is off: the choice lasts for this page
  }
}

type Theme = 'light' | 'dark'
const themeKey = 'chatd.theme'
const modelKey = 'chatd.model'
const agentKey = 'chatd.agent'

function useTheme(): [Theme, () => void] {
  const media = useMemo(() => window.matchMedia('(prefers-color-scheme: dark)'), [])
  const [chosen, setChosen] = useState<Theme | null>(() => {
    const t = read(themeKey)
    return t === 'light' || t === 'dark' ? t : null
  })
  const [system, setSystem] = useState<Theme>(media.matches ? 'dark' : 'light')
  useEffect(() => {
    const on = () => setSystem(media.matches ? 'dark' : 'light')
    media.addEventListener('change', on)
    return () => media.removeEventListener('change', on)
  }, [media])
  const theme = chosen ?? system
  useEffect(() => {
    document.documentElement.dataset.theme = theme
  }, [theme])
  const toggle = useCallback(() => {
    const next: Theme = theme === 'dark' ? 'light' : 'dark'
    write(themeKey, next)
    setChosen(next)
  }, [theme])
  return [theme, toggle]
}

type Props = {
  /** who is signed in; method `local` is a chatd without authentication */
  who: Whoami
  /** ends the session; it rejects when chatd could not be told */
  onSignOut: () => Promise<void>
}

export function App({ who, onSignOut }: Props) {
  const [route, setRoute] = useState<Route>(parseRoute)
  const [theme, toggleTheme] = useTheme()
  const [sidebarOpen, setSidebarOpen] = useState(false)

  useEffect(() => {
    if (!sidebarOpen) return
    const onKey = (e: KeyboardEvent) => {
      if (e.key === 'Escape' && !e.defaultPrevented) setSidebarOpen(false)
    }
    document.addEventListener('keydown', onKey)
    return () => document.removeEventListener('keydown', onKey)
  }, [sidebarOpen])

  useEffect(() => {
    const onPop = () => setRoute(parseRoute())
    window.addEventListener('popstate', onPop)
    return () => window.removeEventListener('popstate', onPop)
  }, [])

  const go = useCallback((r: Route) => {
    const path = r.fresh ? '/' : chatPath(r.id)
    if (window.location.pathname !== path) window.history.pushState(null, '', path)
    setRoute(r)
    setSidebarOpen(false)
  }, [])

  // Sessions: the first page, refreshed when a run starts or ends; more pages on demand.
  const [sessions, setSessions] = useState<Session[] | null>(null)
  const [cursor, setCursor] = useState('')
  const [listError, setListError] = useState('')
  // What a rename or delete met (a 409 while a run is active): shown until dismissed or the next action.
  const [actionError, setActionError] = useState('')
  const loadSeq = useRef(0)
  const refresh = useCallback(() => {
    const seq = ++loadSeq.current
    api.sessions().then(
      (r) => {
        if (seq !== loadSeq.current) return
        setSessions(r.sessions ?? [])
        setCursor(r.next_cursor ?? '')
        setListError('')
      },
      (e: unknown) => {
        if (seq === loadSeq.current) setListError(errorText(e))
      },
    )
  }, [])
  useEffect(refresh, [refresh])
  const loadMore = useCallback(() => {
    if (!cursor) return
    const seq = ++loadSeq.current
    api.sessions(cursor).then(
      (r) => {
        if (seq !== loadSeq.current) return
        setSessions((cur) => {
          const have = new Set((cur ?? []).map((s) => s.id))
          return [...(cur ?? []), ...(r.sessions ?? []).filter((s) => !have.has(s.id))]
        })
        setCursor(r.next_cursor ?? '')
      },
      (e: unknown) => setListError(errorText(e)),
    )
  }, [cursor])

  // A new chat's title: chatd titles a session from its first exchange after the answer has ended, with a
  // model call of its own (title_model), so the list is asked again a few times, backing off, until the
  // title changes (or ~20 s have passed: titling is off, failed, or the user renamed the chat first).
  const titleWatch = useRef(0)
  useEffect(() => () => window.clearTimeout(titleWatch.current), [])
  const watchTitle = useCallback((id: string) => {
    window.clearTimeout(titleWatch.current)
    const delays = [500, 1000, 2000, 3000, 5000, 8000]
    let seen: string | undefined
    let i = 0
    const tick = () => {
      api.session(id).then(
        (s) => {
          seen ??= s.title
          setSessions((cur) => cur?.map((x) => (x.id === id ? { ...x, title: s.title } : x)) ?? cur)
          if (s.title !== seen) return
          if (++i < delays.length) titleWatch.current = window.setTimeout(tick, delays[i])
        },
        () => undefined,
      )
    }
    titleWatch.current = window.setTimeout(tick, delays[0])
  }, [])

  const onRename = useCallback((id: string, title: string) => {
    setSessions((cur) => cur?.map((s) => (s.id === id ? { ...s, title } : s)) ?? cur)
    setActionError('')
    api.renameSession(id, title).then(
      () => undefined,
      (e: unknown) => {
        setActionError(`Could not rename the chat: ${errorText(e)}`)
        refresh()
      },
    )
  }, [refresh])

  const onDelete = useCallback(
    (s: Session) => {
      if (!window.confirm(`Delete “${s.title || 'Untitled chat'}”? This cannot be undone.`)) return
      setActionError('')
      api.deleteSession(s.id).then(
        () => {
          setSessions((cur) => cur?.filter((x) => x.id !== s.id) ?? cur)
          if (s.id === route.id) go({ id: newChatId(), fresh: true })
        },
        (e: unknown) => setActionError(`Could not delete the chat: ${errorText(e)}`),
      )
    },
    [route.id, go],
  )

  // Models: the default first, a stored choice when the server still offers it.
  const [models, setModels] = useState<Model[]>([])
  const [defaultModel, setDefaultModel] = useState('')
  const [model, setModelState] = useState('')
  useEffect(() => {
    api.models().then(
      (r) => {
        const list = Array.isArray(r.data) ? r.data : []
        setModels(list)
        setDefaultModel(r.default ?? '')
        const stored = read(modelKey)
        setModelState(stored && (list.some((m) => m.id === stored) || stored === r.default) ? stored : (r.default ?? list[0]?.id ?? ''))
      },
      () => setModels([]),
    )
  }, [])
  const onModel = useCallback((id: string) => {
    setModelState(id)
    write(modelKey, id)
  }, [])
  const modelList = useMemo(
    () => (defaultModel && !models.some((m) => m.id === defaultModel) ? [{ id: defaultModel }, ...models] : models),
    [models, defaultModel],
  )

  // Agents the caller may use (GET /v1/agents): a new chat starts with the one picked (remembered in the
  // browser); a session keeps the agent it started with.
  const [agents, setAgents] = useState<Agent[]>([])
  const [newAgent, setNewAgent] = useState('')
  useEffect(() => {
    api.agents().then(
      (r) => {
        const list = Array.isArray(r.agents) ? r.agents : []
        setAgents(list)
        const stored = read(agentKey)
        const pick = list.find((a) => a.name === stored) ?? list.find((a) => a.name === 'default') ?? list[0]
        setNewAgent(pick?.name ?? '')
      },
      () => setAgents([]),
    )
  }, [])
  const onAgent = useCallback(
    (name: string) => {
      setNewAgent(name)
      write(agentKey, name)
      // The agent's own model, unless the user picks another: the model picker's choice overrides it.
      const m = agents.find((a) => a.name === name)?.model
      if (m) onModel(m)
    },
    [agents, onModel],
  )

  // Tools of the session's agent (the picked agent for a new chat); unchecked ones are remembered by name.
  const current = sessions?.find((s) => s.id === route.id)
  const sessionAgent = current?.agent ?? (route.fresh ? newAgent : '')
  const agent = sessionAgent && sessionAgent !== 'default' ? sessionAgent : ''
  const [tools, setTools] = useState<Tool[] | null>(null)
  const [disabledTools, setDisabledTools] = useState<Set<string>>(() => new Set())
  useEffect(() => {
    let live = true
    setTools(null)
    api.tools(agent || undefined).then(
      (r) => live && setTools(r.tools ?? []),
      () => live && setTools([]),
    )
    return () => {
      live = false
    }
  }, [agent])
  const selectedTools = useMemo(() => {
    if (!tools || !tools.some((t) => disabledTools.has(t.name))) return undefined
    return tools.filter((t) => !disabledTools.has(t.name)).map((t) => t.name)
  }, [tools, disabledTools])

  const [loadedTitle, setLoadedTitle] = useState<{ id: string; title: string } | null>(null)
  const title = current?.title || (loadedTitle?.id === route.id ? loadedTitle.title : '') || (route.fresh ? 'New chat' : 'Chat')
  useEffect(() => {
    document.title = route.fresh && !current ? 'chatd' : `${title} · chatd`
  }, [title, route.fresh, current])

  const onStarted = useCallback((id: string) => {
    // The first message of a new chat: it has an address now.
    window.history.replaceState(null, '', chatPath(id))
    setRoute((r) => (r.id === id ? { id, fresh: false } : r))
  }, [])
  const onTitle = useCallback((t: string) => setLoadedTitle({ id: route.id, title: t }), [route.id])

  const signOut = useCallback(() => {
    setActionError('')
    onSignOut().catch((e: unknown) => setActionError(`Could not sign out: ${errorText(e)}`))
  }, [onSignOut])

  const newChat = useCallback(() => go({ id: newChatId(), fresh: true }), [go])
  const openChat = useCallback((id: string) => go({ id, fresh: false }), [go])

  return (
    <div className={`app${sidebarOpen ? ' sidebar-open' : ''}`}>
      <Sidebar
        sessions={sessions}
        error={listError}
        actionError={actionError}
        onDismissError={() => setActionError('')}
        currentId={route.id}
        hasMore={!!cursor}
        onLoadMore={loadMore}
        onNew={newChat}
        onOpen={openChat}
        onRename={onRename}
        onDelete={onDelete}
        theme={theme}
        onTheme={toggleTheme}
        open={sidebarOpen}
        who={who.method === 'local' ? null : who}
        // Only a session cookie can be ended here: a key sent as a bearer token or a proxy's header
        // sign the user in again with the next request.
        onSignOut={who.method === 'cookie' ? signOut : undefined}
      />
      {sidebarOpen ? <div className="scrim" onClick={() => setSidebarOpen(false)} aria-hidden="true" /> : null}
      <main className="main">
        <header className="topbar">
          <button
            type="button"
            className="icon-btn sidebar-toggle"
            data-testid="sidebar-toggle"
            aria-label={sidebarOpen ? 'Close chats' : 'Open chats'}
            aria-expanded={sidebarOpen}
            onClick={() => setSidebarOpen((o) => !o)}
          >
            <MenuIcon />
          </button>
          <h2 className="topbar-title truncate">{title}</h2>
          <button type="button" className="icon-btn topbar-new" aria-label="New chat" title="New chat" onClick={newChat}>
            <PlusIcon />
          </button>
        </header>
        <ChatView
          key={route.id}
          chatId={route.id}
          fresh={route.fresh}
          onStarted={onStarted}
          onActivity={refresh}
          onFirstAnswer={watchTitle}
          onTitle={onTitle}
          model={model}
          agent={route.fresh ? newAgent : ''}
          agents={route.fresh ? agents : []}
          onAgent={onAgent}
          selectedTools={selectedTools}
          models={modelList}
          onModel={onModel}
          tools={tools}
          disabledTools={disabledTools}
          onDisabledTools={setDisabledTools}
        />
      </main>
    </div>
  )
}
