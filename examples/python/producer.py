#!/usr/bin/env python3
"""Enqueue a file of items over keyfleet's HTTP API, follow the batch, and
collect its results (standard library only).

    KEYFLEET_ADMIN_TOKEN=... producer dashboard --config kf.yaml \
        --admin-token-env KEYFLEET_ADMIN_TOKEN &
    KEYFLEET_ADMIN_TOKEN=... python3 examples/python/producer.py \
        --url http://127.0.0.1:8080 --kind exec --batch prompts-1 \
        items.jsonl -o results.jsonl

items.jsonl holds one JSON object per line, each with an "id" (or the
--id-field), as `producer enqueue` takes them. The enqueue is all or nothing and
idempotent: running it again for the same batch adds nothing twice. It
then prints the batch's progress every half second until every item is
done, and writes the results (JSON Lines, one per item) to -o (default:
stdout). It exits 1 if any item failed, 2 on a usage or API error.
"""

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

POLL_EVERY = 0.5


class APIError(Exception):
    pass


def call(method, url, token, body=None, headers=None, stream=False):
    """Sends one request; returns the response (stream) or its JSON."""
    req = urllib.request.Request(url, data=body, method=method, headers=dict(headers or {}))
    req.add_header("Authorization", "Bearer " + token)
    try:
        resp = urllib.request.urlopen(req, timeout=600)
    except urllib.error.HTTPError as e:
        detail = e.read(2000).decode("utf-8", "replace").strip()
        raise APIError("%s %s: HTTP %d: %s" % (method, url, e.code, detail)) from None
    except urllib.error.URLError as e:
        raise APIError("%s %s: %s" % (method, url, e.reason)) from None
    if stream:
        return resp
    with resp:
        return json.load(resp)


def enqueue(args, token):
    query = {"kind": args.kind, "batch": args.batch}
    if args.priority is not None:
        query["priority"] = args.priority
    if args.weight is not None:
        query["weight"] = args.weight
    if args.id_field:
        query["id_field"] = args.id_field
    url = "%s/api/batches?%s" % (args.url, urllib.parse.urlencode(query))
    with open(args.file, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        # The file is streamed, not read into memory.
        return call("POST", url, token, body=f, headers={
            "Content-Type": "application/x-ndjson", "Content-Length": str(size)})


def follow(args, token, batch):
    url = "%s/api/batches/%s" % (args.url, urllib.parse.quote(batch, safe=""))
    last = None
    while True:
        b = call("GET", url, token)
        line = "%s: %d/%d done (%d succeeded, %d failed, %d cancelled)" % (
            batch, b["done"], b["total"], b["succeeded"], b["failed"], b.get("cancelled", 0))
        if line != last:
            print(line, file=sys.stderr, flush=True)
            last = line
        if b["done"] >= b["total"]:
            return b
        time.sleep(POLL_EVERY)


def results(args, token, batch):
    url = "%s/api/batches/%s/results" % (args.url, urllib.parse.quote(batch, safe=""))
    out = open(args.output, "wb") if args.output != "-" else sys.stdout.buffer
    try:
        with call("GET", url, token, stream=True) as resp:
            n = 0
            for line in resp:
                out.write(line)
                n += 1
    finally:
        if out is not sys.stdout.buffer:
            out.close()
        else:
            out.flush()
    return n


def main():
    p = argparse.ArgumentParser(description="Enqueue a JSON Lines file over keyfleet's HTTP API, wait, write the results.")
    p.add_argument("file", help="JSON Lines file of items, each with an id")
    p.add_argument("--url", default="http://127.0.0.1:8080", help="producer dashboard's address (default %(default)s)")
    p.add_argument("--token-env", default="KEYFLEET_ADMIN_TOKEN",
                   help="variable holding the dashboard's admin token (default %(default)s)")
    p.add_argument("--kind", default="exec", help="job kind of the items (default %(default)s)")
    p.add_argument("--batch", required=True, help="batch ID (enqueueing it again adds nothing twice)")
    p.add_argument("--priority", type=int, help="batch priority (default: the fleet's)")
    p.add_argument("--weight", type=int, help="batch weight within its priority (default: the fleet's)")
    p.add_argument("--id-field", help="field holding each item's ID (default: the fleet's, id)")
    p.add_argument("-o", "--output", default="-", help="where to write the results (default: stdout)")
    args = p.parse_args()
    args.url = args.url.rstrip("/")
    token = os.environ.get(args.token_env, "")
    if not token:
        p.error("$%s is empty: it must hold the dashboard's admin token" % args.token_env)
    try:
        rep = enqueue(args, token)
        print("%s: %d items, %d new, %d already enqueued" % (rep["batch"], rep["items"], rep["new"], rep["duplicates"]),
              file=sys.stderr, flush=True)
        b = follow(args, token, rep["batch"])
        n = results(args, token, rep["batch"])
    except (APIError, OSError) as e:
        print("producer.py: %s" % e, file=sys.stderr)
        return 2
    print("%s: %d results written to %s" % (rep["batch"], n, args.output if args.output != "-" else "stdout"),
          file=sys.stderr)
    return 1 if b["failed"] > 0 else 0


if __name__ == "__main__":
    sys.exit(main())
