// Who may use the app: the session check at start (GET /v1/auth/session), the sign-in page when chatd
// requires a key, and back to it when any API call answers 401. Signed out, the app is unmounted, so
// nothing of the chats stays in memory.
import { useCallback, useEffect, useState } from 'react'
import { App } from './App'
import { ApiError, auth, errorText, onUnauthorized, sentence, type Whoami } from './api'
import { AlertIcon } from './components/icons'
import { SignIn } from './components/SignIn'

type State =
  | { kind: 'checking' }
  | { kind: 'in'; who: Whoami }
  | { kind: 'out'; notice: string }
  | { kind: 'error'; message: string }

// A chatd from before authentication has no /v1/auth/session: it is open to whoever reaches it.
const local: Whoami = { user: 'local', method: 'local' }

/** lapsed says why a sign-in ended, for the sign-in page; a first visit (auth_required) needs no word. */
function lapsed(err: ApiError, firstVisit: boolean): string {
  switch (err.code) {
    case 'auth_required':
      return firstVisit ? '' : 'You were signed out. Sign in again to go on.'
    case 'session_expired':
      return 'Your sign-in has expired. Sign in again to go on.'
    case 'invalid_session':
      return 'Your sign-in is no longer valid (the key may have been revoked). Sign in again to go on.'
    default:
      return sentence(err.message)
  }
}

export function AuthGate() {
  const [state, setState] = useState<State>({ kind: 'checking' })
  const [attempt, setAttempt] = useState(0)

  useEffect(() => {
    let live = true
    auth.session().then(
      (who) => live && setState({ kind: 'in', who }),
      (e: unknown) => {
        if (!live) return
        if (e instanceof ApiError && e.status === 401) setState({ kind: 'out', notice: lapsed(e, true) })
        else if (e instanceof ApiError && (e.status === 404 || e.status === 405)) setState({ kind: 'in', who: local })
        else setState({ kind: 'error', message: errorText(e) })
      },
    )
    return () => {
      live = false
    }
  }, [attempt])

  useEffect(
    () => onUnauthorized((e) => setState((s) => (s.kind === 'in' ? { kind: 'out', notice: lapsed(e, false) } : s))),
    [],
  )

  const signOut = useCallback(async () => {
    try {
      await auth.signOut()
    } catch (e) {
      // Already signed out is signed out; anything else leaves the cookie, and the user signed in.
      if (!(e instanceof ApiError && e.status === 401)) throw e
    }
    // The next sign-in, perhaps someone else's, starts at a new chat.
    window.history.replaceState(null, '', '/')
    setState({ kind: 'out', notice: '' })
  }, [])

  switch (state.kind) {
    case 'checking':
      return (
        <div className="boot">
          <span className="brand-mark" aria-hidden="true" />
          chatd
        </div>
      )
    case 'error':
      return (
        <main className="signin">
          <div className="signin-card">
            <div className="chat-error" role="alert" data-testid="auth-error">
              <AlertIcon />
              <span className="chat-error-text">{state.message}</span>
              <span className="spacer" />
              <button type="button" className="btn" onClick={() => {
                  setState({ kind: 'checking' })
                  setAttempt((n) => n + 1)
                }}>
                Retry
              </button>
            </div>
          </div>
        </main>
      )
    case 'out':
      return <SignIn notice={state.notice} onSignedIn={(who) => setState({ kind: 'in', who })} />
    case 'in':
      return <App who={state.who} onSignOut={signOut} />
  }
}
