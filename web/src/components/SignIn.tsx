// The sign-in page of a chatd that requires an API key: the key is traded for a session cookie
// (POST /v1/auth/session) and kept nowhere else — not in storage, not in state after the attempt.
import { useEffect, useRef, useState, type FormEvent } from 'react'
import { auth, errorText, sentence, type Whoami } from '../api'
import { AlertIcon, KeyIcon, Spinner } from './icons'

type Props = {
  /** why the page shows: a sign-in that lapsed, or nothing on a first visit */
  notice: string
  onSignedIn: (who: Whoami) => void
}

export function SignIn({ notice, onSignedIn }: Props) {
  const [key, setKey] = useState('')
  const [busy, setBusy] = useState(false)
  const [error, setError] = useState('')
  const input = useRef<HTMLInputElement>(null)

  useEffect(() => {
    document.title = 'Sign in · chatd'
  }, [])
  useEffect(() => {
    if (!busy) input.current?.focus()
  }, [busy])

  const submit = async (e: FormEvent) => {
    e.preventDefault()
    const k = key.trim()
    // The key leaves the page's state as soon as it is sent: what stays in memory is the session.
    setKey('')
    if (!k) {
      setError('Enter your API key.')
      return
    }
    setBusy(true)
    setError('')
    try {
      onSignedIn(await auth.signIn(k))
    } catch (err: unknown) {
      setError(sentence(errorText(err)))
      setBusy(false)
    }
  }

  return (
    <main className="signin">
      <form className="signin-card" data-testid="signin-form" onSubmit={submit} noValidate>
        <div className="signin-brand">
          <span className="brand-mark" aria-hidden="true" />
          chatd
        </div>
        <h1>Sign in</h1>
        <p className="muted">
          This chatd requires an API key. Ask its operator for one: <code>chatd keys create --user NAME</code>
        </p>
        {notice && !error ? (
          <p className="signin-notice small" role="status" data-testid="signin-notice">
            {notice}
          </p>
        ) : null}
        <label className="signin-label" htmlFor="signin-key">
          API key
        </label>
        <div className="signin-field">
          <KeyIcon />
          {/* No name attribute: were the form ever submitted without this script, the key would not
              go into a URL. */}
          <input
            ref={input}
            id="signin-key"
            data-testid="signin-key"
            type="password"
            autoComplete="off"
            autoCapitalize="off"
            spellCheck={false}
            placeholder="chd_…"
            value={key}
            disabled={busy}
            aria-invalid={error ? true : undefined}
            aria-describedby={error ? 'signin-error' : undefined}
            onChange={(e) => setKey(e.target.value)}
          />
        </div>
        {error ? (
          <div className="chat-error signin-error" id="signin-error" role="alert" data-testid="signin-error">
            <AlertIcon />
            <span className="chat-error-text">{error}</span>
          </div>
        ) : null}
        <button type="submit" className="signin-submit" data-testid="signin-submit" disabled={busy}>
          {busy ? <Spinner /> : null}
          {busy ? 'Signing in…' : 'Sign in'}
        </button>
      </form>
    </main>
  )
}
