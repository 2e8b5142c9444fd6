// Package gateway serves the providers' own HTTP APIs on the pool's keys
// (docs/gateway.md): an application's interactive requests reach the
// API through the same keys, limits, pacing, key safety, spend and
// budgets as the batches, and ahead of every waiting batch item.
//
// A request's life (request.go):
//
//	route       the path names the kind (POST /<kind>/v1/chat/completions; without
//	            /<kind> when one kind serves the path): routes.go
//	auth        Authorization: Bearer <token> or x-api-key: <token>, one of the
//	            gateway's tokens, which names the tenant: auth.go
//	budget      a tenant with a budget reserves what the request can cost at most
//	            (spend.Ledger), before it waits for a key: spend.go
//	key         one acquire path with the batches: creds.Request{Interactive: true}
//	            queues ahead of every batch waiter, first come first served among
//	            the gateway's (pool.AcquireWith), for at most max_wait
//	send        httputil.ReverseProxy: the request byte for byte with the key's
//	            secret in the provider's auth header, at the kind's base URL or the
//	            key's own; the reply byte for byte, streamed as it arrives (FlushInterval
//	            -1), its usage read as it passes (tap.go): proxy.go
//	settle      the lease ends with the reply judged as a batch item's run is
//	            (jobs.ReplyError, executor.JudgeReply): cost from the usage, pacing from
//	            the rate-limit headers, a refusal as evidence about the key; the
//	            spend replaces the reservation
//
// A 429 from the API or a refused connection is sent again on another key
// (within max_wait) before anything went back to the caller; any other
// reply is the caller's. Errors of the gateway's own (401, 404, 429 after
// max_wait or for a budget) are in the provider's error shape
// (apierror.go).
package gateway
