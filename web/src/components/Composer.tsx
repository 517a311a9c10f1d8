// The message box: text, image attachments (picker, paste, drop), model and tool pickers, send and stop.
import { forwardRef, useEffect, useImperativeHandle, useRef, useState, type KeyboardEvent } from 'react'
import type { FileUIPart } from 'ai'
import type { Agent, Model, Tool } from '../api'
import { CloseIcon, PaperclipIcon, SendIcon, StopIcon } from './icons'
import { ToolPicker } from './ToolPicker'

const maxFiles = 8
const maxBytes = 10 * 1024 * 1024
// What chatd (and every provider it talks to) accepts.
const imageTypes = ['image/png', 'image/jpeg', 'image/gif', 'image/webp']

type Pending = { id: number; name: string; mediaType: string; url: string }

export type ComposerHandle = { addFiles: (files: File[]) => void; focus: () => void }

type Props = {
  busy: boolean
  onSend: (text: string, files: FileUIPart[]) => void
  onStop: () => void
  models: Model[]
  model: string
  onModel: (id: string) => void
  /** agents a new chat may start with; fewer than two: no picker */
  agents: Agent[]
  agent: string
  onAgent: (name: string) => void
  tools: Tool[] | null
  disabledTools: ReadonlySet<string>
  onDisabledTools: (s: Set<string>) => void
  placeholder?: string
}

function readDataURL(f: File): Promise<string> {
  return new Promise((resolve, reject) => {
    const r = new FileReader()
    r.onload = () => resolve(String(r.result))
    r.onerror = () => reject(r.error ?? new Error('could not read the file'))
    r.readAsDataURL(f)
  })
}

let nextId = 1

export const Composer = forwardRef<ComposerHandle, Props>(function Composer(props, ref) {
  const { busy, onSend, onStop, models, model, onModel, agents, agent, onAgent, tools, disabledTools, onDisabledTools, placeholder } = props
  const [text, setText] = useState('')
  const [files, setFiles] = useState<Pending[]>([])
  const [fileError, setFileError] = useState('')
  const area = useRef<HTMLTextAreaElement>(null)
  const input = useRef<HTMLInputElement>(null)
  const count = useRef(0)
  count.current = files.length

  const addFiles = (list: File[]) => {
    if (!list.length) return
    const errors: string[] = []
    const ok: File[] = []
    for (const f of list) {
      if (!f.type.startsWith('image/')) errors.push(`${f.name || 'That file'} is not an image.`)
      else if (!imageTypes.includes(f.type)) errors.push(`${f.name || 'That image'}: only PNG, JPEG, GIF and WebP images can be sent.`)
      else if (f.size > maxBytes) errors.push(`${f.name || 'That image'} is larger than 10 MB.`)
      else ok.push(f)
    }
    const room = maxFiles - count.current
    if (ok.length > room) {
      errors.push(`At most ${maxFiles} images per message.`)
      ok.splice(Math.max(0, room))
    }
    count.current += ok.length
    setFileError(errors.join(' '))
    for (const f of ok) {
      const id = nextId++
      readDataURL(f).then(
        (url) => setFiles((cur) => [...cur, { id, name: f.name, mediaType: f.type, url }]),
        () => {
          count.current--
          setFileError(`${f.name} could not be read.`)
        },
      )
    }
  }

  useImperativeHandle(ref, () => ({ addFiles, focus: () => area.current?.focus() }))

  // An Enter that sent the message is not also a line break: some input paths (CDP's char events, some
  // IMEs) deliver the line break apart from the keydown that was cancelled. Any other key clears this.
  const sentByEnter = useRef(false)
  useEffect(() => {
    const el = area.current
    if (!el) return
    const onBeforeInput = (e: InputEvent) => {
      const linebreak = e.inputType === 'insertLineBreak' || e.inputType === 'insertParagraph' || (e.inputType === 'insertText' && /^[\r\n]+$/.test(e.data ?? ''))
      if (linebreak && sentByEnter.current) e.preventDefault()
      sentByEnter.current = false
    }
    el.addEventListener('beforeinput', onBeforeInput)
    return () => el.removeEventListener('beforeinput', onBeforeInput)
  }, [])

  // The textarea grows with its text, up to a limit.
  useEffect(() => {
    const el = area.current
    if (!el) return
    el.style.height = 'auto'
    el.style.height = `${Math.min(el.scrollHeight, 240)}px`
  }, [text])

  const canSend = !busy && (text.trim() !== '' || files.length > 0)

  const send = () => {
    if (!canSend) return
    onSend(
      text.trim(),
      files.map((f) => ({ type: 'file', mediaType: f.mediaType, url: f.url, filename: f.name })),
    )
    setText('')
    setFiles([])
    setFileError('')
  }

  const onKeyDown = (e: KeyboardEvent<HTMLTextAreaElement>) => {
    sentByEnter.current = false
    if (e.key === 'Enter' && !e.shiftKey && !e.nativeEvent.isComposing) {
      e.preventDefault()
      sentByEnter.current = true
      send()
    } else if (e.key === 'Escape' && busy) {
      e.preventDefault()
      onStop()
    }
  }

  const modelIds = models.map((m) => m.id)
  if (model && !modelIds.includes(model)) modelIds.unshift(model)

  return (
    <form
      className="composer"
      onSubmit={(e) => {
        e.preventDefault()
        send()
      }}
    >
      {files.length ? (
        <div className="attachments" aria-label="Attached images">
          {files.map((f) => (
            <div key={f.id} className="attachment" data-testid="attachment-preview">
              <img src={f.url} alt={f.name} />
              <button
                type="button"
                className="attachment-remove"
                aria-label={`Remove ${f.name}`}
                title="Remove"
                onClick={() => {
                  setFiles((cur) => cur.filter((x) => x.id !== f.id))
                  setFileError('')
                }}
              >
                <CloseIcon />
              </button>
            </div>
          ))}
        </div>
      ) : null}
      {fileError ? (
        <div className="attach-error" role="alert" data-testid="attach-error">
          {fileError}
        </div>
      ) : null}
      <label className="visually-hidden" htmlFor="composer-input">
        Message
      </label>
      <textarea
        id="composer-input"
        ref={area}
        data-testid="composer-input"
        rows={1}
        value={text}
        placeholder={placeholder ?? 'Message chatd…'}
        onChange={(e) => setText(e.target.value)}
        onKeyDown={onKeyDown}
        onPaste={(e) => {
          const imgs = Array.from(e.clipboardData.files)
          if (imgs.length) {
            e.preventDefault()
            addFiles(imgs)
          }
        }}
      />
      <div className="composer-bar">
        <input
          ref={input}
          id="attach-input"
          className="visually-hidden"
          data-testid="attach-input"
          type="file"
          accept="image/*"
          multiple
          tabIndex={-1}
          onChange={(e) => {
            addFiles(Array.from(e.target.files ?? []))
            e.target.value = ''
          }}
        />
        <button type="button" className="icon-btn" title="Attach images" aria-label="Attach images" onClick={() => input.current?.click()}>
          <PaperclipIcon />
        </button>
        {agents.length > 1 ? (
          <>
            <label className="visually-hidden" htmlFor="agent-picker">
              Agent
            </label>
            <select
              id="agent-picker"
              className="model-picker"
              data-testid="agent-picker"
              value={agent}
              onChange={(e) => onAgent(e.target.value)}
              title={agents.find((a) => a.name === agent)?.description || 'Agent'}
            >
              {agents.map((a) => (
                <option key={a.name} value={a.name} title={a.description || undefined}>
                  {a.name}
                </option>
              ))}
            </select>
          </>
        ) : null}
        <label className="visually-hidden" htmlFor="model-picker">
          Model
        </label>
        <select id="model-picker" className="model-picker" data-testid="model-picker" value={model} onChange={(e) => onModel(e.target.value)} title="Model">
          {modelIds.length ? null : <option value="">No models</option>}
          {modelIds.map((id) => (
            <option key={id} value={id}>
              {id}
            </option>
          ))}
        </select>
        <ToolPicker tools={tools} disabled={disabledTools} onChange={onDisabledTools} />
        <span className="spacer" />
        {busy ? (
          <button type="button" className="stop-btn" data-testid="stop" onClick={onStop} title="Stop (Esc)" aria-label="Stop">
            <StopIcon />
          </button>
        ) : null}
        <button type="submit" className="send-btn" data-testid="send" disabled={!canSend} title="Send (Enter)" aria-label="Send">
          <SendIcon />
        </button>
      </div>
    </form>
  )
})
