#!/usr/bin/env python3
"""A keyfleet persistent handler that calls an OpenAI-style chat API.

Run by the worker with exec persistent: true (standard library only):

    jobs:
      exec:
        command: ["python3", "examples/python/handler.py"]
        persistent: true
        timeout: 2m

keyfleet starts it once per worker slot and keeps it. For each item it
writes one JSON line on stdin:

    {"id", "batch", "attempt", "credential_id", "secret", "item"}

and reads one JSON line from stdout, which echoes the item line's id:

    {"id": ..., "status": "ok" | "rate_limited" | "rejected" | "permanent" | "transient",
     "output": ..., "error": "...", "retry_after": seconds, "cost": tokens,
     "headers": {the reply's rate-limit headers}}

An item is a chat completions request ({"id": ..., "model": ...,
"messages": [...], ...}: sent as it is, without its "id"), or
{"id": ..., "prompt": "..."} with an optional "model" and "params" (more
request fields: temperature, max_tokens, ...). The request goes to
$OPENAI_BASE_URL/chat/completions (OPENAI_BASE_URL as the official SDKs
read it, such as http://127.0.0.1:8000/v1; default https://api.openai.com/v1)
with the item's key as a Bearer token, over one kept-alive connection per
handler process. EXAMPLE_API_URL, when set, is the whole endpoint URL
instead. The worker passes its environment on to the handler except its
secrets and its own KEYFLEET_* variables; exec.env in the config sets
more.

The reply maps to the answer; every answer carries the reply's
rate-limit headers (x-ratelimit-*, anthropic-ratelimit-*, retry-after,
retry-after-ms), from which keyfleet paces the key fleet-wide as it does
for its own http kind:
  2xx                    ok, output = the reply's JSON, cost = usage.total_tokens
  429                    rate_limited (the key rests as the headers say)
  429 insufficient_quota rejected (the key's quota is spent: waiting does not help)
  401                    rejected (the item runs on another key; a key that
                         refuses 3 different items in a row is disabled)
  other 4xx              permanent (the item is wrong: it is dead-lettered)
  5xx, network errors    transient (retried after a backoff)

Nothing but answers may go to stdout: print() goes to stderr here, and the
worker logs stderr with the secrets scrubbed. The key is never printed.
"""

import http.client
import json
import os
import sys
import urllib.parse

API_URL = (os.environ.get("EXAMPLE_API_URL")
           or os.environ.get("KEYFLEET_EXAMPLE_API_URL")  # set through exec.env
           or os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1").rstrip("/") + "/chat/completions")
MODEL = os.environ.get("EXAMPLE_MODEL", "gpt-4o-mini")
TIMEOUT = float(os.environ.get("EXAMPLE_TIMEOUT", "60"))

# The reply headers keyfleet paces a key from.
RATE_HEADERS = ("retry-after", "retry-after-ms")
RATE_HEADER_PREFIXES = ("x-ratelimit-", "anthropic-ratelimit-")

# stdout carries the answers only: anything printed goes to stderr.
ANSWERS = sys.stdout
sys.stdout = sys.stderr


class API:
    """One kept-alive connection to the API, opened again when it drops."""

    def __init__(self, url):
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise SystemExit("the API URL must be an http or https URL, got %r" % url)
        self.https = u.scheme == "https"
        self.host, self.port = u.hostname, u.port
        self.path = (u.path or "/") + ("?" + u.query if u.query else "")
        self.conn = None

    def _connect(self):
        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        self.conn = cls(self.host, self.port, timeout=TIMEOUT)

    def post(self, body, key):
        """POSTs body (bytes); returns (status, headers, reply bytes)."""
        headers = {"Authorization": "Bearer " + key, "Content-Type": "application/json"}
        for attempt in (1, 2):
            fresh = self.conn is None
            if fresh:
                self._connect()
            try:
                self.conn.request("POST", self.path, body=body, headers=headers)
                resp = self.conn.getresponse()
                data = resp.read()
                if resp.getheader("connection", "").lower() == "close":
                    self.close()
                return resp.status, resp, data
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                # A kept-alive connection the server closed meanwhile: try
                # once more on a new one.
                self.close()
                if fresh or attempt == 2:
                    raise
            except Exception:
                self.close()
                raise

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def rate_headers(resp):
    """The reply's rate-limit headers, for keyfleet to pace the key."""
    out = {}
    for name, value in resp.getheaders():
        n = name.lower()
        if n in RATE_HEADERS or n.startswith(RATE_HEADER_PREFIXES):
            out[n] = value
    return out


def error_text(data):
    """A short reason from an error reply."""
    try:
        err = json.loads(data).get("error")
    except (ValueError, AttributeError):
        return data[:200].decode("utf-8", "replace")
    if isinstance(err, dict):
        return err.get("message") or err.get("code") or json.dumps(err)
    return str(err)


def error_code(data):
    try:
        err = json.loads(data).get("error")
        return err.get("code") if isinstance(err, dict) else None
    except (ValueError, AttributeError):
        return None


def request_body(item):
    if not isinstance(item, dict):
        raise ValueError("the item is not a JSON object")
    if "messages" in item and "params" not in item and "prompt" not in item:
        # A chat completions request as it is, without its ID.
        return json.dumps({k: v for k, v in item.items() if k != "id"}).encode()
    if "messages" in item:
        messages = item["messages"]
    elif isinstance(item.get("prompt"), str):
        messages = [{"role": "user", "content": item["prompt"]}]
    else:
        raise ValueError('the item has neither "prompt" (a string) nor "messages"')
    body = {"model": item.get("model", MODEL), "messages": messages}
    params = item.get("params", {})
    if not isinstance(params, dict):
        raise ValueError('"params" is not a JSON object')
    body.update(params)
    return json.dumps(body).encode()


def handle(api, req):
    try:
        body = request_body(req["item"])
    except ValueError as e:
        return {"status": "permanent", "error": str(e)}
    try:
        status, resp, data = api.post(body, req["secret"])
    except (OSError, http.client.HTTPException) as e:
        # Refused, reset, timed out, DNS: the API or the network, not the item.
        return {"status": "transient", "error": "%s: %s" % (type(e).__name__, e)}
    if 200 <= status < 300:
        try:
            reply = json.loads(data)
        except ValueError:
            return {"status": "transient", "error": "HTTP %d with a reply that is not JSON" % status}
        answer = {"status": "ok", "output": reply, "headers": rate_headers(resp)}
        usage = reply.get("usage") if isinstance(reply, dict) else None
        if isinstance(usage, dict) and isinstance(usage.get("total_tokens"), (int, float)):
            answer["cost"] = usage["total_tokens"]
        return answer
    reason = "HTTP %d: %s" % (status, error_text(data))
    if status == 429:
        if error_code(data) == "insufficient_quota":
            return {"status": "rejected", "error": reason}
        return {"status": "rate_limited", "error": reason, "headers": rate_headers(resp)}
    if status == 401:
        return {"status": "rejected", "error": reason}
    if 400 <= status < 500:
        return {"status": "permanent", "error": reason}
    return {"status": "transient", "error": reason}


def main():
    api = API(API_URL)
    for line in sys.stdin.buffer:
        req = json.loads(line)
        try:
            answer = handle(api, req)
        except Exception as e:  # a bug here fails the item, not the process
            answer = {"status": "transient", "error": "handler: %s: %s" % (type(e).__name__, e)}
        answer["id"] = req["id"]
        ANSWERS.write(json.dumps(answer) + "\n")
        ANSWERS.flush()
    api.close()


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
