// The sessions: new chat, the list (most recently updated first), rename inline, delete.
import { useEffect, useRef, useState } from 'react'
import type { Session, Whoami } from '../api'
import { CloseIcon, EditIcon, MoonIcon, PlusIcon, SignOutIcon, SunIcon, TrashIcon } from './icons'

type Props = {
  sessions: Session[] | null
  error: string
  actionError: string
  onDismissError: () => void
  currentId: string
  hasMore: boolean
  onLoadMore: () => void
  onNew: () => void
  onOpen: (id: string) => void
  onRename: (id: string, title: string) => void
  onDelete: (s: Session) => void
  theme: 'light' | 'dark'
  onTheme: () => void
  open: boolean
  /** who is signed in; null when chatd has no sign-in */
  who: Whoami | null
  /** absent when there is nothing to sign out of (a trusted proxy's user, a bearer token) */
  onSignOut?: () => void
}

function RenameInput({ initial, onDone }: { initial: string; onDone: (title: string | null) => void }) {
  const [value, setValue] = useState(initial)
  const done = useRef(false)
  const ref = useRef<HTMLInputElement>(null)
  useEffect(() => {
    ref.current?.focus()
    ref.current?.select()
  }, [])
  const finish = (title: string | null) => {
    if (done.current) return
    done.current = true
    onDone(title)
  }
  return (
    <input
      ref={ref}
      className="rename-input"
      data-testid="session-rename-input"
      aria-label="Chat title"
      value={value}
      maxLength={200}
      onChange={(e) => setValue(e.target.value)}
      onKeyDown={(e) => {
        if (e.key === 'Enter') {
          e.preventDefault()
          finish(value.trim())
        } else if (e.key === 'Escape') {
          e.preventDefault()
          e.stopPropagation()
          finish(null)
        }
      }}
      onBlur={() => finish(value.trim())}
    />
  )
}

/** groupOf puts a session under Today, Yesterday, Previous 7 days, Previous 30 days or Older. */
function groupOf(iso: string, now: Date): string {
  const t = new Date(iso)
  if (Number.isNaN(t.getTime())) return 'Older'
  const day = (d: Date) => new Date(d.getFullYear(), d.getMonth(), d.getDate()).getTime()
  const days = Math.round((day(now) - day(t)) / 86_400_000)
  if (days <= 0) return 'Today'
  if (days === 1) return 'Yesterday'
  if (days < 7) return 'Previous 7 days'
  if (days < 30) return 'Previous 30 days'
  return 'Older'
}

export function Sidebar(props: Props) {
  const { sessions, error, actionError, onDismissError, currentId, hasMore, onLoadMore, onNew, onOpen, onRename, onDelete, theme, onTheme, open, who, onSignOut } = props
  const [renaming, setRenaming] = useState('')
  const now = new Date()
  let lastGroup = ''

  return (
    <nav className={`sidebar${open ? ' open' : ''}`} aria-label="Chats">
      <div className="sidebar-head">
        <a
          className="brand"
          href="/"
          onClick={(e) => {
            e.preventDefault()
            onNew()
          }}
        >
          <span className="brand-mark" aria-hidden="true" />
          chatd
        </a>
        <span className="spacer" />
        <button type="button" className="icon-btn" data-testid="theme-toggle" onClick={onTheme} aria-label={theme === 'dark' ? 'Use light theme' : 'Use dark theme'} title={theme === 'dark' ? 'Light theme' : 'Dark theme'}>
          {theme === 'dark' ? <SunIcon /> : <MoonIcon />}
        </button>
      </div>
      <button type="button" className="new-chat" data-testid="new-chat" onClick={onNew}>
        <PlusIcon /> New chat
      </button>
      <div className="session-list" data-testid="session-list">
        {sessions === null && !error ? <p className="muted small pad">Loading…</p> : null}
        {error || actionError ? (
          <div className="notice small" role="alert" data-testid="sidebar-error">
            <span>{actionError || error}</span>
            {actionError ? (
              <button type="button" className="icon-btn sm" aria-label="Dismiss" title="Dismiss" onClick={onDismissError}>
                <CloseIcon />
              </button>
            ) : null}
          </div>
        ) : null}
        {sessions !== null && sessions.length === 0 && !error ? <p className="muted small pad">No chats yet.</p> : null}
        {(sessions ?? []).map((s) => {
          const group = groupOf(s.updated_at, now)
          const header = group !== lastGroup ? <div className="session-group">{group}</div> : null
          lastGroup = group
          const current = s.id === currentId
          const title = s.title || 'Untitled chat'
          return (
            <div key={s.id}>
              {header}
              <div className={`session-item${current ? ' current' : ''}`} data-testid="session-item" data-session-id={s.id} aria-current={current ? 'page' : undefined}>
                {renaming === s.id ? (
                  <RenameInput
                    initial={s.title}
                    onDone={(t) => {
                      setRenaming('')
                      if (t && t !== s.title) onRename(s.id, t)
                    }}
                  />
                ) : (
                  <>
                    <a
                      className="session-link"
                      href={`/c/${encodeURIComponent(s.id)}`}
                      onClick={(e) => {
                        if (e.metaKey || e.ctrlKey || e.shiftKey || e.button !== 0) return
                        e.preventDefault()
                        onOpen(s.id)
                      }}
                      title={title}
                    >
                      <span className="session-title" data-testid="session-title">
                        {title}
                      </span>
                    </a>
                    <span className="session-actions">
                      <button type="button" className="icon-btn sm" data-testid="session-rename" aria-label={`Rename ${title}`} title="Rename" onClick={() => setRenaming(s.id)}>
                        <EditIcon />
                      </button>
                      <button type="button" className="icon-btn sm danger" data-testid="session-delete" aria-label={`Delete ${title}`} title="Delete" onClick={() => onDelete(s)}>
                        <TrashIcon />
                      </button>
                    </span>
                  </>
                )}
              </div>
            </div>
          )
        })}
        {hasMore ? (
          <button type="button" className="link-btn load-more" onClick={onLoadMore}>
            Load more
          </button>
        ) : null}
      </div>
      {who ? <Account who={who} onSignOut={onSignOut} /> : null}
    </nav>
  )
}

function Account({ who, onSignOut }: { who: Whoami; onSignOut?: () => void }) {
  const until = who.expires_at ? new Date(who.expires_at) : null
  const title = `Signed in as ${who.user}${until && !Number.isNaN(until.getTime()) ? ` until ${until.toLocaleString()}` : ''}`
  return (
    <div className="sidebar-foot">
      <span className="avatar" aria-hidden="true">
        {(Array.from(who.user)[0] ?? '?').toUpperCase()}
      </span>
      <span className="account-name truncate" title={title}>
        <span data-testid="whoami">{who.user}</span>
        {who.admin ? <span className="badge subtle">admin</span> : null}
      </span>
      {onSignOut ? (
        <button type="button" className="btn signout-btn" data-testid="signout" onClick={onSignOut}>
          <SignOutIcon /> Sign out
        </button>
      ) : null}
    </div>
  )
}
