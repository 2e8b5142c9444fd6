#!/usr/bin/env node
// A keyfleet persistent handler on the official openai package.
//
// Run by the worker with exec persistent: true:
//
//   jobs:
//     exec:
//       command: ["node", "examples/node/handler.mjs"]
//       persistent: true
//       timeout: 2m
//
// (npm ci --prefix examples/node installs the package once.) keyfleet
// starts it once per worker slot and keeps it. For each item it writes one
// JSON line on stdin:
//
//   {"id", "batch", "attempt", "credential_id", "secret", "item"}
//
// and reads one JSON line from stdout, which echoes the item line's id:
//
//   {"id", "status": "ok" | "rate_limited" | "rejected" | "permanent" | "transient",
//    "output", "error", "cost", "headers": {the reply's rate-limit headers}}
//
// The item is a chat completions request ({"id", "model", "messages", ...}):
// it is sent as it is, without its "id", to $OPENAI_BASE_URL (as the SDK
// reads it; default https://api.openai.com/v1) with the item's key. The
// SDK's own retries are off: keyfleet retries, on another key when one is
// rate limited, and paces every key fleet-wide from the headers each
// answer passes on.
//
// Nothing but answers goes to stdout; the key is never printed.

import readline from 'node:readline';
import OpenAI from 'openai';

const RATE_HEADERS = /^(x-ratelimit-|anthropic-ratelimit-|retry-after$|retry-after-ms$)/i;

// One client per key, kept alive (its connections are reused).
const clients = new Map();
function client(credentialID, secret) {
  let c = clients.get(credentialID);
  if (!c || c.apiKey !== secret) {
    c = new OpenAI({apiKey: secret, maxRetries: 0, timeout: Number(process.env.EXAMPLE_TIMEOUT || 60) * 1000});
    clients.set(credentialID, c);
  }
  return c;
}

// rateHeaders keeps what keyfleet paces a key from.
function rateHeaders(headers) {
  const out = {};
  if (!headers) return out;
  const entries = typeof headers.entries === 'function' ? headers.entries() : Object.entries(headers);
  for (const [name, value] of entries) {
    if (RATE_HEADERS.test(name)) out[name.toLowerCase()] = String(value);
  }
  return out;
}

async function handle(req) {
  const item = req.item;
  if (item === null || typeof item !== 'object' || Array.isArray(item)) {
    return {status: 'permanent', error: 'the item is not a JSON object'};
  }
  const {id: _, ...body} = item;
  try {
    const {data, response} = await client(req.credential_id, req.secret).chat.completions.create(body).withResponse();
    const answer = {status: 'ok', output: data, headers: rateHeaders(response.headers)};
    if (data && data.usage && Number.isFinite(data.usage.total_tokens)) answer.cost = data.usage.total_tokens;
    return answer;
  } catch (err) {
    if (!(err instanceof OpenAI.APIError) || err.status === undefined) {
      // Refused, reset, timed out: the network or the API, not the item.
      return {status: 'transient', error: `${err.name}: ${err.message}`};
    }
    const answer = {error: `HTTP ${err.status}: ${err.message}`, headers: rateHeaders(err.headers)};
    if (err.status === 429) {
      answer.status = err.code === 'insufficient_quota' ? 'rejected' : 'rate_limited';
    } else if (err.status === 401 || err.status === 403) {
      answer.status = 'rejected';
    } else if (err.status >= 400 && err.status < 500) {
      answer.status = 'permanent';
    } else {
      answer.status = 'transient';
    }
    return answer;
  }
}

const lines = readline.createInterface({input: process.stdin, crlfDelay: Infinity});
for await (const line of lines) {
  let req;
  try {
    req = JSON.parse(line);
  } catch (err) {
    process.stderr.write(`not an item line: ${err.message}\n`);
    continue;
  }
  let answer;
  try {
    answer = await handle(req);
  } catch (err) {
    answer = {status: 'transient', error: `handler: ${err.name}: ${err.message}`};
  }
  answer.id = req.id;
  process.stdout.write(JSON.stringify(answer) + '\n');
}
