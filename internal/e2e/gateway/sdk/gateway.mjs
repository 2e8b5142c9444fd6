// Drives a worker's gateway with the providers' official Node SDKs, the way
// an application is pointed at it: the SDK's base URL and a gateway token
// as its API key. Run by internal/e2e/gateway (TestOfficialSDKs); by hand:
//
//   GW_OPENAI_URL=http://127.0.0.1:8090/chat/v1 GW_ANTHROPIC_URL=http://127.0.0.1:8090/claude \
//   GW_TOKEN=... node gateway.mjs
//
// Each check prints "ok <name>" or "FAIL <name>: <why>"; the last line
// counts them, and the exit status is 1 if any failed.

import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';

const env = (name) => {
  const v = process.env[name];
  if (!v) {
    console.error(`gateway.mjs: ${name} is not set`);
    process.exit(2);
  }
  return v;
};

const token = env('GW_TOKEN');
const openai = new OpenAI({ apiKey: token, baseURL: env('GW_OPENAI_URL'), maxRetries: 0 });
const anthropic = new Anthropic({ apiKey: token, baseURL: env('GW_ANTHROPIC_URL'), maxRetries: 0 });

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

async function rejects(fn) {
  try {
    await fn();
  } catch (e) {
    return e;
  }
  throw new Error('the call succeeded; want an error');
}

await check('openai chat completion through the gateway', async () => {
  const res = await openai.chat.completions.create({
    model: 'gpt-4o-mini',
    messages: [{ role: 'user', content: 'Say hello [fake:output_tokens=5]' }],
    max_completion_tokens: 20,
  });
  eq([res.object, res.model, res.choices[0].message.content, res.usage.completion_tokens], ['chat.completion', 'gpt-4o-mini', 'tok tok tok tok tok', 5], 'completion');
  assert(typeof res._request_id === 'string' && res._request_id.startsWith('req_'), `the API's request id came back: ${res._request_id}`);
});

await check('openai chat completion streamed through the gateway, with its usage chunk', async () => {
  const stream = await openai.chat.completions.create({
    model: 'gpt-4o-mini',
    messages: [{ role: 'user', content: 'Count to three [fake:output_tokens=3]' }],
    max_completion_tokens: 20,
    stream: true,
    stream_options: { include_usage: true },
  });
  let content = '';
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.choices.length === 0) {
      usage = chunk.usage;
      continue;
    }
    content += chunk.choices[0].delta.content ?? '';
  }
  eq([content, usage && usage.completion_tokens], ['tok tok tok', 3], 'content and usage');
});

await check('openai chat.completions.stream helper through the gateway', async () => {
  const runner = openai.chat.completions.stream({
    model: 'gpt-4o',
    messages: [{ role: 'user', content: 'Tell me more [fake:output_tokens=50]' }],
    max_tokens: 4,
  });
  const deltas = [];
  runner.on('content', (delta) => deltas.push(delta));
  const final = await runner.finalChatCompletion();
  eq([deltas.length, final.choices[0].message.content], [4, 'tok tok tok tok'], 'deltas and final');
});

await check('openai embeddings through the gateway', async () => {
  const res = await openai.embeddings.create({ model: 'text-embedding-3-small', input: ['first text', 'second'] });
  eq([res.object, res.data.length], ['list', 2], 'embeddings');
});

await check('openai responses through the gateway', async () => {
  const res = await openai.responses.create({ model: 'gpt-4o-mini', input: 'Say hi [fake:output_tokens=3]', max_output_tokens: 64 });
  eq([res.status, res.output_text], ['completed', 'tok tok tok'], 'response');
});

await check('openai: an error of the API reaches the SDK as the API sent it', async () => {
  const e = await rejects(() => openai.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }], id: 'item-1' }));
  assert(e instanceof OpenAI.BadRequestError, `got ${e?.constructor?.name}: ${e}`);
  eq(e.error.message, 'Unrecognized request argument supplied: id', 'message');
});

await check('anthropic message through the gateway', async () => {
  const msg = await anthropic.messages.create({ model: 'claude-sonnet-4-6', max_tokens: 10, messages: [{ role: 'user', content: 'Say hi [fake:output_tokens=2]' }] });
  eq([msg.type, msg.content[0].text, msg.usage.output_tokens], ['message', 'tok tok', 2], 'message');
});

await check('anthropic messages.stream through the gateway: text events and finalMessage usage', async () => {
  const stream = anthropic.messages.stream({ model: 'claude-sonnet-4-6', max_tokens: 10, messages: [{ role: 'user', content: 'Stream [fake:output_tokens=4]' }] });
  const deltas = [];
  stream.on('text', (d) => deltas.push(d));
  const msg = await stream.finalMessage();
  eq([deltas.length, msg.content[0].text, msg.usage.output_tokens], [4, 'tok tok tok tok', 4], 'stream');
});

const bad = process.env.GW_BAD_TOKEN || 'not-a-gateway-token';
await check('openai with a wrong token: AuthenticationError 401 in OpenAI\'s shape', async () => {
  const client = new OpenAI({ apiKey: bad, baseURL: env('GW_OPENAI_URL'), maxRetries: 0 });
  const e = await rejects(() => client.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] }));
  assert(e instanceof OpenAI.AuthenticationError, `got ${e?.constructor?.name}: ${e}`);
  eq([e.status, e.error.type, e.error.code], [401, 'invalid_request_error', 'invalid_api_key'], 'error');
});

await check('anthropic with a wrong token: AuthenticationError 401 in Anthropic\'s shape', async () => {
  const client = new Anthropic({ apiKey: bad, baseURL: env('GW_ANTHROPIC_URL'), maxRetries: 0 });
  const e = await rejects(() => client.messages.create({ model: 'claude-sonnet-4-6', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] }));
  assert(e instanceof Anthropic.AuthenticationError, `got ${e?.constructor?.name}: ${e}`);
  eq([e.status, e.error.type, e.error.error.type], [401, 'error', 'authentication_error'], 'error');
});

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
