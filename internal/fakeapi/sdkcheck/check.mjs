// Drives the strict fakeapi with the providers' official Node SDKs, so that
// a drift between the stand-in and what the SDKs expect shows as a failed
// check. Run by sdkcheck_test.go; by hand:
//
//   FAKEAPI_OPENAI_URL=http://127.0.0.1:PORT/v1 FAKEAPI_OPENAI_KEY=... \
//   FAKEAPI_ANTHROPIC_URL=http://127.0.0.1:PORT2 FAKEAPI_ANTHROPIC_KEY=... \
//   node check.mjs
//
// The servers are the strict modes (Config.Provider "openai" and
// "anthropic") with a BatchDelay of a few hundred milliseconds. Each check
// prints "ok <name>" or "FAIL <name>: <why>"; the last line counts them,
// and the exit status is 1 if any failed.

import OpenAI, { toFile } from 'openai';
import Anthropic from '@anthropic-ai/sdk';

const env = (name) => {
  const v = process.env[name];
  if (!v) {
    console.error(`sdkcheck: ${name} is not set`);
    process.exit(2);
  }
  return v;
};

const openai = new OpenAI({ apiKey: env('FAKEAPI_OPENAI_KEY'), baseURL: env('FAKEAPI_OPENAI_URL'), maxRetries: 0 });
const anthropic = new Anthropic({ apiKey: env('FAKEAPI_ANTHROPIC_KEY'), baseURL: env('FAKEAPI_ANTHROPIC_URL'), maxRetries: 0 });

let passed = 0;
let failed = 0;

function assert(cond, what) {
  if (!cond) throw new Error(what);
}

function eq(got, want, what) {
  const g = JSON.stringify(got);
  const w = JSON.stringify(want);
  if (g !== w) throw new Error(`${what}: got ${g}, want ${w}`);
}

async function check(name, fn) {
  try {
    await fn();
    passed++;
    console.log(`ok ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
  }
}

// rejects runs fn and returns the error it throws, failing if it does not.
async function rejects(fn) {
  try {
    await fn();
  } catch (e) {
    return e;
  }
  throw new Error('the call succeeded; want an error');
}

// until polls get until done(value), for at most 20 s.
async function until(get, done, what) {
  const deadline = Date.now() + 20000;
  for (;;) {
    const v = await get();
    if (done(v)) return v;
    if (Date.now() > deadline) throw new Error(`${what}: not done after 20s: ${JSON.stringify(v)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

// tokens is the stand-in's input count: a quarter of the text's bytes,
// rounded up.
const tokens = (...texts) => Math.max(1, Math.ceil(texts.reduce((n, t) => n + Buffer.byteLength(t), 0) / 4));

// ---- OpenAI ----

await check('openai chat completion', async () => {
  const text = 'Say hello [fake:output_tokens=5]';
  const res = await openai.chat.completions.create({
    model: 'gpt-4o-mini',
    messages: [{ role: 'user', content: text }],
    max_completion_tokens: 20,
  });
  eq(res.object, 'chat.completion', 'object');
  eq(res.model, 'gpt-4o-mini', 'model');
  eq(res.choices.length, 1, 'choices');
  eq(res.choices[0].finish_reason, 'stop', 'finish_reason');
  eq(res.choices[0].message.role, 'assistant', 'role');
  eq(res.usage, { ...res.usage, prompt_tokens: tokens(text), completion_tokens: 5, total_tokens: tokens(text) + 5 }, 'usage');
  assert(typeof res._request_id === 'string' && res._request_id.startsWith('req_'), `_request_id ${res._request_id}`);
});

await check('openai chat completion capped by max_tokens', async () => {
  const res = await openai.chat.completions.create({
    model: 'gpt-4o',
    messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Tell me a story [fake:output_tokens=50]' }],
    max_tokens: 7,
  });
  eq(res.usage.completion_tokens, 7, 'completion_tokens');
  eq(res.choices[0].finish_reason, 'length', 'finish_reason');
});

await check('openai chat completion streamed with include_usage: chunks, then the usage chunk', async () => {
  const text = 'Count to three [fake:output_tokens=3]';
  const stream = await openai.chat.completions.create({
    model: 'gpt-4o-mini',
    messages: [{ role: 'user', content: text }],
    max_completion_tokens: 20,
    stream: true,
    stream_options: { include_usage: true },
  });
  let content = '';
  let finish = null;
  let usage = null;
  let count = 0;
  const ids = new Set();
  for await (const chunk of stream) {
    count++;
    ids.add(chunk.id);
    eq(chunk.object, 'chat.completion.chunk', 'object');
    if (chunk.choices.length === 0) {
      usage = chunk.usage;
      continue;
    }
    eq(chunk.usage, null, 'usage of a content chunk');
    content += chunk.choices[0].delta.content ?? '';
    finish = chunk.choices[0].finish_reason ?? finish;
  }
  eq([content, finish, count, ids.size], ['tok tok tok', 'stop', 6, 1], 'content, finish_reason, chunks, ids');
  eq(usage, { ...usage, prompt_tokens: tokens(text), completion_tokens: 3, total_tokens: tokens(text) + 3 }, 'usage');
  // The same request not streamed reports the same usage.
  const whole = await openai.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: text }], max_completion_tokens: 20 });
  eq([whole.usage.prompt_tokens, whole.usage.completion_tokens], [usage.prompt_tokens, usage.completion_tokens], 'non-streamed usage');
});

await check('openai chat.completions.stream helper: content events and the final completion', async () => {
  const runner = openai.chat.completions.stream({
    model: 'gpt-4o',
    messages: [{ role: 'user', content: 'Tell me more [fake:output_tokens=50]' }],
    max_tokens: 4,
    stream_options: { include_usage: true },
  });
  const deltas = [];
  runner.on('content', (delta) => deltas.push(delta));
  const final = await runner.finalChatCompletion();
  eq(deltas, ['tok', ' tok', ' tok', ' tok'], 'content deltas');
  eq([final.choices[0].message.content, final.choices[0].finish_reason, final.model], ['tok tok tok tok', 'length', 'gpt-4o'], 'final completion');
  const total = await runner.totalUsage();
  eq([total.completion_tokens], [4], 'total usage');
});

await check('openai stream_options without stream: BadRequestError', async () => {
  const e = await rejects(() => openai.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }], stream_options: { include_usage: true } }));
  assert(e instanceof OpenAI.BadRequestError, `got ${e?.constructor?.name}: ${e}`);
  eq(e.error, { message: "The 'stream_options' parameter is only allowed when 'stream' is enabled.", type: 'invalid_request_error', param: 'stream_options', code: null }, 'error');
});

await check('openai 429 before a stream begins: RateLimitError', async () => {
  const e = await rejects(async () => {
    const s = await openai.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hi [fake:retry_after=2]' }], stream: true });
    for await (const _ of s);
  });
  assert(e instanceof OpenAI.RateLimitError, `got ${e?.constructor?.name}: ${e}`);
  eq(e.headers.get('retry-after'), '2', 'retry-after');
});

await check('openai responses (not streamed): output_text and usage', async () => {
  const text = 'Say hi [fake:output_tokens=3]';
  const res = await openai.responses.create({ model: 'gpt-4o-mini', instructions: 'Be brief.', input: text, max_output_tokens: 64 });
  eq([res.object, res.status, res.model, res.output_text, res.instructions], ['response', 'completed', 'gpt-4o-mini', 'tok tok tok', 'Be brief.'], 'response');
  eq([res.usage.input_tokens, res.usage.output_tokens, res.usage.total_tokens], [tokens(text, 'Be brief.'), 3, tokens(text, 'Be brief.') + 3], 'usage');
  const items = await openai.responses.create({
    model: 'gpt-4o',
    input: [{ role: 'user', content: [{ type: 'input_text', text: 'go on [fake:output_tokens=40]' }] }],
    max_output_tokens: 16,
  });
  eq([items.status, items.incomplete_details, items.usage.output_tokens], ['incomplete', { reason: 'max_output_tokens' }, 16], 'capped');
  const e = await rejects(() => openai.responses.create({ model: 'gpt-4o', input: 'hi', max_output_tokens: 5 }));
  assert(e instanceof OpenAI.BadRequestError, `got ${e?.constructor?.name}: ${e}`);
  eq([e.param, e.code], ['max_output_tokens', 'integer_below_min_value'], 'max_output_tokens below 16');
});

await check('openai embeddings (the SDK asks for base64 and decodes it)', async () => {
  const res = await openai.embeddings.create({ model: 'text-embedding-3-small', input: ['first text', 'second'] });
  eq(res.object, 'list', 'object');
  eq(res.data.length, 2, 'data');
  eq(res.data[1].index, 1, 'index');
  assert(res.data[0].embedding.length === 16 && res.data[0].embedding.every((x) => typeof x === 'number' && x >= -1 && x <= 1), `embedding ${res.data[0].embedding}`);
  eq(res.usage, { prompt_tokens: tokens('first text', 'second'), total_tokens: tokens('first text', 'second') }, 'usage');
  const floats = await openai.embeddings.create({ model: 'text-embedding-3-small', input: 'first text', encoding_format: 'float', dimensions: 4 });
  eq(floats.data[0].embedding.length, 4, 'float dimensions');
});

await check('openai unknown field: BadRequestError', async () => {
  const e = await rejects(() => openai.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }], id: 'item-1' }));
  assert(e instanceof OpenAI.BadRequestError, `got ${e?.constructor?.name}: ${e}`);
  eq(e.status, 400, 'status');
  eq(e.message, '400 Unrecognized request argument supplied: id', 'message');
  eq(e.error, { message: 'Unrecognized request argument supplied: id', type: 'invalid_request_error', param: null, code: null }, 'error');
});

await check('openai 429: RateLimitError with retry-after', async () => {
  const e = await rejects(() => openai.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hi [fake:retry_after=2]' }] }));
  assert(e instanceof OpenAI.RateLimitError, `got ${e?.constructor?.name}: ${e}`);
  eq(e.headers.get('retry-after'), '2', 'retry-after');
});

await check('openai revoked key style: AuthenticationError', async () => {
  const bad = new OpenAI({ apiKey: 'sk-not-a-key-of-this-server', baseURL: env('FAKEAPI_OPENAI_URL'), maxRetries: 0 });
  const e = await rejects(() => bad.models.list());
  assert(e instanceof OpenAI.AuthenticationError, `got ${e?.constructor?.name}: ${e}`);
  eq(e.code, 'invalid_api_key', 'code');
});

await check('openai models list', async () => {
  const ids = [];
  for await (const m of openai.models.list()) ids.push(m.id);
  assert(ids.includes('gpt-4o-mini'), `models ${ids}`);
});

await check('openai batch: upload, create, retrieve until completed, download output and errors', async () => {
  const lines = [
    { custom_id: 'req-1', method: 'POST', url: '/v1/chat/completions', body: { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'one [fake:output_tokens=3]' }], max_tokens: 10 } },
    { custom_id: 'req-2', method: 'POST', url: '/v1/chat/completions', body: { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'two [fake:status=400]' }] } },
    { custom_id: 'req-3', method: 'POST', url: '/v1/chat/completions', body: { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'three' }], max_tokens: 2 } },
  ];
  const jsonl = lines.map((l) => JSON.stringify(l)).join('\n') + '\n';
  const file = await openai.files.create({ file: await toFile(Buffer.from(jsonl), 'input.jsonl'), purpose: 'batch' });
  eq([file.object, file.purpose, file.filename, file.bytes], ['file', 'batch', 'input.jsonl', Buffer.byteLength(jsonl)], 'file');
  eq((await openai.files.retrieve(file.id)).id, file.id, 'retrieve file');

  const batch = await openai.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h', metadata: { job: 'sdkcheck' } });
  eq([batch.object, batch.status, batch.endpoint, batch.input_file_id, batch.metadata], ['batch', 'validating', '/v1/chat/completions', file.id, { job: 'sdkcheck' }], 'created batch');
  const seen = new Set();
  const done = await until(async () => {
    const b = await openai.batches.retrieve(batch.id);
    seen.add(b.status);
    return b;
  }, (b) => ['completed', 'failed', 'expired', 'cancelled'].includes(b.status), 'batch');
  eq(done.status, 'completed', 'status');
  assert(seen.has('in_progress') && seen.has('finalizing'), `statuses seen ${[...seen]}`);
  eq(done.request_counts, { total: 3, completed: 2, failed: 1 }, 'request_counts');
  assert(done.completed_at >= done.created_at && done.in_progress_at && done.finalizing_at, 'timestamps');

  const out = (await (await openai.files.content(done.output_file_id)).text()).trim().split('\n').map((l) => JSON.parse(l));
  eq(out.map((l) => l.custom_id), ['req-1', 'req-3'], 'output custom_ids');
  eq(out[0].response.status_code, 200, 'status_code');
  eq(out[0].error, null, 'error');
  eq(out[0].response.body.usage.completion_tokens, 3, 'req-1 completion_tokens');
  eq(out[1].response.body.usage.completion_tokens, 2, 'req-3 completion_tokens');
  const errs = (await (await openai.files.content(done.error_file_id)).text()).trim().split('\n').map((l) => JSON.parse(l));
  eq(errs.map((l) => [l.custom_id, l.response.status_code, l.response.body.error.type]), [['req-2', 400, 'invalid_request_error']], 'error lines');

  const deleted = await openai.files.delete(file.id);
  eq([deleted.id, deleted.deleted], [file.id, true], 'delete');
});

await check('openai batch: cancel another batch', async () => {
  const jsonl = JSON.stringify({ custom_id: 'c-1', method: 'POST', url: '/v1/embeddings', body: { model: 'text-embedding-3-small', input: 'x' } }) + '\n';
  const file = await openai.files.create({ file: await toFile(Buffer.from(jsonl), 'cancel.jsonl'), purpose: 'batch' });
  const batch = await openai.batches.create({ input_file_id: file.id, endpoint: '/v1/embeddings', completion_window: '24h' });
  const cancelling = await openai.batches.cancel(batch.id);
  eq(cancelling.status, 'cancelling', 'status after cancel');
  assert(cancelling.cancelling_at, 'cancelling_at');
  const ended = await until(() => openai.batches.retrieve(batch.id), (b) => b.status !== 'cancelling', 'cancel');
  eq(ended.status, 'cancelled', 'final status');
  assert(ended.cancelled_at, 'cancelled_at');
});

await check('openai batches list pages newest first', async () => {
  const first = await openai.batches.list({ limit: 1 });
  eq(first.data.length, 1, 'page size');
  assert(first.has_more, 'has_more');
  const ids = [];
  for await (const b of openai.batches.list({ limit: 1 })) ids.push(b.id);
  assert(ids.length >= 2 && ids[0] === first.data[0].id, `ids ${ids}`);
  assert([...ids].sort().reverse().join() === ids.join(), `not newest first: ${ids}`);
});

// ---- Anthropic ----

await check('anthropic message', async () => {
  const text = 'Hello, Claude [fake:output_tokens=3]';
  const res = await anthropic.messages.create({ model: 'claude-sonnet-4-6', max_tokens: 10, messages: [{ role: 'user', content: text }] });
  eq([res.type, res.role, res.model, res.stop_reason], ['message', 'assistant', 'claude-sonnet-4-6', 'end_turn'], 'message');
  eq(res.content[0].type, 'text', 'content');
  eq([res.usage.input_tokens, res.usage.output_tokens], [tokens(text), 3], 'usage');
  assert(typeof res._request_id === 'string' && res._request_id.startsWith('req_'), `_request_id ${res._request_id}`);
});

await check('anthropic messages.stream: text events and finalMessage usage', async () => {
  const text = 'Tell me a story [fake:output_tokens=4]';
  const stream = anthropic.messages.stream({ model: 'claude-sonnet-4-6', max_tokens: 10, messages: [{ role: 'user', content: text }] });
  const deltas = [];
  stream.on('text', (delta) => deltas.push(delta));
  const msg = await stream.finalMessage();
  eq(deltas, ['tok', ' tok', ' tok', ' tok'], 'text deltas');
  eq([msg.type, msg.role, msg.model, msg.stop_reason, msg.content], ['message', 'assistant', 'claude-sonnet-4-6', 'end_turn', [{ type: 'text', text: 'tok tok tok tok' }]], 'final message');
  eq([msg.usage.input_tokens, msg.usage.output_tokens], [tokens(text), 4], 'usage');
  const whole = await anthropic.messages.create({ model: 'claude-sonnet-4-6', max_tokens: 10, messages: [{ role: 'user', content: text }] });
  eq([whole.usage.input_tokens, whole.usage.output_tokens], [msg.usage.input_tokens, msg.usage.output_tokens], 'non-streamed usage');
});

await check('anthropic create with stream: true: the raw events in order', async () => {
  const stream = await anthropic.messages.create({ model: 'claude-haiku-4-5', max_tokens: 2, stream: true, messages: [{ role: 'user', content: 'Go on and on' }] });
  const types = [];
  let delta = null;
  for await (const ev of stream) {
    types.push(ev.type);
    if (ev.type === 'message_delta') delta = ev;
  }
  eq(types, ['message_start', 'content_block_start', 'content_block_delta', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop'], 'event types (the SDK drops pings)');
  eq([delta.delta.stop_reason, delta.usage.output_tokens], ['max_tokens', 2], 'message_delta');
});

await check('anthropic 529 before a stream begins: InternalServerError', async () => {
  const e = await rejects(() => anthropic.messages.stream({ model: 'claude-sonnet-4-6', max_tokens: 10, messages: [{ role: 'user', content: 'hi [fake:status=529]' }] }).finalMessage());
  assert(e instanceof Anthropic.InternalServerError, `got ${e?.constructor?.name}: ${e}`);
  eq([e.status, e.error.error.type], [529, 'overloaded_error'], 'overloaded');
});

await check('anthropic unknown field: BadRequestError', async () => {
  const e = await rejects(() => anthropic.messages.create({ model: 'claude-sonnet-4-6', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }], id: 'item-1' }));
  assert(e instanceof Anthropic.BadRequestError, `got ${e?.constructor?.name}: ${e}`);
  eq(e.status, 400, 'status');
  eq(e.error.type, 'error', 'type');
  eq(e.error.error, { type: 'invalid_request_error', message: 'id: Extra inputs are not permitted' }, 'error');
  eq(e.error.request_id, e.requestID, 'request_id');
});

await check('anthropic missing max_tokens: BadRequestError', async () => {
  const e = await rejects(() => anthropic.messages.create({ model: 'claude-sonnet-4-6', messages: [{ role: 'user', content: 'hi' }] }));
  assert(e instanceof Anthropic.BadRequestError, `got ${e?.constructor?.name}: ${e}`);
  eq(e.error.error.message, 'max_tokens: Field required', 'message');
});

await check('anthropic 429: RateLimitError', async () => {
  const e = await rejects(() => anthropic.messages.create({ model: 'claude-sonnet-4-6', max_tokens: 10, messages: [{ role: 'user', content: 'hi [fake:retry_after=3]' }] }));
  assert(e instanceof Anthropic.RateLimitError, `got ${e?.constructor?.name}: ${e}`);
  eq(e.error.error.type, 'rate_limit_error', 'type');
  eq(e.headers.get('retry-after'), '3', 'retry-after');
});

await check('anthropic 529 overloaded: InternalServerError', async () => {
  const e = await rejects(() => anthropic.messages.create({ model: 'claude-sonnet-4-6', max_tokens: 10, messages: [{ role: 'user', content: 'hi [fake:status=529]' }] }));
  assert(e instanceof Anthropic.InternalServerError, `got ${e?.constructor?.name}: ${e}`);
  eq([e.status, e.error.error.type, e.error.error.message], [529, 'overloaded_error', 'Overloaded'], 'overloaded');
});

await check('anthropic models list', async () => {
  const ids = [];
  for await (const m of anthropic.models.list()) ids.push(m.id);
  assert(ids.includes('claude-sonnet-4-6'), `models ${ids}`);
});

await check('anthropic message batch: create, retrieve until ended, results', async () => {
  const params = (content, max = 10) => ({ model: 'claude-sonnet-4-6', max_tokens: max, messages: [{ role: 'user', content }] });
  const batch = await anthropic.messages.batches.create({
    requests: [
      { custom_id: 'ok-1', params: params('first [fake:output_tokens=4]') },
      { custom_id: 'err-2', params: params('second [fake:status=500]') },
      { custom_id: 'bad-3', params: { ...params('third'), id: 'x' } },
    ],
  });
  eq([batch.type, batch.processing_status, batch.results_url, batch.ended_at], ['message_batch', 'in_progress', null, null], 'created');
  eq(batch.request_counts, { processing: 3, succeeded: 0, errored: 0, canceled: 0, expired: 0 }, 'counts at creation');
  const ended = await until(() => anthropic.messages.batches.retrieve(batch.id), (b) => b.processing_status === 'ended', 'batch');
  eq(ended.request_counts, { processing: 0, succeeded: 1, errored: 2, canceled: 0, expired: 0 }, 'counts');
  assert(ended.results_url && ended.ended_at, 'results_url, ended_at');
  const results = {};
  for await (const r of await anthropic.messages.batches.results(batch.id)) results[r.custom_id] = r.result;
  eq(results['ok-1'].type, 'succeeded', 'ok-1');
  eq([results['ok-1'].message.usage.output_tokens, results['ok-1'].message.usage.service_tier], [4, 'batch'], 'ok-1 usage');
  eq([results['err-2'].type, results['err-2'].error.error.type], ['errored', 'api_error'], 'err-2');
  eq([results['bad-3'].type, results['bad-3'].error.error.message], ['errored', 'id: Extra inputs are not permitted'], 'bad-3');
});

await check('anthropic message batch: cancel', async () => {
  const batch = await anthropic.messages.batches.create({
    requests: [{ custom_id: 'c-1', params: { model: 'claude-sonnet-4-6', max_tokens: 5, messages: [{ role: 'user', content: 'x' }] } }],
  });
  const canceling = await anthropic.messages.batches.cancel(batch.id);
  eq(canceling.processing_status, 'canceling', 'status after cancel');
  assert(canceling.cancel_initiated_at, 'cancel_initiated_at');
  const ended = await until(() => anthropic.messages.batches.retrieve(batch.id), (b) => b.processing_status === 'ended', 'cancel');
  eq(ended.request_counts.canceled, 1, 'canceled');
  const results = [];
  for await (const r of await anthropic.messages.batches.results(batch.id)) results.push(r);
  eq(results, [{ custom_id: 'c-1', result: { type: 'canceled' } }], 'results');
});

await check('anthropic message batches list pages newest first', async () => {
  const first = await anthropic.messages.batches.list({ limit: 1 });
  eq(first.data.length, 1, 'page size');
  assert(first.has_more, 'has_more');
  const ids = [];
  for await (const b of anthropic.messages.batches.list({ limit: 1 })) ids.push(b.id);
  assert(ids.length >= 2 && ids[0] === first.data[0].id, `ids ${ids}`);
  assert([...ids].sort().reverse().join() === ids.join(), `not newest first: ${ids}`);
});

console.log(`sdkcheck: ${passed} passed, ${failed} failed`);
process.exit(failed > 0 ? 1 : 0);
