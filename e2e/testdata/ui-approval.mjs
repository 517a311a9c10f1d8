// Answers a tool approval through chatd's AI SDK UI stream with the `ai` package's own chat client
// (AbstractChat, what useChat wraps), as an app that uses useChat does (run by e2e/approvals_test.go
// with Node 22, `ai` from e2e/node_modules):
//
//   node ui-approval.mjs BASE_URL USER_TEXT approve|deny
//
// It sends USER_TEXT in a new chat; the answer must stop at a tool part in state approval-requested.
// It then calls addToolApprovalResponse for each; sendAutomaticallyWhen
// (lastAssistantMessageIsCompleteWithApprovalResponses) posts the conversation back, and the rest of
// the answer must stream into the same assistant message. It prints one JSON summary (the parts of the
// messages at the pause and at the end, the statuses, the errors) and exits 1 when the SDK rejects
// anything or the flow does not happen.
import { AbstractChat, DefaultChatTransport, lastAssistantMessageIsCompleteWithApprovalResponses } from "ai";

const [base, text, decision] = process.argv.slice(2);
const summary = { errors: [] };

class State {
  constructor() { this.status = "ready"; this.error = undefined; this.messages = []; }
  pushMessage(m) { this.messages = this.messages.concat(m); }
  popMessage() { this.messages = this.messages.slice(0, -1); }
  replaceMessage(i, m) { this.messages = [...this.messages.slice(0, i), this.snapshot(m), ...this.messages.slice(i + 1)]; }
  snapshot(v) { return structuredClone(v); }
}

class Chat extends AbstractChat {
  constructor(init) { super({ ...init, state: new State() }); }
  get messages() { return this.state.messages; }
}

const until = async (what, cond, ms = 30000) => {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`waited ${ms}ms for ${what}; status ${chat.status}`);
    await new Promise((r) => setTimeout(r, 10));
  }
};

const chat = new Chat({
  transport: new DefaultChatTransport({ api: `${base}/v1/ui/chat` }),
  sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  onError: (e) => summary.errors.push(String(e)),
});

const toolParts = (m) => (m?.parts ?? []).filter((p) => p.type.startsWith("tool-") || p.type === "dynamic-tool");
const brief = (m) => ({ id: m.id, role: m.role, parts: m.parts.map((p) => ({ type: p.type, state: p.state, approval: p.approval, text: p.text, output: p.output, errorText: p.errorText })) });

try {
  await chat.sendMessage({ text });
  await until("the approval request", () => chat.status === "ready" && toolParts(chat.messages.at(-1)).some((p) => p.state === "approval-requested"));
  const paused = chat.messages.at(-1);
  summary.paused = brief(paused);
  const approved = decision === "approve";
  for (const part of toolParts(paused).filter((p) => p.state === "approval-requested")) {
    await chat.addToolApprovalResponse({ id: part.approval.id, approved, reason: approved ? undefined : "Not now." });
  }
  await until("the rest of the answer", () => chat.status === "ready" &&
    toolParts(chat.messages.at(-1)).every((p) => p.state === "output-available" || p.state === "output-error" || p.state === "output-denied") &&
    chat.messages.at(-1).parts.some((p) => p.type === "text" && p.state === "done"));
  summary.final = chat.messages.map(brief);
  summary.status = chat.status;
} catch (e) {
  summary.errors.push(String(e?.stack ?? e));
  summary.final = chat.messages.map(brief);
}
console.log(JSON.stringify(summary));
process.exit(summary.errors.length ? 1 : 0);
