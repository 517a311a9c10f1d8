// Which tools the model may use: a popover of checkboxes. All checked sends no selected_tools (every tool
// the agent allows); otherwise the checked names.
import { useEffect, useRef, useState } from 'react'
import type { Tool } from '../api'
import { ToolIcon } from './icons'

type Props = { tools: Tool[] | null; disabled: ReadonlySet<string>; onChange: (s: Set<string>) => void }

export function ToolPicker({ tools, disabled, onChange }: Props) {
  const [open, setOpen] = useState(false)
  const root = useRef<HTMLDivElement>(null)
  const list = tools ?? []
  const on = list.filter((t) => !disabled.has(t.name)).length

  useEffect(() => {
    if (!open) return
    const onDown = (e: PointerEvent) => {
      if (root.current && !root.current.contains(e.target as Node)) setOpen(false)
    }
    const onKey = (e: KeyboardEvent) => {
      if (e.key === 'Escape') {
        e.stopPropagation()
        setOpen(false)
      }
    }
    document.addEventListener('pointerdown', onDown)
    document.addEventListener('keydown', onKey, true)
    return () => {
      document.removeEventListener('pointerdown', onDown)
      document.removeEventListener('keydown', onKey, true)
    }
  }, [open])

  const toggle = (name: string, checked: boolean) => {
    const next = new Set(disabled)
    if (checked) next.delete(name)
    else next.add(name)
    onChange(next)
  }

  return (
    <div className="tool-picker-wrap" ref={root}>
      <button
        type="button"
        className={`chip-btn${on < list.length ? ' active' : ''}`}
        data-testid="tool-picker-toggle"
        aria-expanded={open}
        aria-controls="tool-picker"
        title="Tools the model may use"
        onClick={() => setOpen((o) => !o)}
      >
        <ToolIcon />
        <span>
          Tools{' '}
          <span className="muted">{tools === null ? '' : on === list.length ? `(${list.length})` : `(${on}/${list.length})`}</span>
        </span>
      </button>
      {open ? (
        <div className="popover tool-picker" id="tool-picker" data-testid="tool-picker" role="group" aria-label="Tools">
          <div className="popover-head">
            <strong>Tools</strong>
            <span className="spacer" />
            <button type="button" className="link-btn" onClick={() => onChange(new Set())}>
              All
            </button>
            <button type="button" className="link-btn" onClick={() => onChange(new Set(list.map((t) => t.name)))}>
              None
            </button>
          </div>
          {tools === null ? <p className="muted small pad">Loading…</p> : null}
          {tools !== null && list.length === 0 ? <p className="muted small pad">This agent has no tools.</p> : null}
          <ul className="tool-list">
            {list.map((t) => (
              <li key={t.name}>
                <label className="tool-option">
                  <input
                    type="checkbox"
                    data-tool-name={t.name}
                    checked={!disabled.has(t.name)}
                    onChange={(e) => toggle(t.name, e.target.checked)}
                  />
                  <span className="tool-option-text">
                    <span className="tool-option-name">
                      {t.name}
                      {t.source && t.source !== 'builtin' ? <span className="badge">{t.source.replace(/^mcp:/, '')}</span> : null}
                      {t.read_only ? <span className="badge subtle">read-only</span> : null}
                    </span>
                    {t.description ? <span className="tool-option-desc">{t.description}</span> : null}
                  </span>
                </label>
              </li>
            ))}
          </ul>
        </div>
      ) : null}
    </div>
  )
}
