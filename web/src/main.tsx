import { StrictMode } from 'react'
import { createRoot } from 'react-dom/client'
import { AuthGate } from './AuthGate'
import './styles.css'

// The theme the user chose, before the first render (without a choice the system's applies).
try {
  const t = localStorage.getItem('chatd.theme')
  if (t === 'light' || t === 'dark') document.documentElement.dataset.theme = t
} catch {
  // storage is off
}

createRoot(document.getElementById('root')!).render(
  <StrictMode>
    <AuthGate />
  </StrictMode>,
)
