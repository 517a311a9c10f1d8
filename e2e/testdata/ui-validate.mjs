// Validates chatd's AI SDK UI message stream with the `ai` package's own client code (run by
// e2e/uistream_test.go with Node 22, `ai` from e2e/node_modules):
//
//   node ui-validate.mjs BASE_URL SCENARIO USER_TEXT [BODY_JSON]
//
// It sends USER_TEXT as a new user message in a new chat (ids made by the SDK's generateId, as useChat
// makes them) with DefaultChatTransport to BASE_URL/v1/ui/chat (BODY_JSON: extra body fields such as
// {"model":"openai/o4-mini"}, sent as useChat's sendMessage(message, {body}) sends them), assembles the
// answer with readUIMessageStream, checks [user, assistant] with validateUIMessages, then asks reconnectToStream for
// the chat, which must answer null (204) once the run has ended. SCENARIO "resume" also reconnects while
// the answer is still streaming: the replay must carry the same chunks and assemble the same message;
// SCENARIO "cancel" cancels the run while the answer is streaming; SCENARIO "regenerate" then asks for
// the answer again as useChat's regenerate() does.
//
// It prints one JSON summary on stdout (chunk types in order, the chunks, the assembled message, the
// response headers, the raw SSE body, …) and exits 1 when the SDK rejects anything: the request, a
// chunk's schema, the chunk sequence (a delta without its start, an output for an unknown tool call, …)
// or the assembled messages. An `error` chunk is not a rejection: readUIMessageStream (with its default
// terminateOnError: false) hands it to onError as `new Error(errorText)` and keeps reading — useChat shows
// it as chat.error — so such errors are listed in streamErrors and the exit status stays 0. The summary's
// terminateOnError field reports what a reader that sets terminateOnError: true sees for the same chunks.
import { DefaultChatTransport, generateId, jsonSchema, readUIMessageStream, validateUIMessages } from "ai";

const [base, scenario, text, bodyJSON] = process.argv.slice(2);
if (!base || !scenario || !text) {
  console.error("usage: node ui-validate.mjs BASE_URL SCENARIO USER_TEXT [BODY_JSON]");
  process.exit(2);
}
const body = bodyJSON ? JSON.parse(bodyJSON) : undefined;
const timeoutMs = Number(process.env.UI_VALIDATE_TIMEOUT_MS || 60000);

const summary = { scenario, chatId: generateId(), requests: [] };
const userMessage = { id: generateId(), role: "user", parts: [{ type: "text", text }] };
summary.userMessageId = userMessage.id;

// recordingFetch keeps each response's status, headers and raw body (the body is teed: the SDK reads
// one branch, this the other), so that a chunk the SDK refuses can be shown as chatd sent it.
function recordingFetch(url, init) {
  return globalThis.fetch(url, init).then((res) => {
    const rec = { method: init?.method ?? "GET", url: String(url), status: res.status, headers: Object.fromEntries(res.headers), raw: "" };
    summary.requests.push(rec);
    if (!res.body) {
      return res;
    }
    const [mine, theirs] = res.body.tee();
    rec.done = (async () => {
      const dec = new TextDecoder();
      try {
        for await (const b of mine) {
          rec.raw += dec.decode(b, { stream: true });
        }
      } catch (e) {
        rec.readError = String(e);
      }
    })();
    return new Response(theirs, { status: res.status, statusText: res.statusText, headers: res.headers });
  });
}

const transport = new DefaultChatTransport({ api: `${base}/v1/ui/chat`, fetch: recordingFetch });

// current_time's input schema, so that validateUIMessages checks the tool parts' inputs.
const tools = {
  current_time: {
    inputSchema: jsonSchema(
      { type: "object", properties: { timezone: { type: "string" } }, additionalProperties: false },
      {
        validate(v) {
          const ok = v !== null && typeof v === "object" && !Array.isArray(v) &&
            Object.keys(v).every((k) => k === "timezone") && (v.timezone === undefined || typeof v.timezone === "string");
          return ok ? { success: true, value: v } : { success: false, error: new Error(`current_time input ${JSON.stringify(v)} does not match its schema`) };
        },
      },
    ),
  },
};

function describe(e) {
  if (e == null || typeof e !== "object") {
    return { message: String(e) };
  }
  const d = { name: e.name, message: e.message };
  // A chunk that matches no chunk schema fails zod's union with every branch's issues: keep the issues of
  // the branches that accept its type (those say what is wrong) and drop the rest.
  const union = e.cause?.issues?.[0];
  if (union?.code === "invalid_union" && Array.isArray(union.errors)) {
    const relevant = union.errors.filter((branch) => !branch.some((i) => i.path?.[0] === "type"));
    d.message = e.message.split("\n")[0];
    d.issues = relevant.flat().map((i) => `${(i.path ?? []).join(".") || "(chunk)"}: ${i.message}`);
  }
  if (e.chunkType) d.chunkType = e.chunkType;
  if (e.chunkId) d.chunkId = e.chunkId;
  if (e.statusCode) d.statusCode = e.statusCode;
  if (e.responseBody) d.responseBody = e.responseBody;
  if (e.value !== undefined) d.value = e.value;
  if (e.cause && !d.issues) d.cause = e.cause instanceof Error ? `${e.cause.name}: ${e.cause.message}` : e.cause;
  return d;
}

// assemble reads a chunk stream to its end through readUIMessageStream. It returns the chunks in order,
// the last message state, and the errors readUIMessageStream reported, split into the errors of `error`
// chunks (streamErrors) and everything else (protocolErrors: the SDK refused the stream).
async function assemble(stream, onChunk) {
  const chunks = [];
  const recorded = stream.pipeThrough(
    new TransformStream({
      transform(chunk, controller) {
        chunks.push(chunk);
        onChunk?.(chunk);
        controller.enqueue(chunk);
      },
    }),
  );
  const errors = [];
  let message;
  for await (const m of readUIMessageStream({ stream: recorded, onError: (e) => errors.push(e) })) {
    message = m;
  }
  const errorTexts = chunks.filter((c) => c.type === "error").map((c) => c.errorText);
  const streamErrors = [], protocolErrors = [];
  for (const e of errors) {
    const i = e?.constructor === Error ? errorTexts.indexOf(e.message) : -1;
    if (i >= 0) {
      errorTexts.splice(i, 1);
      streamErrors.push(e.message);
    } else {
      protocolErrors.push(describe(e));
    }
  }
  return { chunks, message, streamErrors, protocolErrors };
}

// terminating replays the chunks into a reader with terminateOnError: true and reports whether it threw.
async function terminating(chunks) {
  const stream = new ReadableStream({
    start(c) {
      chunks.forEach((x) => c.enqueue(x));
      c.close();
    },
  });
  try {
    let parts = 0;
    for await (const m of readUIMessageStream({ stream, terminateOnError: true })) {
      parts = m.parts.length;
    }
    return { threw: false, parts };
  } catch (e) {
    return { threw: true, message: e?.message };
  }
}

function fail(stage, err) {
  summary.failure = { stage, ...(Array.isArray(err) ? { errors: err } : describe(err)) };
  process.stdout.write(JSON.stringify(summary, null, 2) + "\n");
  process.exit(1);
}

async function settleRequests() {
  await Promise.all(summary.requests.map((r) => r.done));
  for (const r of summary.requests) {
    delete r.done;
  }
}

async function validate(stage, message) {
  try {
    await validateUIMessages({ messages: [userMessage, message], tools });
  } catch (e) {
    fail(stage, e);
  }
}

let stream;
try {
  stream = await transport.sendMessages({
    chatId: summary.chatId,
    messages: [userMessage],
    trigger: "submit-message",
    messageId: undefined,
    abortSignal: AbortSignal.timeout(timeoutMs),
    body,
  });
} catch (e) {
  await settleRequests();
  fail("sendMessages", e);
}

// resume: once the first text-delta is in, reconnect while the run is still streaming.
// cancel: once the first text-delta is in, cancel the run (POST /v1/runs/{X-Run-Id}/cancel), as the
// UI's stop button does; the stream must then end with an abort chunk.
let resumed, cancelled;
const onChunk = (c) => {
  if (c.type !== "text-delta") {
    return;
  }
  if (scenario === "cancel" && !cancelled) {
    const runId = summary.requests[0]?.headers["x-run-id"];
    cancelled = fetch(`${base}/v1/runs/${encodeURIComponent(runId)}/cancel`, { method: "POST" }).then(async (res) => {
      summary.cancel = { status: res.status, body: await res.text() };
    });
    cancelled.catch(() => {});
  }
  if (scenario !== "resume" || resumed) {
    return;
  }
  resumed = (async () => {
    const s = await transport.reconnectToStream({ chatId: summary.chatId, abortSignal: AbortSignal.timeout(timeoutMs) });
    if (s === null) {
      throw new Error("reconnectToStream returned null (204) while the run was streaming");
    }
    return assemble(s);
  })();
  resumed.catch(() => {}); // awaited below
};

const main = await assemble(stream, onChunk).catch((e) => fail("readUIMessageStream", e));
summary.chunkTypes = main.chunks.map((c) => c.type);
summary.chunks = main.chunks;
summary.streamErrors = main.streamErrors;
summary.message = main.message;
if (main.protocolErrors.length > 0) {
  await settleRequests();
  fail("readUIMessageStream", main.protocolErrors);
}
if (!main.message) {
  await settleRequests();
  fail("readUIMessageStream", new Error("the stream assembled no message"));
}
summary.terminateOnError = await terminating(main.chunks);
await validate("validateUIMessages", main.message);

if (scenario === "cancel") {
  if (!cancelled) {
    fail("cancel", new Error("no text-delta came, so there was no point to cancel at"));
  }
  await cancelled.catch((e) => fail("cancel", e));
}

// regenerate: ask for the answer again as useChat's regenerate() does — the messages before the
// assistant message, trigger regenerate-message, its id as messageId.
if (scenario === "regenerate") {
  let s;
  try {
    s = await transport.sendMessages({
      chatId: summary.chatId,
      messages: [userMessage],
      trigger: "regenerate-message",
      messageId: main.message.id,
      abortSignal: AbortSignal.timeout(timeoutMs),
      body,
    });
  } catch (e) {
    await settleRequests();
    fail("sendMessages (regenerate)", e);
  }
  const r = await assemble(s).catch((e) => fail("readUIMessageStream (regenerate)", e));
  summary.regenerate = { chunkTypes: r.chunks.map((c) => c.type), streamErrors: r.streamErrors, message: r.message };
  if (r.protocolErrors.length > 0) {
    await settleRequests();
    fail("readUIMessageStream (regenerate)", r.protocolErrors);
  }
  await validate("validateUIMessages (regenerate)", r.message);
}

if (scenario === "resume") {
  if (!resumed) {
    fail("resume", new Error("no text-delta came, so there was no point to reconnect at"));
  }
  let r;
  try {
    r = await resumed;
  } catch (e) {
    fail("reconnectToStream (mid-run)", e);
  }
  summary.resume = { chunkTypes: r.chunks.map((c) => c.type), streamErrors: r.streamErrors, message: r.message };
  if (r.protocolErrors.length > 0) {
    fail("readUIMessageStream (resumed)", r.protocolErrors);
  }
  await validate("validateUIMessages (resumed)", r.message);
}

// The run has ended: a reconnect must find nothing to resume (204 → null). The run's end may be recorded
// a moment after the stream's last chunk, so a replay of the ended run is tolerated for a short while
// (and reported); it must still be a valid stream.
summary.reconnect = { replays: [] };
for (let attempt = 1; ; attempt++) {
  let s;
  try {
    s = await transport.reconnectToStream({ chatId: summary.chatId, abortSignal: AbortSignal.timeout(timeoutMs) });
  } catch (e) {
    await settleRequests();
    fail("reconnectToStream (after the end)", e);
  }
  if (s === null) {
    summary.reconnect.null = true;
    summary.reconnect.attempts = attempt;
    break;
  }
  const r = await assemble(s);
  summary.reconnect.replays.push(r.chunks.map((c) => c.type));
  if (r.protocolErrors.length > 0) {
    await settleRequests();
    fail("readUIMessageStream (reconnect after the end)", r.protocolErrors);
  }
  if (attempt >= 20) {
    summary.reconnect.null = false;
    summary.reconnect.attempts = attempt;
    break;
  }
  await new Promise((res) => setTimeout(res, 150));
}

await settleRequests();
process.stdout.write(JSON.stringify(summary, null, 2) + "\n");
